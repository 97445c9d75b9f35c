"""A model wrapped so that every completion it streams is kept as the endpoint sent it: what `mylm eval` reads a
miss from."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..llm import LLM, FinishChunk, LLMChunk, LLMRequest, TextChunk


@dataclass(frozen=True)
class Turn:
    """One model completion as the endpoint sent it."""

    text: str
    finish: FinishChunk | None
    seconds: float


class RecordingLLM:
    """Passes requests through to `inner` and keeps every completion's text, finish and duration: the turns in
    `turns`, side questions (`LLMRequest.purpose`, such as the fit check) in `probes`."""

    def __init__(self, inner: LLM) -> None:
        self.inner = inner
        self.turns: list[Turn] = []
        self.probes: list[Turn] = []

    def __getattr__(self, name: str) -> Any:
        # What the agent asks of its model beyond `stream` (its `endpoint` for the registry's tool dialect,
        # `opens_reasoning`...) is the wrapped model's: a recorded run must behave as an unrecorded one.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        started = time.perf_counter()
        text: list[str] = []
        finish: FinishChunk | None = None
        try:
            for chunk in self.inner.stream(request):
                if isinstance(chunk, TextChunk):
                    text.append(chunk.text)
                elif isinstance(chunk, FinishChunk):
                    finish = chunk
                yield chunk
        finally:
            # Also when the agent closes the stream early, once a whole call has arrived.
            kept = self.turns if request.purpose == "turn" else self.probes
            kept.append(Turn("".join(text), finish, time.perf_counter() - started))
