"""Endpoint settings, provider names and the URL rules that turn what a user typed into a usable endpoint."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError
from ..types import Message

#: Every provider name `--provider` / `MYLM_PROVIDER` accepts, one per wire format.
#: `local` runs a GGUF in-process (no server; the `local` extra).
PROVIDERS = ("openai", "openai-completions", "ollama", "llamacpp", "anthropic", "gemini", "local")

#: Where mylm looks when nothing is configured: a local Ollama.
DEFAULT_BASE_URL = "http://localhost:11434"

#: A provider's own default server, used when the provider is named but no base URL is given.
DEFAULT_BASE_URLS: Mapping[str, str] = MappingProxyType(
    {
        "openai": "https://api.openai.com/v1",
        "openai-completions": "https://api.openai.com/v1",
        "ollama": DEFAULT_BASE_URL,
        "llamacpp": "http://localhost:8080",
        "anthropic": "https://api.anthropic.com",
        "gemini": "https://generativelanguage.googleapis.com",
        "local": "",
    }
)

#: The variables the providers' own SDKs read the key from, for configuration and error messages.
CONVENTIONAL_KEY_VARS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "openai": ("OPENAI_API_KEY",),
        "openai-completions": ("OPENAI_API_KEY",),
        "ollama": (),
        "llamacpp": (),
        "anthropic": ("ANTHROPIC_API_KEY",),
        "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        "local": (),
    }
)

#: Local CPU models can take minutes over a long prompt before the first byte, so the idle limit is generous;
#: the run's deadline still bounds every call.
DEFAULT_READ_TIMEOUT = 300.0
DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True)
class Endpoint:
    """Everything needed to reach one model endpoint; `api_key` stays out of `repr` (and so out of logs)."""

    #: One of `PROVIDERS`; None infers it from the URL where unambiguous, else `openai`.
    provider: str | None = None
    #: Empty means the provider's default server (a local Ollama when the provider is not given either).
    base_url: str = ""
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    #: Where the key came from (`MYLM_API_KEY`, `--api-key`, ...), named in authentication errors.
    api_key_source: str | None = None
    #: A chat format from `prompts/chat/` for raw-prompt endpoints (`chatml`, `llama3`, ...).
    chat_format: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    #: Extra body fields (temperature, num_ctx, ...), placed where each wire format expects them.
    options: Mapping[str, Any] = field(default_factory=dict)
    connect_timeout: float = 10.0
    read_timeout: float = DEFAULT_READ_TIMEOUT

    def __post_init__(self) -> None:
        if self.provider is not None and self.provider not in PROVIDERS:
            raise ConfigError(f"unknown provider {self.provider!r}; choose one of {', '.join(PROVIDERS)}")
        if self.max_tokens <= 0:
            raise ConfigError(f"max_tokens must be positive, not {self.max_tokens}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ConfigError("connect and read timeouts must be positive")
        if self.base_url and urlsplit(self.base_url).scheme not in ("http", "https"):
            raise ConfigError(
                f"base URL {redact_url(self.base_url)!r} must start with http:// or https:// "
                "(set it with --base-url or MYLM_BASE_URL)"
            )
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def resolved(self) -> Endpoint:
        """This endpoint with the provider decided and the base URL filled in and normalised."""
        provider = self.provider or (infer_provider(self.base_url) if self.base_url else "ollama")
        base_url = normalise_base_url(provider, self.base_url or DEFAULT_BASE_URLS[provider])
        return dataclasses.replace(self, provider=provider, base_url=base_url)

    @property
    def key_hint(self) -> str:
        """How the user sets the key, for error messages (never the key itself)."""
        if self.api_key_source:
            return self.api_key_source
        names = ("MYLM_API_KEY", *CONVENTIONAL_KEY_VARS.get(self.provider or "openai", ()))
        return " or ".join(names) + " (or --api-key)"


def infer_provider(base_url: str) -> str:
    """The provider a URL unambiguously belongs to, else `openai` (the format most servers speak)."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    if host == "api.anthropic.com":
        return "anthropic"
    if host == "generativelanguage.googleapis.com" and "/openai" not in path:
        return "gemini"
    # Ollama's own port with no OpenAI-style path is its native API; `.../v1` there is its OpenAI layer.
    if parts.port == 11434 and path in ("", "/api"):
        return "ollama"
    return "openai"


_ROUTE_SUFFIXES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "openai": ("/chat/completions", "/completions"),
        "openai-completions": ("/completions", "/chat/completions"),
        "ollama": ("/api/chat", "/api/generate", "/api", "/v1"),
        "llamacpp": ("/completion", "/completions", "/v1"),
        "anthropic": ("/v1/messages", "/messages"),
        "gemini": (),
    }
)


def normalise_base_url(provider: str, base_url: str) -> str:
    """Strip a pasted route and trailing slashes; a bare `http://host:port` for OpenAI gets `/v1`."""
    url = base_url.strip().rstrip("/")
    for suffix in _ROUTE_SUFFIXES.get(provider, ()):
        if url.endswith(suffix):
            url = url[: -len(suffix)].rstrip("/")
            break
    if provider in ("openai", "openai-completions") and urlsplit(url).path in ("", "/"):
        url += "/v1"
    return url


def redact_url(url: str) -> str:
    """The URL without credentials or query string, safe to show in messages and logs."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def merge_turns(messages: Sequence[Message]) -> tuple[str, list[Message]]:
    """Split off the system text and merge consecutive same-role turns, for APIs that demand alternation."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    turns: list[Message] = []
    for message in messages:
        if message.role == "system":
            continue
        if turns and turns[-1].role == message.role:
            turns[-1] = Message(message.role, turns[-1].content + "\n\n" + message.content)
        else:
            turns.append(message)
    return system, turns


_NO_STOP_MODEL = re.compile(r"^(o3(?!-mini)|o4|gpt-5)", re.IGNORECASE)


def model_rejects_stop(model: str | None) -> bool:
    """Whether the model is known to reject a `stop` field (OpenAI's o3/o4 and gpt-5 families)."""
    return bool(model) and bool(_NO_STOP_MODEL.match((model or "").rsplit("/", 1)[-1]))
