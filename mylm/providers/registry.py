"""The provider registry: one line per provider, naming the class that implements it (imported on use)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

from ..core.errors import ConfigError

#: Name -> `module:Class`. A provider is its module plus this one line; everything else it needs (default URL,
#: key variables, routes, stop limits, grammar support) are attributes of its class. Classes are imported on
#: use because importing one imports `requests`, which `mylm --help` must not pay for.
REGISTRY: Mapping[str, str] = MappingProxyType(
    {
        "openai": "mylm.providers.openai:OpenAIChat",
        "openai-completions": "mylm.providers.openai:OpenAICompletions",
        "ollama": "mylm.providers.ollama:Ollama",
        "llamacpp": "mylm.providers.llamacpp:LlamaCpp",
        "anthropic": "mylm.providers.anthropic:Anthropic",
        "gemini": "mylm.providers.gemini:Gemini",
        "local": "mylm.providers.local:LocalModel",
    }
)

#: Every provider name `--provider` / `MYLM_PROVIDER` accepts, one per wire format.
PROVIDERS: tuple[str, ...] = tuple(REGISTRY)

#: The provider used when nothing is configured (its default server is a local Ollama).
DEFAULT_PROVIDER = "ollama"
#: The provider of a URL no provider claims: the format most servers speak.
FALLBACK_PROVIDER = "openai"


class ProviderClass(Protocol):
    """What the registry and endpoint resolution read from a provider's class (an `engine.HTTPProvider`).

    Declared here rather than naming `HTTPProvider`, whose module needs `Endpoint`, whose resolution needs this
    registry: the registry stays below the engine.
    """

    default_base_url: str
    key_vars: tuple[str, ...]

    def claims(self, base_url: str) -> bool:
        """Whether a URL is unmistakably this provider's (its host or port)."""
        ...

    def normalise_base_url(self, base_url: str) -> str:
        """The base URL without a pasted route or trailing slashes."""
        ...


def provider_class(name: str) -> ProviderClass:
    """The class registered as `name`."""
    target = REGISTRY.get(name)
    if target is None:
        raise ConfigError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}")
    module_name, _, class_name = target.partition(":")
    cls: ProviderClass = getattr(importlib.import_module(module_name), class_name)
    return cls


def infer_provider(base_url: str) -> str:
    """The provider whose class claims the URL (its host or port is unambiguous), else `openai`."""
    for name in PROVIDERS:
        if name != FALLBACK_PROVIDER and provider_class(name).claims(base_url):
            return name
    return FALLBACK_PROVIDER
