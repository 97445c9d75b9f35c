"""The tool output cache (seed 003): oversized tool outputs are kept whole under a handle the model can page."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..core.errors import ToolError
from .base import Tool, tool

#: How many full outputs are kept; the oldest is dropped first (a handle to it then says so).
MAX_ENTRIES = 64
DEFAULT_PAGE = 10_000


@dataclass(frozen=True)
class Excerpt:
    """What the model sees of an output: the text (cut in the middle if needed) and how to get the rest."""

    text: str
    cut: int
    handle: str | None


def cut_middle(text: str, limit: int) -> tuple[str, int]:
    """Keep the head and tail of `text` within about `limit` characters; return it and how many were cut."""
    if len(text) <= limit:
        return text, 0
    half = limit // 2
    return text[:half] + "\n[...]\n" + text[-half:], len(text) - 2 * half


class OutputCache:
    """Keeps full tool outputs that were too large to show, addressable as `out_1`, `out_2`, ..."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[str, str] = {}
        self._counter = 0
        self._max = max_entries
        self._lock = threading.Lock()

    def excerpt(self, output: str, limit: int) -> Excerpt:
        """Cut `output` to `limit` characters (head and tail) and keep the whole of it under a new handle."""
        text, cut = cut_middle(output, limit)
        if not cut:
            return Excerpt(output, 0, None)
        with self._lock:
            self._counter += 1
            handle = f"out_{self._counter}"
            self._entries[handle] = output
            while len(self._entries) > self._max:
                self._entries.pop(next(iter(self._entries)))
        return Excerpt(text, cut, handle)

    def read(self, handle: str, offset: int = 0, limit: int = DEFAULT_PAGE) -> str:
        """One page of a kept output, with where the next page starts."""
        with self._lock:
            text = self._entries.get(handle)
            known = ", ".join(self._entries) or "none"
        if text is None:
            raise ToolError(f"no kept output '{handle}' (kept: {known}); run the tool again to get a new one")
        if offset < 0 or offset > len(text):
            raise ToolError(f"offset must be between 0 and {len(text)} for '{handle}'")
        limit = max(1, min(limit, DEFAULT_PAGE * 5))
        page = text[offset : offset + limit]
        end = offset + len(page)
        more = f"next offset {end}" if end < len(text) else "end of output"
        return f"[{handle}: characters {offset}-{end} of {len(text)}; {more}]\n{page}"

    def tool(self) -> Tool:
        """The `read_output` tool over this cache."""
        cache = self

        @tool(name="read_output")
        def read_output(handle: str, offset: int = 0, limit: int = DEFAULT_PAGE) -> str:
            """Read part of a long tool output that was cut, by the handle its observation gave.

            Args:
                handle: The handle from the observation, e.g. out_1.
                offset: Character offset to start at.
                limit: How many characters to read.
            """
            return cache.read(handle, offset, limit)

        return read_output
