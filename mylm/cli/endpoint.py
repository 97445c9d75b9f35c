"""The endpoint a command really talks to: said by `mylm config` and the `chat` banner, saved in a session's
header, and taken back when the session resumes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Settings

#: The key of a session header that holds the endpoint in use (headers written before it have none).
HEADER_KEY = "endpoint"


@dataclass(frozen=True)
class InUse:
    """Where the model runs: a provider and its server's URL, or a GGUF file run in-process (`local`)."""

    provider: str
    #: The server's URL without credentials; "" for an in-process model.
    base_url: str
    #: The model name sent to the server, or for `local` the cached model's name or the GGUF's path.
    model: str | None
    chat_format: str | None
    #: For `local`, the GGUF file that runs (None when no model is downloaded yet).
    path: str | None = None

    def describe(self) -> str:
        """One phrase: `the local model smollm2-135m (in-process: /path.gguf)` or `m at ollama http://...`."""
        if self.provider == "local":
            if self.path is None:
                from ..models.cache import SUGGESTED

                return f"a local model in-process (none downloaded yet: `mylm models pull {SUGGESTED}`)"
            return f"the local model {self.model or self.path} (in-process: {self.path})"
        named = self.model or "the server's default model"
        return f"{named} at {self.base_url} ({self.provider})"

    def header(self) -> dict[str, Any]:
        """What a session's header records, so that resuming it reaches the same endpoint."""
        return {"provider": self.provider, "base_url": self.base_url or None, "model": self.model,
                "chat_format": self.chat_format}


def endpoint_in_use(settings: Settings) -> InUse:
    """The endpoint `settings` lead to, as `ask` and `chat` would build it (the in-process model when nothing is
    configured and the local engine is installed). Never raises for a model that cannot be found: it says so."""
    from ..core.errors import ConfigError
    from ..core.redact import public_url
    from .runner import make_endpoint

    try:
        endpoint = make_endpoint(settings).resolved()
    except ImportError:  # an installation without the HTTP providers: say what is configured
        return InUse(settings.provider or "openai", public_url(settings.base_url), settings.model,
                     settings.chat_format)
    provider = endpoint.provider or "openai"
    if provider != "local":
        return InUse(provider, public_url(endpoint.base_url), endpoint.model, endpoint.chat_format)
    from ..models.cache import default_model, find_model, resolve_model

    try:
        path = str(resolve_model(endpoint.model))
    except ConfigError:
        return InUse("local", "", endpoint.model, endpoint.chat_format)
    spec = endpoint.model
    if not spec:
        chosen = default_model()
        spec = chosen.name if chosen is not None else path
    elif find_model(spec) is None:
        spec = path  # a file named by its path: saved as the full path, so a resume from elsewhere finds it
    return InUse("local", "", spec, endpoint.chat_format, path)


def resumed_options(options: dict[str, Any], header: Mapping[str, Any]) -> dict[str, Any]:
    """The command's options with a resumed session's endpoint filled in where no flag names one.

    A flag naming the endpoint (`--base-url`, `-m`, `--provider`) replaces the session's endpoint as a whole;
    `--chat-format` replaces only its format. A session saved before endpoints were recorded keeps its profile
    or model, as before.
    """
    if any(options.get(name) for name in ("base_url", "model", "provider")):
        return options
    profile = header.get("profile")
    if isinstance(profile, str) and profile:
        return {**options, "model": profile}
    saved = header.get(HEADER_KEY)
    if not isinstance(saved, Mapping):
        model = header.get("model")
        return {**options, "model": model} if isinstance(model, str) and model else options
    from ..core.redact import REDACTED

    inherited = {name: saved.get(name) for name in ("base_url", "model", "provider", "chat_format")}
    if options.get("chat_format"):
        inherited.pop("chat_format")
    if REDACTED in str(inherited.get("base_url") or ""):
        # Its credentials were not saved: the configured URL (which has them) is the one to use.
        inherited.pop("base_url")
    return {**options, **{name: value for name, value in inherited.items() if isinstance(value, str) and value}}
