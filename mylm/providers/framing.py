"""Stream framing: bytes into lines (bounded), lines into SSE events or NDJSON objects."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..core.errors import StreamError
from .transport import MAX_LINE_BYTES


class SSEEvent(NamedTuple):
    """One server-sent event: its name (`message` unless named) and its data lines joined by newlines.

    A tuple, not a frozen dataclass: a fast server's reply is hundreds of events, and a frozen dataclass's
    `__init__` (two `object.__setattr__` calls) cost a third of framing them (scripts/bench_serve.py)."""

    event: str
    data: str


class LineSplitter:
    """Splits a byte stream into lines (LF or CRLF) a read at a time; a line over `limit` bytes is an error.

    Lines are split on bytes and each read's complete lines are decoded at once, so a UTF-8 character split
    across reads decodes intact, and invalid bytes become U+FFFD instead of an exception. Working a read at a
    time (not a line at a time) lets a fast server's many events per read be handled as one batch.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._rest = b""
        self._overflow = False

    def feed(self, chunk: bytes) -> list[str]:
        """The lines completed by `chunk` (call `check()` after handling them)."""
        text = self.feed_text(chunk)
        return [] if text is None else lines_of(text)

    def feed_text(self, chunk: bytes) -> str | None:
        """`feed`'s lines as one text, joined by their line breaks (the `\r` of CRLF ends not removed: `lines_of`
        splits it as `feed` does); None when `chunk` completed no line."""
        self.check()
        data = self._rest + chunk if self._rest else bytes(chunk)
        end = data.rfind(b"\n")
        if end < 0:
            self._rest = data
            self._overflow = len(data) > self.limit
            return None
        self._rest = data[end + 1 :]
        self._overflow = len(self._rest) > self.limit
        # A line break is never part of a multi-byte character, so decoding many lines at once equals decoding
        # each line on its own.
        return data[:end].decode("utf-8", errors="replace")

    def check(self) -> None:
        """Raise if the line being gathered is already longer than the limit."""
        if self._overflow:
            kib = self.limit // 1024
            error = StreamError(f"the endpoint sent a line longer than {kib} KiB; stopped reading")
            error.retryable = False
            raise error

    def close(self) -> list[str]:
        """The last line, when the stream did not end with a line break."""
        text = self.close_text()
        return [] if text is None else lines_of(text)

    def close_text(self) -> str | None:
        """`close`'s last line (None: there is none)."""
        self.check()
        rest, self._rest = self._rest, b""
        return rest.decode("utf-8", errors="replace") if rest else None


def lines_of(text: str) -> list[str]:
    """The lines of a text `LineSplitter.feed_text` gave (LF or CRLF ends)."""
    lines = text.split("\n")
    if "\r" in text:
        lines = [line.removesuffix("\r") for line in lines]
    return lines


def iter_lines(chunks: Iterable[bytes], *, limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Split a byte stream into lines (LF or CRLF); a line longer than `limit` bytes is an error."""
    splitter = LineSplitter(limit)
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.close()


class SSEReader:
    """Server-sent events from lines: `data:` lines up to a blank line, `event:` names; `:` pings skipped.

    llama.cpp's older servers send failures as an `error: {...}` line, which the SSE spec ignores; it becomes
    an `error` event here so the failure is not lost.
    """

    def __init__(self) -> None:
        self._name = ""
        self._data: list[str] = []

    @property
    def clean(self) -> bool:
        """Whether no event is under way (the last line fed was blank, or none was): the next line begins one."""
        return not self._data and not self._name

    def feed(self, lines: Iterable[str]) -> list[SSEEvent]:
        """The events completed by `lines`."""
        events: list[SSEEvent] = []
        event = events.append
        name, data = self._name, self._data
        make = _new_event
        for line in lines:
            if not line:
                if data:
                    # One data line (nearly every event) is its own data: no join.
                    event(make(SSEEvent, (name or "message", data[0] if len(data) == 1 else "\n".join(data))))
                    data = []
                name = ""
                continue
            if line[:5] == "data:":  # nearly every line: the fast path
                data.append(line[6:] if line[5:6] == " " else line[5:])
                continue
            if line[0] == ":":
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "error":
                name = "error"
                data.append(value)
        self._name, self._data = name, data
        return events

    def close(self) -> list[SSEEvent]:
        """The last event, from servers (Gemini) that end the stream without a final blank line."""
        data, self._data = self._data, []
        return [SSEEvent(self._name or "message", "\n".join(data))] if data else []


#: `SSEEvent(name, data)` without the Python frame of a named tuple's `__new__` (a fifth of framing an event).
_new_event = tuple.__new__


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Server-sent events from lines (see `SSEReader`)."""
    reader = SSEReader()
    for line in lines:
        yield from reader.feed((line,))
    yield from reader.close()


#: The C scanner behind `json.loads` without its two Python wrappers (`loads`, `decode`): 1.1 µs an event
#: against 1.7 µs on this machine, a sixth of a streamed token's whole cost (scripts/bench_stream.py).
_raw_decode = json.JSONDecoder().raw_decode


#: What `_whole` returns for text that is not one JSON value alone.
_NOT_WHOLE = object()


def _whole(text: str) -> Any:
    """The JSON value `text` is, read by the C scanner when nothing surrounds it (nearly every event), else by
    `json.loads` (leading whitespace); `_NOT_WHOLE` for anything else (several objects, not JSON)."""
    try:
        value, end = _raw_decode(text)
    except ValueError:
        value, end = None, -1
    except RecursionError:
        raise _too_deep() from None
    if end == len(text):
        return value
    # The scanner takes no leading whitespace and stops after the first value: `json.loads` judges the rest.
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_WHOLE
    except RecursionError:
        raise _too_deep() from None


def sse_json(event: SSEEvent) -> list[Any]:
    """The JSON objects in an event's data; tolerates servers that omit the blank line between events."""
    data = event.data
    value = _whole(data)
    if value is not _NOT_WHOLE:
        return [value]
    objects = []
    for line in data.split("\n"):
        if line.strip():
            objects.append(_loads(line))
    return objects


def iter_ndjson(lines: Iterable[str]) -> Iterator[Any]:
    """Newline-delimited JSON objects (Ollama), blank lines skipped."""
    for line in lines:
        if line.strip():
            yield _loads(line)


def _too_deep() -> StreamError:
    # json's decoder nests one C call per level and stops at the interpreter's recursion limit (about 1000
    # levels): that is the cap on nesting. No model reply comes near it; a hostile server gets one error line.
    error = StreamError("the endpoint sent JSON nested too deeply to be a model reply; stopped reading")
    error.retryable = False
    return error


def _loads(text: str) -> Any:
    value = _whole(text)
    if value is _NOT_WHOLE:
        shown = text if len(text) <= 80 else text[:79] + "…"
        raise StreamError(f"the endpoint sent something that is not JSON: {shown!r}")
    return value
