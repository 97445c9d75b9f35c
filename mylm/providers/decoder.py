"""Decoding a wire format's stream: a `Decoder` turns each stream item (an SSE event, an NDJSON object) into
chunks and keeps what the stream said about how it finished; the helpers build the chunks every format sends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from ..core.errors import StreamError
from ..core.types import Usage
from ..llm import FinishChunk, LLMChunk, ReasoningChunk, TextChunk
from .failures import Place, stream_error


class Decoder(ABC):
    """One call's decoding state: wire items in, chunks out; remembers the finish hints and usage."""

    def __init__(self, place: Place, secret: str | None) -> None:
        self.place = place
        self.secret = secret
        #: The wire format's own end marker has arrived (`[DONE]`, `done: true`, `message_stop`, ...).
        self.done = False
        self.reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: Usage | None = None

    @abstractmethod
    def feed(self, item: Any) -> Iterable[LLMChunk]:
        """Chunks for one wire item (an `SSEEvent` or an NDJSON object)."""

    def feed_all(self, items: list[Any], out: list[LLMChunk]) -> None:
        """`feed` each of `items` in turn, appending their chunks to `out`, until the stream's end marker."""
        for item in items:
            out.extend(self.feed(item))
            if self.done:
                return

    def whole(self, document: Any) -> Iterable[LLMChunk]:
        """Chunks for a single JSON answer, from a server that ignored `stream: true`."""
        self.fail_on_error(document)
        raise StreamError(f"{self.place.url} answered with one JSON document instead of a stream")

    def fail_on_error(self, obj: Any) -> None:
        """Raise if `obj` is an error object (a failure reported inside a 200 answer)."""
        if isinstance(obj, dict) and (
            "error" in obj or obj.get("object") == "error" or obj.get("type") == "error"
        ):
            raise stream_error(obj, self.place, secret=self.secret)

    def complete_at_eof(self) -> bool:
        """Whether the stream may end here (without its end marker) and still be whole."""
        return self.done or self.reason is not None

    def finish(self) -> FinishChunk:
        """The final chunk."""
        return FinishChunk(reason=self.reason, stop_sequence=self.stop_sequence, usage=self.usage)


def _coalesced(chunks: list[LLMChunk]) -> list[LLMChunk]:
    """Adjacent text chunks joined into one, and adjacent reasoning chunks likewise (order kept)."""
    if len(chunks) < 2:
        return chunks
    out: list[LLMChunk] = []
    parts: list[str] = []
    kind: type | None = None
    for chunk in chunks:
        if type(chunk) is kind:
            parts.append(chunk.text)  # type: ignore[union-attr]
            continue
        if kind is not None:
            out.append(kind("".join(parts)))
        if isinstance(chunk, (TextChunk, ReasoningChunk)):
            kind, parts = type(chunk), [chunk.text]
        else:
            kind, parts = None, []
            out.append(chunk)
    if kind is not None:
        out.append(kind("".join(parts)))
    return out


def text_chunks(text: Any, reasoning: Any = None) -> list[LLMChunk]:
    """Reasoning then text chunks for the non-empty strings given (wire formats send empty deltas often); a list,
    not a generator: decoders call this once per token."""
    chunks: list[LLMChunk] = []
    if reasoning and isinstance(reasoning, str):
        chunks.append(ReasoningChunk(reasoning))
    if text and isinstance(text, str):
        chunks.append(TextChunk(text))
    return chunks


def usage_of(prompt: Any, completion: Any) -> Usage | None:
    """A `Usage` from two counts as the wire sent them (None when neither is a number)."""
    p = prompt if isinstance(prompt, int) else 0
    c = completion if isinstance(completion, int) else 0
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return None
    return Usage(p, c)
