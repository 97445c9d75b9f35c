"""Settings resolved from flags, a chosen profile, `MYLM_*`/`OPENAI_*` variables, the config files, then defaults.

Priority, highest first (each setting remembers where it came from, for `mylm config`):

1. flags;
2. the profile named by `-m NAME` (a `[profiles.NAME]` table in the user config file);
3. environment variables;
4. the profile named by `$MYLM_MODEL` or the file's `default_profile`;
5. the user config file's top-level keys;
6. defaults.

A profile's API key is read only from its own `api_key_env` variable (or `--api-key`), so a key meant for one
endpoint is never sent to another. The project file `./.mylm/config.toml` is not trusted (THREATS T13): it may add
instructions and tighten limits, nothing else; what it tries beyond that is ignored with a warning. A project's own
templates (`./.mylm/prompts`) are used only once the user trusts that directory: `trusted_projects` in the user
config file (`mylm prompts trust` adds it), or `MYLM_TRUST_PROJECT=1` for one run.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import ConfigError
from ..core.paths import config_dir

DEFAULT_BASE_URL = "http://localhost:11434"
CONFIG_FILE_NAME = "config.toml"
PROJECT_CONFIG = Path(".mylm") / "config.toml"
#: Set to 1 to trust the current directory's project templates for this run only.
TRUST_ENV = "MYLM_TRUST_PROJECT"


@dataclass(frozen=True)
class _Key:
    """How one setting is read: its environment variables, in priority order, and how to parse it."""

    env: tuple[str, ...]
    parse: Callable[[Any], Any]
    default: Any = None


def _positive_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("is not a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError("is not a whole number") from None
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _positive_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("is not a number") from None
    if number <= 0:
        raise ValueError("must be positive")
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _constrain(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("auto", "grammar", "off"):
        raise ValueError("must be auto, grammar or off")
    return text


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("is not true or false")


def _sandbox_mode(value: Any) -> str:
    if value not in ("auto", "off"):
        raise ValueError('must be "auto" or "off"')
    return str(value)


def _marker_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """`reasoning_markers = [["<reflect>", "</reflect>"]]`: reasoning dialects mylm has not met (see protocol.tags)."""
    from ..protocol.tags import with_markers

    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError('must be a list of [open, close] pairs, e.g. [["<reflect>", "</reflect>"]]')
    if not all(isinstance(pair, (list, tuple)) for pair in value):
        raise ValueError('must be a list of [open, close] pairs, e.g. [["<reflect>", "</reflect>"]]')
    with_markers(value)  # the table's own checks: two non-empty strings each
    return tuple((str(pair[0]), str(pair[1])) for pair in value)


def _table(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a table, e.g. { temperature = 0.2 }")
    return value


_KEYS: dict[str, _Key] = {
    "base_url": _Key(("MYLM_BASE_URL", "OPENAI_BASE_URL"), _text, DEFAULT_BASE_URL),
    "model": _Key(("MYLM_MODEL",), _text),
    "api_key": _Key(("MYLM_API_KEY", "OPENAI_API_KEY"), _text),
    "provider": _Key(("MYLM_PROVIDER",), _text),
    "chat_format": _Key(("MYLM_CHAT_FORMAT",), _text),
    "constrain": _Key(("MYLM_CONSTRAIN",), _constrain, "auto"),
    "max_tokens": _Key(("MYLM_MAX_TOKENS",), _positive_int, 4096),
    "max_response_chars": _Key(("MYLM_MAX_RESPONSE_CHARS",), _positive_int, 8 * 1024 * 1024),
    "context_tokens": _Key(("MYLM_CONTEXT_TOKENS",), _positive_int),
    "max_iterations": _Key(("MYLM_MAX_ITERATIONS",), _positive_int, 10),
    "timeout": _Key(("MYLM_TIMEOUT",), _positive_float, 120.0),
    "prompts": _Key(("MYLM_PROMPTS",), _text),
    "yes": _Key(("MYLM_YES",), _flag, False),
    "instructions": _Key((), _text, ""),
    "options": _Key((), _table, None),
    "reasoning_markers": _Key((), _marker_pairs, ()),
    # No environment variable and no project file: only the user (their config file or a flag) may loosen it.
    "sandbox": _Key((), _sandbox_mode, "auto"),
    "sandbox_network": _Key((), _flag, True),
    "sandbox_unix_sockets": _Key((), _flag, False),
    # Prompts and completions in exported traces: only the user's own config file (or a flag) turns it on.
    "otel_capture_content": _Key((), _flag, False),
}

#: Every setting, in the order `mylm config` shows them.
SETTING_NAMES = tuple(_KEYS)
#: Keys the config file may also hold that are read by other parts (tools, MCP servers) or by this module.
_FILE_ONLY = {"mcp", "profiles", "tools", "api_key_env", "default_profile", "trusted_projects"}
#: What a `[profiles.NAME]` table may set: an endpoint and how to talk to it.
PROFILE_KEYS = (
    "base_url", "model", "provider", "api_key_env", "chat_format", "constrain", "max_tokens",
    "max_response_chars", "context_tokens", "options",
)
#: Limits a project file may lower (never raise), and the flag it may only turn off.
_PROJECT_LIMITS = ("max_iterations", "timeout", "max_tokens")


@dataclass(frozen=True)
class Settings:
    """The effective settings, and where each came from (`flag`, `env NAME`, `profile P (...)`, `config FILE`, ...)."""

    base_url: str = DEFAULT_BASE_URL
    model: str | None = None
    api_key: str | None = None
    provider: str | None = None
    chat_format: str | None = None
    #: Grammar-constrained decoding: `auto` where the endpoint can, `grammar` insists, `off` never.
    constrain: str = "auto"
    max_tokens: int = 4096
    #: The most text one streamed reply may carry, in characters (decoded text, not wire bytes).
    max_response_chars: int = 8 * 1024 * 1024
    #: The model's context window in tokens: near it, older turns are summarised (compaction).
    context_tokens: int | None = None
    max_iterations: int = 10
    timeout: float = 120.0
    prompts: str | None = None
    yes: bool = False
    instructions: str = ""
    #: Provider options (temperature, top_p, ...) passed to the endpoint as they are.
    options: Mapping[str, Any] | None = None
    #: "auto": confine commands with the best sandbox the system has; "off": run them unconfined (a warning
    #: on every run).
    sandbox: str = "auto"
    #: Whether commands the user approved (workspace-write) may use the network.
    sandbox_network: bool = True
    sandbox_unix_sockets: bool = False
    #: More reasoning dialects (`[open, close]` pairs) for the parser, beyond `protocol.tags.REASONING_DIALECTS`.
    reasoning_markers: tuple[tuple[str, str], ...] = ()
    #: Whether exported traces carry prompt, completion and tool text (redacted), not only their shape.
    otel_capture_content: bool = False
    #: The profile in effect, if any.
    profile: str | None = None
    #: Everything else the config file holds (MCP servers, tools, ...), passed through as read.
    extra: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    #: Things the user should know about the settings (ignored project settings, a profile's unset key variable).
    warnings: tuple[str, ...] = ()
    #: Why the current directory's `./.mylm/prompts` may be used (`env MYLM_TRUST_PROJECT`, the config file), or
    #: None: the project is not trusted and its templates are ignored.
    project_trust: str | None = None

    @property
    def api_key_source(self) -> str | None:
        """Where the API key came from, as a name a user can act on (never the key itself)."""
        source = self.sources.get("api_key")
        return source.removeprefix("env ") if source else None


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's config file: `$MYLM_CONFIG`, else `config.toml` in mylm's user config dir."""
    env = os.environ if environ is None else environ
    if env.get("MYLM_CONFIG"):
        return Path(env["MYLM_CONFIG"])
    return config_dir(env) / CONFIG_FILE_NAME


