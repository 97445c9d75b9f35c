"""This process's environment as a read-only snapshot, taken again only when `os.environ` has changed.

Each read of `os.environ` decodes, in Python, every name (and value) it touches: listing it cost ~25 µs a time
on the benchmark machine (docs/benchmarks.md), and every step of a run listed it more than once (the tool
output's redactor, the command's environment). The snapshot is checked against the table `os.environ` keeps
of its encoded names and values, which compares in C, so a variable set, changed or removed in any way
`os.environ` sees is seen here at the next call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any


class _Snapshot:
    """One state of the environment: its encoded table (to compare), decoded, and its sorted items."""

    __slots__ = ("encoded", "items", "mapping")

    def __init__(self, encoded: dict[Any, Any], decodekey: Callable[[Any], str],
                 decodevalue: Callable[[Any], str]) -> None:
        self.encoded = encoded
        decoded = {decodekey(k): decodevalue(v) for k, v in encoded.items()}
        self.mapping: Mapping[str, str] = MappingProxyType(decoded)
        self.items: tuple[tuple[str, str], ...] = tuple(sorted(decoded.items()))


_last: _Snapshot | None = None


def _current() -> _Snapshot | None:
    """The snapshot of `os.environ` as it is now, or None when it is not CPython's own mapping (a test may
    replace it with a dict)."""
    global _last
    environ = os.environ
    encoded = getattr(environ, "_data", None)
    if not isinstance(encoded, dict):
        return None
    last = _last
    if last is not None and last.encoded == encoded:
        return last
    # A copy, decoded from the copy: a change made meanwhile by another thread is seen at the next call.
    last = _Snapshot(encoded.copy(), environ.decodekey, environ.decodevalue)
    _last = last
    return last


def environment() -> Mapping[str, str]:
    """`os.environ` now, as a read-only mapping (the same object while nothing changes)."""
    snapshot = _current()
    return os.environ if snapshot is None else snapshot.mapping


def environment_items() -> tuple[tuple[str, str], ...]:
    """`os.environ`'s items now, sorted by name (the same tuple while nothing changes)."""
    snapshot = _current()
    return tuple(sorted(os.environ.items())) if snapshot is None else snapshot.items
