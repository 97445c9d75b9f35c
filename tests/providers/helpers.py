"""Small helpers shared by the provider tests: requests, collecting a stream, a fast retry policy."""

from __future__ import annotations

import time
from typing import Iterable, Iterator

from mylm.core.cancel import CancelToken
from mylm.llm import FinishChunk, LLMChunk, LLMRequest, ReasoningChunk, TextChunk
from mylm.protocol.stops import DEFAULT_STOPS
from mylm.providers.failures import RetryPolicy
from mylm.core.types import Message

#: Retries without real waiting, and a fixed jitter, so retry tests are fast and deterministic.
FAST_RETRY = RetryPolicy(base_delay=0.001, max_delay=0.01, max_retry_after=30.0, random=lambda: 0.0)
#: Generous bound that only catches hangs; no test asserts on timing beyond it.
HANG_GUARD = 30.0

TOOL_CALL = (
    '<tool_code>\n<name>execute_command</name>\n<parameters>\n{"command": "ls"}\n</parameters>\n</tool_code>'
)


def request(
    user: str = "List the files.",
    *,
    stop: tuple[str, ...] = DEFAULT_STOPS,
    max_tokens: int | None = None,
    timeout: float | None = HANG_GUARD,
    cancel: CancelToken | None = None,
) -> LLMRequest:
    """A two-message request with mylm's stops and a hang-catching deadline."""
    return LLMRequest(
        messages=(Message("system", "You are a test."), Message("user", user)),
        stop=stop,
        max_tokens=max_tokens,
        deadline=None if timeout is None else time.monotonic() + timeout,
        cancel=cancel,
    )


def read_until_call(chunks: Iterator[LLMChunk]) -> str:
    """Read text until a closing `</tool_code>` appears, then close the stream, as the agent does."""
    seen = ""
    for chunk in chunks:
        seen += chunk.text if isinstance(chunk, TextChunk) else ""
        if "</tool_code>" in seen:
            break
    chunks.close()  # type: ignore[attr-defined]
    return seen


def collect(chunks: Iterable[LLMChunk]) -> tuple[str, str, FinishChunk | None]:
    """(text, reasoning, finish) of a whole stream; asserts at most one finish, and that it comes last."""
    text, reasoning, finish = [], [], None
    for chunk in chunks:
        assert finish is None, "nothing may follow the finish chunk"
        if isinstance(chunk, TextChunk):
            text.append(chunk.text)
        elif isinstance(chunk, ReasoningChunk):
            reasoning.append(chunk.text)
        else:
            finish = chunk
    return "".join(text), "".join(reasoning), finish
