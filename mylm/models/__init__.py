"""Models: what is known about families (`registry`), and local GGUF files by name (catalogue, cache, pull)."""

from __future__ import annotations

from .cache import CachedModel, cached_models, default_model, find_model, models_dir
from .catalogue import CATALOGUE, CatalogueEntry, PackagePart

__all__ = [
    "CATALOGUE",
    "CachedModel",
    "CatalogueEntry",
    "PackagePart",
    "cached_models",
    "default_model",
    "find_model",
    "models_dir",
]
