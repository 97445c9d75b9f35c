"""Model endpoints: `create_llm(endpoint)` picks the wire format; providers are imported on use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .registry import DEFAULT_PROVIDER, PROVIDERS, REGISTRY, infer_provider, provider_class

if TYPE_CHECKING:
    from ..llm import LLM
    from ..prompts import PromptLoader
    from .base import Endpoint
    from .engine import HTTPProvider

__all__ = [
    "DEFAULT_PROVIDER",
    "PROVIDERS",
    "REGISTRY",
    "Endpoint",
    "create_llm",
    "infer_provider",
    "list_models",
    "provider_class",
]


def create_llm(endpoint: Endpoint, *, prompts: PromptLoader | None = None) -> LLM:
    """The `LLM` for `endpoint`: its provider (given or inferred from the URL) with the URL normalised."""
    return _provider(endpoint, prompts)


def list_models(endpoint: Endpoint) -> list[str]:
    """The model names the endpoint's server offers (`/v1/models`, `/api/tags`, ...), sorted."""
    return _provider(endpoint, None).list_models()


def _provider(endpoint: Endpoint, prompts: PromptLoader | None) -> HTTPProvider:
    resolved = endpoint.resolved()
    # Every class in the registry is an HTTPProvider; the registry types it only by what it reads itself.
    cls = cast("type[HTTPProvider]", provider_class(resolved.provider or DEFAULT_PROVIDER))
    return cls(resolved, prompts=prompts)


def __getattr__(name: str) -> Any:
    # `Endpoint` on first use: `mylm ask --help` lists the provider names, and importing the dataclasses behind
    # Endpoint (mylm.core.types) cost it ~15 ms.
    if name == "Endpoint":
        from .base import Endpoint

        globals()["Endpoint"] = Endpoint
        return Endpoint
    raise AttributeError(f"module 'mylm.providers' has no attribute {name!r}")
