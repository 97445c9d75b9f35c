"""Every setting mylm has: its config key, its `MYLM_*` variables, how its value is read and its default
(`_KEYS`), and the resolved `Settings`. Where a value comes from is decided in `mylm.config`
(`load_settings`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def _tool_dialect(value: Any) -> str:
    from ..protocol.dialects import DIALECT_SETTINGS

    text = str(value).strip().lower()
    if text not in DIALECT_SETTINGS:
        raise ValueError(f"must be {', '.join(DIALECT_SETTINGS[1:])} or auto")
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
    "tool_dialect": _Key(("MYLM_TOOL_DIALECT",), _tool_dialect, "mylm"),
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
    "base_url", "model", "provider", "api_key_env", "chat_format", "constrain", "tool_dialect", "max_tokens",
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
    #: The form of call the prompt teaches: `mylm` (`<tool_code>`), `hermes` (`<tool_call>`, Qwen2.5's), or
    #: `auto`: the model registry's dialect for the model, else `mylm` (see `mylm.protocol.dialects`).
    tool_dialect: str = "mylm"
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
