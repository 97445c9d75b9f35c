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

This module resolves the layers and project trust; every setting and its key are in `settings`, reading a
config file in `files`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .files import MAX_CONFIG_BYTES, _line_in, _tomllib, config_path, read_config_file, section_error
from .settings import (
    _FILE_ONLY,
    _KEYS,
    _PROJECT_LIMITS,
    DEFAULT_BASE_URL,
    PROJECT_CONFIG,
    SETTING_NAMES,
    TRUST_ENV,
    Settings,
    _flag,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "MAX_CONFIG_BYTES",
    "PROJECT_CONFIG",
    "SETTING_NAMES",
    "Settings",
    "config_path",
    "load_settings",
    "project_trust",
    "read_config_file",
    "section_error",
    "set_project_trust",
]


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