def _tomllib() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    return tomllib


#: The most a config file may hold (they are a few KiB): a project's `.mylm/config.toml` linked to /dev/zero
#: must not fill memory.
MAX_CONFIG_BYTES = 1 << 20


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path` when it is a regular file of at most `limit` bytes, else a `ConfigError`. Opened
    without blocking and without becoming a controlling terminal, then checked on the open descriptor, so a
    FIFO or /dev/tty never waits for a writer or the keyboard and a link swapped after a check is not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"config file {path} is not a regular file (a device, FIFO or directory)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ConfigError(f"config file {path} is larger than {limit // 1024:,} KiB (config files are small)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_config_file(path: Path, *, known: set[str] | None = None) -> dict[str, Any]:
    """Parse a TOML config file (a missing file is an empty config); errors name the file and line."""
    tomllib = _tomllib()
    try:
        raw = _read_regular(path, MAX_CONFIG_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
        data: dict[str, Any] = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    allowed = known if known is not None else set(_KEYS) | _FILE_ONLY
    unknown = sorted(set(data) - allowed)
    if unknown:
        where = _line_of(text, unknown[0])
        listed = ", ".join(sorted(allowed))
        raise ConfigError(f"config file {path}{where}: unknown setting {unknown[0]!r} (known settings: {listed})")
    _check_profiles(path, text, data.get("profiles", {}))
    _check_trusted(path, text, data.get("trusted_projects", []))
    return data


def _check_trusted(path: Path, text: str, entries: Any) -> None:
    if not isinstance(entries, list) or not all(isinstance(e, str) and os.path.isabs(e) for e in entries):
        raise ConfigError(
            f"config file {path}{_line_of(text, 'trusted_projects')}: trusted_projects is a list of absolute "
            "directory paths (`mylm prompts trust` adds the current one)"
        )


def _check_profiles(path: Path, text: str, profiles: Any) -> None:
    if not isinstance(profiles, dict) or any(not isinstance(v, dict) for v in profiles.values()):
        raise ConfigError(f"config file {path}{_line_of(text, 'profiles')}: profiles are tables: [profiles.NAME]")
    for name, table in profiles.items():
        unknown = sorted(set(table) - set(PROFILE_KEYS))
        if unknown:
            where = _line_of(text, unknown[0], after=f"[profiles.{name}]")
            raise ConfigError(
                f"config file {path}{where}: profile {name!r} has unknown setting {unknown[0]!r} "
                f"(a profile may set: {', '.join(PROFILE_KEYS)})"
            )


def _line_in(path: Path, key: str, *, after: str = "") -> str:
    """`, line N` for `key` in the file at `path` (see `_line_of`), or nothing if it cannot be read."""
    try:
        return _line_of(path.read_text(encoding="utf-8"), key, after=after)
    except (OSError, UnicodeDecodeError):
        return ""


def section_error(path: Path, section: str, error: ConfigError) -> ConfigError:
    """`error` about table `[section]` of the config file at `path`, located: `config file PATH, line N: ...`.

    The key is the word after `[section]` in the message (the tools' own checks name it there)."""
    match = re.match(rf"\[{re.escape(section)}\] (?:has unknown key\(s\) )?(\w+)", error.message)
    line = _line_in(path, match.group(1), after=f"[{section}]") if match else ""
    if not line:
        line = _line_in(path, section.rpartition(".")[2], after="")
    return ConfigError(f"config file {path}{line}: {error.message}")


def _line_of(text: str, key: str, *, after: str = "") -> str:
    """`, line N` for the first line assigning `key` (after the line holding `after`), or nothing."""
    start = text.find(after) if after else 0
    # [ \t]*, not \s*: a blank line before the key must not be counted as the key's line.
    pattern = re.compile(rf"^[ \t]*[\"']?{re.escape(key)}[\"']?[ \t]*[=.\]]", re.MULTILINE)
    match = pattern.search(text, max(start, 0))
    if match is None:
        match = re.search(rf"^[ \t]*\[\s*{re.escape(key)}\b", text, re.MULTILINE)
    return f", line {text.count(chr(10), 0, match.start()) + 1}" if match else ""


@dataclass(frozen=True)
class _Layer:
    """One place settings can come from, with the source label `mylm config` shows."""

    values: Mapping[str, Any]
    source: str | Callable[[str], str]

    def label(self, name: str) -> str:
        return self.source if isinstance(self.source, str) else self.source(name)


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Resolve every setting by priority (see the module docstring). Reads the files on call, never at import."""
    env = os.environ if environ is None else environ
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    file_path = path or config_path(env)
    if path is None and env.get("MYLM_CONFIG") and not file_path.is_file():
        # Silently running with no config at all would hide the typo.
        raise ConfigError(f"MYLM_CONFIG names {file_path}, which is not a file")
    data = read_config_file(file_path)
    profiles: dict[str, dict[str, Any]] = data.get("profiles", {})
    profile, chosen_by = _choose_profile(flags, env, data, profiles, file_path)
    if chosen_by == "flag":
        flags.pop("model")
    env_values = _from_environment(env)
    if chosen_by == "env":
        env_values.pop("model")  # $MYLM_MODEL named the profile, not a model
    profile_layer = _Layer(profiles.get(profile or "", {}), f"profile {profile} ({file_path})")
    layers = [
        _Layer(flags, "flag"),
        *([profile_layer] if chosen_by == "flag" else []),
        _Layer({k: v for k, (v, _) in env_values.items()}, lambda name: env_values[name][1]),
        *([profile_layer] if chosen_by not in (None, "flag") else []),
        _Layer(data, f"config {file_path}"),
    ]
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, key in _KEYS.items():
        found = next((layer for layer in layers if name in layer.values), None)
        if found is None:
            if key.default is not None:
                values[name], sources[name] = key.default, "default"
            continue
        value, source = found.values[name], found.label(name)
        try:
            values[name] = key.parse(value)
        except (TypeError, ValueError) as error:
            if found.source in (f"config {file_path}", profile_layer.source):
                after = f"[profiles.{profile}]" if found.source == profile_layer.source else ""
                source = f"{found.label(name)}{_line_in(file_path, name, after=after)}"
            raise ConfigError(f"{name.replace('_', '-')} from {source}: {value!r} {error}") from None
        sources[name] = source
    if values.get("prompts") and not Path(values["prompts"]).is_dir():
        raise ConfigError(f"prompts from {sources['prompts']}: {values['prompts']} is not a directory")
    warnings: list[str] = []
    _resolve_key(values, sources, warnings, flags, env, data, profiles.get(profile or ""), profile, file_path)
    _apply_project(values, sources, warnings, (cwd or Path.cwd()) / PROJECT_CONFIG)
    extra = {k: v for k, v in data.items() if k in ("mcp", "tools")}
    trust = _project_trust(cwd or Path.cwd(), env, data, file_path)
    return Settings(
        **values, profile=profile, extra=extra, sources=sources, warnings=tuple(warnings), project_trust=trust
    )


def project_trust(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """Why `cwd`'s project templates may be used (`env MYLM_TRUST_PROJECT`, or the user config file), or None."""
    env = os.environ if environ is None else environ
    path = config_path(env)
    return _project_trust(cwd or Path.cwd(), env, read_config_file(path), path)


def _project_trust(cwd: Path, env: Mapping[str, str], data: Mapping[str, Any], path: Path) -> str | None:
    try:
        if _flag(env.get(TRUST_ENV, "")):
            return f"env {TRUST_ENV}"
    except ValueError:
        raise ConfigError(f"{TRUST_ENV}: {env[TRUST_ENV]!r} is not true or false") from None
    # Compared resolved, so a symlinked checkout and its target are one project.
    here = os.path.realpath(cwd)
    if any(os.path.realpath(entry) == here for entry in data.get("trusted_projects", [])):
        return f"trusted_projects in {path}"
    return None


def set_project_trust(project: Path, trusted: bool, *, path: Path | None = None) -> bool:
    """Add `project` (resolved) to `trusted_projects` in the user config file, or remove it; False if unchanged.

    Only that one assignment is rewritten (or added at the top, where top-level keys must be), so the rest of a
    hand-written file keeps its comments and layout; the result is checked, then replaces the file atomically.
    """
    file_path = Path(os.path.realpath(path or config_path()))  # a symlinked dotfile stays a symlink
    data = read_config_file(file_path)
    entry = os.path.realpath(project)
    current: list[str] = list(data.get("trusted_projects", []))
    listed = [e for e in current if os.path.realpath(e) == entry]
    if bool(listed) == trusted:
        return False
    wanted = [*current, entry] if trusted else [e for e in current if e not in listed]
    text = file_path.read_text(encoding="utf-8") if file_path.exists() else ""
    lines = text.splitlines(keepends=True)
    assignment = "trusted_projects = [" + ", ".join(_toml_string(e) for e in wanted) + "]\n"
    span = _assignment_span(lines, "trusted_projects")
    if span is None:
        lines.insert(0, assignment)
    else:
        lines[span[0]:span[1]] = [assignment]
    updated = "".join(lines)
    if _parse_toml(updated) != {**data, "trusted_projects": wanted}:
        raise ConfigError(f"could not update {file_path}; set trusted_projects = {wanted!r} there yourself")
    _replace_file(file_path, updated)
    return True


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _parse_toml(text: str) -> dict[str, Any]:
    tomllib = _tomllib()
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}
    return data


def _assignment_span(lines: list[str], key: str) -> tuple[int, int] | None:
    """The lines holding the top-level `key = ...` assignment (which may span lines), or None."""
    pattern = re.compile(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for start, line in enumerate(lines):
        if not pattern.match(line):
            continue
        # The shortest run of lines that parses on its own as exactly this key is the whole assignment.
        for end in range(start + 1, len(lines) + 1):
            if set(_parse_toml("".join(lines[start:end]))) == {key}:
                return start, end
    return None


def _replace_file(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (keeping its mode)."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _from_environment(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Each setting set in the environment: (value, `env NAME`), the first variable listed winning."""
    found: dict[str, tuple[str, str]] = {}
    for name, key in _KEYS.items():
        var = next((v for v in key.env if env.get(v)), None)
        if var is not None:
            found[name] = (env[var], f"env {var}")
    return found


def _choose_profile(
    flags: Mapping[str, Any], env: Mapping[str, str], data: Mapping[str, Any], profiles: Mapping[str, Any], path: Path
) -> tuple[str | None, str | None]:
    if flags.get("model") in profiles:
        return flags["model"], "flag"
    if "model" in flags:
        return None, None  # an explicit model name: no profile applies
    if env.get("MYLM_MODEL") in profiles:
        return env["MYLM_MODEL"], "env"
    default = data.get("default_profile")
    if default is not None:
        if default not in profiles:
            raise ConfigError(f"config file {path}: default_profile {default!r} is not a [profiles.NAME] table")
        return default, "config"
    return None, None


def _resolve_key(
    values: dict[str, Any],
    sources: dict[str, str],
    warnings: list[str],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    data: Mapping[str, Any],
    profile_table: Mapping[str, Any] | None,
    profile: str | None,
    path: Path,
) -> None:
    """The API key: `--api-key`; else a profile's own variable only; else MYLM_/OPENAI_ variables, then the file."""
    if "api_key" in flags:
        return
    values.pop("api_key", None)
    sources.pop("api_key", None)
    if profile_table is not None:
        var = profile_table.get("api_key_env")
        if isinstance(var, str) and env.get(var):
            values["api_key"], sources["api_key"] = env[var], f"env {var}"
        elif isinstance(var, str):
            warnings.append(f"profile {profile} reads its API key from ${var}, which is not set")
        return
    for var in _KEYS["api_key"].env:
        if env.get(var):
            values["api_key"], sources["api_key"] = env[var], f"env {var}"
            return
    if isinstance(data.get("api_key"), str):
        values["api_key"], sources["api_key"] = data["api_key"], f"config {path}"
    elif isinstance(data.get("api_key_env"), str) and env.get(data["api_key_env"]):
        var = data["api_key_env"]
        values["api_key"], sources["api_key"] = env[var], f"env {var}"


def _apply_project(values: dict[str, Any], sources: dict[str, str], warnings: list[str], path: Path) -> None:
    """Apply the untrusted project file: append instructions, lower limits, turn `yes` and the commands'
    network off; refuse the rest (it can never turn the sandbox off)."""
    data = read_config_file(path, known=set(_KEYS) | _FILE_ONLY)
    label = f"project {path}"
    for name, value in data.items():
        if name == "instructions" and isinstance(value, str):
            before = values.get("instructions", "")
            values["instructions"] = f"{before}\n\n{value}" if before else value
            sources["instructions"] = f"{sources['instructions']} + {label}" if before else label
        elif name in _PROJECT_LIMITS:
            try:
                number = _KEYS[name].parse(value)
            except (TypeError, ValueError) as error:
                raise ConfigError(f"{name.replace('_', '-')} from {label}: {value!r} {error}") from None
            if number > values[name]:
                warnings.append(f"ignoring {name!r} in {path}: a project's config may lower limits, not raise them")
            elif sources.get(name) != "flag" and number < values[name]:
                values[name], sources[name] = number, label
        elif name == "yes" and value is False:
            if sources.get("yes") != "flag":
                values["yes"], sources["yes"] = False, label
        elif name in ("sandbox_network", "sandbox_unix_sockets") and value is False:
            values[name], sources[name] = False, label  # tightening is fine
        else:
            warnings.append(
                f"ignoring {name!r} in {path}: a project's config may only add instructions and lower limits "
                "(endpoints, keys, templates and approvals come from your own config or flags)"
            )
