"""Endpoint settings, provider names and the URL rules that turn what a user typed into a usable endpoint."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..core.errors import ConfigError
from ..core.types import Message
from ..llm import SAMPLING_OPTIONS
from .registry import PROVIDERS

if TYPE_CHECKING:
    from .failures import Failure

#: Local CPU models can take minutes over a long prompt before the first byte, so the idle limit is generous;
#: the run's deadline still bounds every call.
DEFAULT_READ_TIMEOUT = 300.0
DEFAULT_MAX_TOKENS = 4096
#: The most text (answer plus reasoning, in characters) one streamed reply may carry: 8 Mi, far beyond any
#: real answer, yet a bound on a server that never stops.
DEFAULT_MAX_RESPONSE_CHARS = 8 * 1024 * 1024


@dataclass(frozen=True)
class Endpoint:
    """Everything needed to reach one model endpoint; `api_key` stays out of `repr` (and so out of logs)."""

    #: One of `registry.PROVIDERS`; None infers it from the URL where unambiguous, else `openai`.
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
    #: The cap on one streamed reply's decoded text; the wire's framing (~40 bytes a token in SSE) is not
    #: counted.
    max_response_chars: int = DEFAULT_MAX_RESPONSE_CHARS

    def __post_init__(self) -> None:
        if self.provider is not None and self.provider not in PROVIDERS:
            raise ConfigError(f"unknown provider {self.provider!r}; choose one of {', '.join(PROVIDERS)}")
        if self.max_tokens <= 0:
            raise ConfigError(f"max_tokens must be positive, not {self.max_tokens}")
        if self.max_response_chars <= 0:
            raise ConfigError(f"max_response_chars must be positive, not {self.max_response_chars}")
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
        from .registry import DEFAULT_PROVIDER, infer_provider, provider_class

        provider = self.provider or (infer_provider(self.base_url) if self.base_url else DEFAULT_PROVIDER)
        cls = provider_class(provider)
        base_url = cls.normalise_base_url(self.base_url or cls.default_base_url)
        return dataclasses.replace(self, provider=provider, base_url=base_url)

    @property
    def key_hint(self) -> str:
        """How the user sets the key, for error messages (never the key itself)."""
        if self.api_key_source:
            return self.api_key_source
        from .registry import FALLBACK_PROVIDER, provider_class

        names = ("MYLM_API_KEY", *provider_class(self.provider or FALLBACK_PROVIDER).key_vars)
        return " or ".join(names) + " (or --api-key)"


def normalise_base_url(provider: str, base_url: str) -> str:
    """Strip a pasted route and trailing slashes, as the provider's class does it."""
    from .registry import provider_class

    return provider_class(provider).normalise_base_url(base_url)


def strip_route(base_url: str, suffixes: Sequence[str]) -> str:
    """The URL without trailing slashes and without the first of `suffixes` it ends with (a pasted route)."""
    url = base_url.strip().rstrip("/")
    for suffix in suffixes:
        if url.endswith(suffix):
            return url[: -len(suffix)].rstrip("/")
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


def refused_sampling(failure: Failure, quirks: Collection[str]) -> str | None:
    """The quirk `no_OPTION` for a sampling option that a 400 blames, or None.

    Models refuse options their API otherwise has (OpenAI's reasoning models `temperature`, newer Claude models
    any sampling option, or `temperature` and `top_p` together; OpenAI itself llama.cpp's `top_k`): the call is
    sent again without it, as for a refused `stop`. The options are tried from the least to the most telling, so
    when a pair is refused together the temperature is what stays."""
    for option in reversed(SAMPLING_OPTIONS):
        if f"no_{option}" not in quirks and failure.blames(option):
            return f"no_{option}"
    return None


def without_refused(body: dict[str, Any], quirks: Collection[str]) -> dict[str, Any]:
    """`body` without the sampling options the endpoint has refused (`refused_sampling`)."""
    for option in SAMPLING_OPTIONS:
        if f"no_{option}" in quirks:
            body.pop(option, None)
    return body


_NO_STOP_MODEL = re.compile(r"^(o3(?!-mini)|o4|gpt-5)", re.IGNORECASE)


def model_rejects_stop(model: str | None) -> bool:
    """Whether the model is known to reject a `stop` field (OpenAI's o3/o4 and gpt-5 families)."""
    return bool(model) and bool(_NO_STOP_MODEL.match((model or "").rsplit("/", 1)[-1]))
