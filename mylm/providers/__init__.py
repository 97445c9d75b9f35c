"""Model endpoints: `create_llm(endpoint)` picks the wire format; providers are imported on use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .base import DEFAULT_BASE_URL, DEFAULT_BASE_URLS, PROVIDERS, Endpoint, infer_provider

if TYPE_CHECKING:
    from ..llm import LLM
    from ..prompts import PromptLoader
    from .engine import HTTPProvider

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_BASE_URLS",
    "PROVIDERS",
    "Endpoint",
    "create_llm",
    "infer_provider",
    "list_models",
]

# Name -> (module, class). Importing a provider imports `requests`, which `mylm --help` must not pay for.
_CLASSES = {
    "openai": ("mylm.providers.openai", "OpenAIChat"),
    "openai-completions": ("mylm.providers.openai", "OpenAICompletions"),
    "ollama": ("mylm.providers.ollama", "Ollama"),
    "llamacpp": ("mylm.providers.llamacpp", "LlamaCpp"),
    "anthropic": ("mylm.providers.anthropic", "Anthropic"),
    "gemini": ("mylm.providers.gemini", "Gemini"),
    "local": ("mylm.providers.local", "LocalModel"),
}


def create_llm(endpoint: Endpoint, *, prompts: PromptLoader | None = None) -> LLM:
    """The `LLM` for `endpoint`: its provider (given or inferred from the URL) with the URL normalised."""
    return _provider(endpoint, prompts)


def list_models(endpoint: Endpoint) -> list[str]:
    """The model names the endpoint's server offers (`/v1/models`, `/api/tags`, ...), sorted."""
    return _provider(endpoint, None).list_models()


def _provider(endpoint: Endpoint, prompts: PromptLoader | None) -> HTTPProvider:
    # The local provider has no URL to resolve (and needs no `requests`).
    resolved = endpoint if endpoint.provider == "local" else endpoint.resolved()
    module_name, class_name = _CLASSES[resolved.provider or "openai"]
    cls = getattr(importlib.import_module(module_name), class_name)
    provider: HTTPProvider = cls(resolved, prompts=prompts)
    return provider
