"""The model registry: known model families from the packaged `known.toml`, overridden by `models.toml`.

`lookup("qwen3:8b")` answers what mylm knows about a model by name: its context window, whether its API
accepts stop strings, how it reasons (`<think>` tags, and whether its chat template opens them), the chat
format for raw-completion routes, and the tool-call dialect its chat template teaches. Nothing is read at import; the files are read on first use and again when
they change.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from ..core.errors import ConfigError

USER_FILE_NAME = "models.toml"
_PACKAGED = Path(__file__).with_name("known.toml")

Reasoning = Literal["think", "separate"]


@dataclass(frozen=True)
class ModelInfo:
    """What is known about one model family."""

    family: str
    #: Shell-style patterns matched against the lower-cased model name without its `org/` prefix.
    match: tuple[str, ...]
    context_window: int | None = None
    #: Whether the API accepts stop strings (OpenAI's reasoning models refuse them).
    stop_strings: bool = True
    #: "think": reasons inside `<think>` tags in its text; "separate": the server sends reasoning apart; None.
    reasoning: Reasoning | None = None
    #: Its chat template writes the opening `<think>`, so a reply starts inside the reasoning.
    opens_think: bool = False
    #: The chat format for raw-completion routes (`chatml`, `llama3`, `mistral`, `gemma`), if known.
    chat_format: str | None = None
    #: The tool-call format its chat template teaches, if known: `hermes` is `<tool_call>{"name": …,
    #: "arguments": {…}}</tool_call>`, results in `<tool_response>` (Qwen2.5). The `tool_dialect = "auto"`
    #: setting speaks it (`protocol.dialects.resolve`).
    tool_dialect: str | None = None
    #: Where this entry comes from: `packaged`, or the user's file.
    source: str = "packaged"


_KEYS = {f.name for f in fields(ModelInfo)} - {"source"}
#: A parsed entry and the keys its table set (a user's entry for a packaged family changes only those).
_Entry = tuple[ModelInfo, "frozenset[str]"]


def user_registry_path() -> Path:
    """The user's override file: `models.toml` in mylm's config dir."""
    from ..core.paths import config_dir

    return config_dir() / USER_FILE_NAME


def normalise(model: str) -> str:
    """The name patterns are matched against: lower-case, without `org/` or `models/` prefixes or `.gguf`."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return name.removesuffix(".gguf")


def lookup(model: str | None, *, user_file: Path | None = None) -> ModelInfo | None:
    """What is known about `model` (by name), or None; the user's entries are tried before packaged ones."""
    if not model:
        return None
    name = normalise(model)
    for info in known_models(user_file=user_file):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in info.match):
            return info
    return None


def known_models(*, user_file: Path | None = None) -> tuple[ModelInfo, ...]:
    """Every known family in lookup order: the user's (merged onto packaged ones of the same family) first."""
    path = user_file if user_file is not None else user_registry_path()
    packaged = [info for info, _ in _read(_PACKAGED, "packaged")]
    return _merged(packaged, _read(path, str(path)) if path.is_file() else ())


def _merged(packaged: Sequence[ModelInfo], user: Sequence[_Entry]) -> tuple[ModelInfo, ...]:
    by_family = {info.family: info for info in packaged}
    mine = []
    for entry, given in user:
        base = by_family.pop(entry.family, None)
        if base is not None:
            changed = {k: getattr(entry, k) for k in given if k != "family"}
            entry = replace(base, source=entry.source, **changed)
        mine.append(entry)
    return (*mine, *(info for info in packaged if info.family in by_family))


_cache: dict[str, tuple[int, tuple[_Entry, ...]]] = {}


def _read(path: Path, source: str) -> tuple[_Entry, ...]:
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as error:
        raise ConfigError(f"cannot read the model registry {path}: {error.strerror}") from None
    cached = _cache.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    entries = _parse(path, source)
    _cache[str(path)] = (stamp, entries)
    return entries


def _parse(path: Path, source: str) -> tuple[_Entry, ...]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the model registry {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"model registry {path}: {error}") from None
    unknown = sorted(set(data) - {"model"})
    tables = data.get("model", [])
    if unknown or not isinstance(tables, list):
        raise ConfigError(f"model registry {path}: write each family as a [[model]] table")
    return tuple(_entry(path, source, i, table) for i, table in enumerate(tables, 1))


def _entry(path: Path, source: str, number: int, table: Any) -> _Entry:
    where = f"model registry {path}, [[model]] number {number}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    family = table.get("family")
    if not isinstance(family, str) or not family:
        raise ConfigError(f"{where}: `family` (a name) is required")
    values: dict[str, Any] = {"family": family}
    for key, value in table.items():
        if key != "family":
            values[key] = _checked(where, key, value)
    values.setdefault("match", ())
    return ModelInfo(**values, source=source), frozenset(table)


def _checked(where: str, key: str, value: Any) -> Any:
    ok: bool
    if key == "match":
        ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        value = tuple(v.lower() for v in value) if ok else value
    elif key == "context_window":
        ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    elif key in ("stop_strings", "opens_think"):
        ok = isinstance(value, bool)
    elif key == "reasoning":
        ok = value in ("think", "separate")
    else:  # chat_format, tool_dialect
        ok = isinstance(value, str) and bool(value)
    if not ok:
        expected = {
            "match": "a list of name patterns", "context_window": "a positive number of tokens",
            "stop_strings": "true or false", "opens_think": "true or false",
            "reasoning": '"think" or "separate"', "chat_format": "a chat format name",
            "tool_dialect": "a tool-call dialect name",
        }[key]
        raise ConfigError(f"{where}: {key} must be {expected}, not {value!r}")
    return value


def describe(info: ModelInfo) -> str:
    """One line for `mylm models`: the family and what is known about it."""
    parts = [info.family]
    if info.context_window:
        parts.append(f"context {info.context_window}")
    if info.reasoning == "think":
        parts.append("reasons in <think>" + (" (template opens it)" if info.opens_think else ""))
    elif info.reasoning == "separate":
        parts.append("reasoning sent apart")
    if not info.stop_strings:
        parts.append("no stop strings")
    if info.chat_format:
        parts.append(f"chat format {info.chat_format}")
    if info.tool_dialect:
        parts.append(f"tool calls {info.tool_dialect}")
    return ", ".join(parts)


__all__ = ["ModelInfo", "describe", "known_models", "lookup", "normalise", "user_registry_path"]
