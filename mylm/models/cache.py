"""The user's model cache: where pulled GGUF files live, what is there, and which model a name means."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.paths import cache_dir

#: Overrides the cache folder (tests, shared machines); else `${XDG_CACHE_HOME:-~/.cache}/mylm/models`.
MODELS_DIR_ENV = "MYLM_MODELS_DIR"
#: The model `mylm ask` suggests pulling when nothing is configured and nothing is cached: the quick start's.
SUGGESTED = "qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class CachedModel:
    """A GGUF file in the cache."""

    name: str
    path: Path
    size: int
    #: When it was pulled (the file's modification time).
    mtime: float


def models_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The folder pulled models go to."""
    env = os.environ if environ is None else environ
    if env.get(MODELS_DIR_ENV):
        return Path(env[MODELS_DIR_ENV]).expanduser()
    return cache_dir(env) / "models"


def cached_models(directory: Path | None = None) -> list[CachedModel]:
    """Every cached model, by name (unfinished downloads are hidden files and not listed)."""
    folder = directory or models_dir()
    found = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".gguf") or not entry.is_file():
            continue
        stat = entry.stat()
        found.append(CachedModel(entry.name[: -len(".gguf")], Path(entry.path), stat.st_size, stat.st_mtime))
    return sorted(found, key=lambda m: m.name)


def default_model(directory: Path | None = None) -> CachedModel | None:
    """The model used when none is named: the most recently pulled one."""
    models = cached_models(directory)
    return max(models, key=lambda m: (m.mtime, m.name)) if models else None


def find_model(name: str, directory: Path | None = None) -> CachedModel | None:
    """The cached model called `name`, if any."""
    return next((m for m in cached_models(directory) if m.name == name), None)


def resolve_model(spec: str | None, directory: Path | None = None) -> Path:
    """The GGUF file `--model` means: a path, a cached model's name, or (None) the default cached model."""
    from .catalogue import CATALOGUE

    if not spec:
        chosen = default_model(directory)
        if chosen is None:
            raise ConfigError(no_model_message())
        return chosen.path
    cached = None if os.sep in spec or spec.endswith(".gguf") else find_model(spec, directory)
    if cached is not None:
        return cached.path
    if spec in CATALOGUE:
        raise ConfigError(f"model {spec!r} is not downloaded yet: `mylm models pull {spec}` fetches it")
    path = Path(spec).expanduser()
    if not path.exists():
        raise ConfigError(
            f"model file {spec} does not exist (nor is it a cached model: `mylm models list --local` shows "
            f"those, `mylm models pull {SUGGESTED}` fetches a small one)"
        )
    return path


def no_model_message() -> str:
    """What to do when the local provider has no model at all."""
    from .catalogue import CATALOGUE

    size = CATALOGUE[SUGGESTED].size
    shown = f" ({size / 1e9:.1f} GB)" if size else ""
    return (
        f"no local model is downloaded: `mylm models pull {SUGGESTED}` fetches a small one{shown}, "
        "or point mylm at a model server with --base-url / MYLM_BASE_URL"
    )
