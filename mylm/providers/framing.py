"""Stream framing: bytes into lines (bounded), lines into SSE events or NDJSON objects."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ..errors import StreamError
from .transport import MAX_LINE_BYTES


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event: its name (`message` unless named) and its data lines joined by newlines."""

    event: str
    data: str


def iter_lines(chunks: Iterable[bytes], *, limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Split a byte stream into lines (LF or CRLF); a line longer than `limit` bytes is an error.

    Lines are split on bytes and decoded whole, so a UTF-8 character split across chunks decodes intact, and
    invalid bytes become U+FFFD instead of an exception. Each chunk is scanned once (no rescanning).
    """
    buffer = bytearray()
    for chunk in chunks:
        start = len(buffer)
        buffer += chunk
        begin = 0
        while True:
            end = buffer.find(b"\n", max(start, begin))
            if end < 0:
                break
            yield _decode(buffer[begin:end])
            begin = end + 1
        if begin:
            del buffer[:begin]
        if len(buffer) > limit:
            error = StreamError(f"the endpoint sent a line longer than {limit // 1024} KiB; stopped reading")
            error.retryable = False
            raise error
    if buffer:
        yield _decode(buffer)


def _decode(line: bytes | bytearray) -> str:
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.decode("utf-8", errors="replace")


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Server-sent events: `data:` lines up to a blank line, `event:` names; `:` comment pings skipped.

    llama.cpp's older servers send failures as an `error: {...}` line, which the SSE spec ignores; it becomes
    an `error` event here so the failure is not lost.
    """
    name, data = "", list[str]()
    for line in lines:
        if not line:
            if data:
                yield SSEEvent(name or "message", "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "error":
            name = "error"
            data.append(value)
    if data:  # some servers (Gemini) end the stream without a final blank line
        yield SSEEvent(name or "message", "\n".join(data))


def sse_json(event: SSEEvent) -> list[Any]:
    """The JSON objects in an event's data; tolerates servers that omit the blank line between events."""
    try:
        return [json.loads(event.data)]
    except ValueError:
        pass
    except RecursionError:
        raise _too_deep() from None
    objects = []
    for line in event.data.split("\n"):
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
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep() from None
    except ValueError:
        shown = text if len(text) <= 80 else text[:79] + "…"
        raise StreamError(f"the endpoint sent something that is not JSON: {shown!r}") from None
