"""Settings resolved from flags, then `MYLM_*` and `OPENAI_*` variables, then the config file, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import ConfigError

DEFAULT_BASE_URL = "http://localhost:11434"
CONFIG_FILE_NAME = "config.toml"


@dataclass(frozen=True)
class _Key:
    """How one setting is read: its environment variables, in priority order, and how to parse it."""

    env: tuple[str, ...]
    parse: Callable[[Any], Any]
    default: Any = None


def _positive_int(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError("is not a whole number") from None
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _positive_float(value: Any) -> float:
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


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("is not true or false")


_KEYS: dict[str, _Key] = {
    "base_url": _Key(("MYLM_BASE_URL", "OPENAI_BASE_URL"), _text, DEFAULT_BASE_URL),
    "model": _Key(("MYLM_MODEL",), _text),
    "api_key": _Key(("MYLM_API_KEY", "OPENAI_API_KEY"), _text),
    "provider": _Key(("MYLM_PROVIDER",), _text),
    "chat_format": _Key(("MYLM_CHAT_FORMAT",), _text),
    "max_tokens": _Key(("MYLM_MAX_TOKENS",), _positive_int, 4096),
    "max_iterations": _Key(("MYLM_MAX_ITERATIONS",), _positive_int, 10),
    "timeout": _Key(("MYLM_TIMEOUT",), _positive_float, 120.0),
    "prompts": _Key(("MYLM_PROMPTS",), _text),
    "yes": _Key(("MYLM_YES",), _flag, False),
    "instructions": _Key((), _text, ""),
}

#: Keys the config file may also hold that are read by other parts (endpoint options, tools, MCP servers).
_FILE_ONLY = {"options", "mcp", "profiles", "tools", "api_key_env"}


@dataclass(frozen=True)
class Settings:
    """The effective settings, and where each one came from (`flag`, `env NAME`, `config FILE`, `default`)."""

    base_url: str = DEFAULT_BASE_URL
    model: str | None = None
    api_key: str | None = None
    provider: str | None = None
    chat_format: str | None = None
    max_tokens: int = 4096
    max_iterations: int = 10
    timeout: float = 120.0
    prompts: str | None = None
    yes: bool = False
    instructions: str = ""
    #: Everything else the config file holds (endpoint options, MCP servers, ...), passed through as read.
    extra: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

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
    from .prompts import user_config_dir

    return user_config_dir() / CONFIG_FILE_NAME


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse the TOML config file (a missing file is an empty config); errors name the file and line."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    unknown = sorted(set(data) - set(_KEYS) - _FILE_ONLY)
    if unknown:
        known = ", ".join(sorted(set(_KEYS) | _FILE_ONLY))
        raise ConfigError(f"config file {path}: unknown setting {unknown[0]!r} (known settings: {known})")
    return data


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> Settings:
    """Resolve every setting by priority: flag, environment, config file, default. Reads files on call only."""
    env = os.environ if environ is None else environ
    file_path = path or config_path(env)
    data = read_config_file(file_path)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, key in _KEYS.items():
        value, source = _pick(name, key, flags or {}, env, data, file_path)
        if value is None:
            continue
        try:
            values[name] = key.parse(value) if source != "default" else value
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{name.replace('_', '-')} from {source}: {value!r} {error}") from None
        sources[name] = source
    if "api_key" not in values and isinstance(data.get("api_key_env"), str):
        var = data["api_key_env"]
        if env.get(var):
            values["api_key"], sources["api_key"] = env[var], f"env {var}"
    extra = {k: v for k, v in data.items() if k in _FILE_ONLY}
    return Settings(**values, extra=extra, sources=sources)


def _pick(
    name: str, key: _Key, flags: Mapping[str, Any], env: Mapping[str, str], data: Mapping[str, Any], path: Path
) -> tuple[Any, str]:
    if flags.get(name) is not None:
        return flags[name], "flag"
    for var in key.env:
        if env.get(var):
            return env[var], f"env {var}"
    if name in data:
        return data[name], f"config {path}"
    return key.default, "default"
