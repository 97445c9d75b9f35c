"""A deterministic scripted LLM for testing agents: replays completions, records requests, fails loudly on over-run."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from ..core.types import Usage
from ..llm import FinishChunk, LLMChunk, LLMRequest, ReasoningChunk, TextChunk

StopBehaviour = Literal["honour", "ignore", "include"]


class ScriptExhaustedError(AssertionError):
    """The agent asked the scripted LLM for more completions than the script holds."""


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted completion, with optional chunking, reasoning, finish reason and usage."""

    text: str = ""
    #: How to split `text` into stream chunks; by default it is cut into small pieces.
    chunks: Sequence[str] | None = None
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


ScriptItem = str | ScriptedReply | BaseException


class ScriptedLLM:
    """An `LLM` that replays a script: each request gets the next completion (or raises the next exception).

    `stops` says how it treats the request's stop strings, like the servers it stands in for: `honour` cuts the
    text before the first stop and drops it (OpenAI, llama.cpp), `include` keeps the stop string (TGI), and
    `ignore` streams everything (servers that ignore stops). Every request is kept in `requests`, and
    `closed_early` counts streams the consumer abandoned before their end.

    mylm's side question whether a called tool fits the question (`purpose == "fit"`, `agent.fit`) is not a turn
    of the script: it is answered from `fits` (the next answer each time, the last one once they run out; by
    default "Yes") and kept in `probes`; so is its question whether the task asks for one thing or several
    (`purpose == "count"`), answered from `counts` (by default "Several": every call goes out).
    """

    def __init__(
        self, script: Iterable[ScriptItem], *, chunk_size: int = 7, stops: StopBehaviour = "honour",
        fits: bool | Sequence[bool] = True, counts: Sequence[str] = ("Several",),
    ) -> None:
        self._script: list[ScriptItem] = list(script)
        self._next = 0
        self.chunk_size = chunk_size
        self.stops = stops
        self.requests: list[LLMRequest] = []
        self.closed_early = 0
        self._fits = [fits] if isinstance(fits, bool) else list(fits) or [True]
        self._counts = list(counts) or ["Several"]
        self._counted = 0
        self.probes: list[LLMRequest] = []

    @property
    def remaining(self) -> int:
        """How many scripted items have not been used yet."""
        return len(self._script) - self._next

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Replay the next scripted completion for `request`."""
        if request.purpose == "count":
            self.probes.append(request)
            self._counted += 1
            return self._replay(ScriptedReply(self._counts[min(self._counted, len(self._counts)) - 1]), request)
        if request.purpose == "fit":
            self.probes.append(request)
            asked = sum(p.purpose == "fit" for p in self.probes)
            fits = self._fits[min(asked, len(self._fits)) - 1]
            return self._replay(ScriptedReply("Yes" if fits else "No"), request)
        self.requests.append(request)
        if self._next >= len(self._script):
            raise ScriptExhaustedError(
                f"ScriptedLLM got request {len(self.requests)} but its script holds only {len(self._script)}"
            )
        item = self._script[self._next]
        self._next += 1
        if isinstance(item, BaseException):
            raise item
        reply = item if isinstance(item, ScriptedReply) else ScriptedReply(item)
        return self._replay(reply, request)

    def _replay(self, reply: ScriptedReply, request: LLMRequest) -> Iterator[LLMChunk]:
        text, hit = self._apply_stops(reply.text, request.stop)
        chunks = list(reply.chunks) if reply.chunks is not None and hit is None else self._split(text)
        finished = False
        try:
            if reply.reasoning:
                yield ReasoningChunk(reply.reasoning)
            for piece in chunks:
                if request.cancel is not None:
                    request.cancel.raise_if_cancelled()
                yield TextChunk(piece)
            reason = reply.finish_reason or "stop"
            yield FinishChunk(reason=reason, stop_sequence=hit, usage=reply.usage)
            finished = True
        finally:
            if not finished:
                self.closed_early += 1

    def _apply_stops(self, text: str, stops: Sequence[str]) -> tuple[str, str | None]:
        if self.stops == "ignore":
            return text, None
        first, which = -1, None
        for stop in stops:
            i = text.find(stop)
            if i >= 0 and (first < 0 or i < first):
                first, which = i, stop
        if which is None:
            return text, None
        end = first + len(which) if self.stops == "include" else first
        return text[:end], which

    def _split(self, text: str) -> list[str]:
        size = max(1, self.chunk_size)
        return [text[i : i + size] for i in range(0, len(text), size)]

    def assert_complete(self) -> None:
        """Fail unless every scripted completion was requested."""
        if self.remaining:
            raise AssertionError(f"ScriptedLLM: {self.remaining} scripted completion(s) were never requested")


__all__ = ["ScriptExhaustedError", "ScriptedLLM", "ScriptedReply"]
