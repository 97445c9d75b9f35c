"""The batch's rate gate around a real provider: every kind of chunk passes it, and what it generated is counted."""

from __future__ import annotations

import dataclasses

from mylm.batch import GatedLLM, RateGate
from mylm.llm import FinishChunk, NativeTools, ToolCallChunk
from mylm.providers import Endpoint, create_llm
from tests.providers.helpers import FAST_RETRY, request
from tests.providers.servers import Completion, OpenAIServer

ARGUMENTS = '{"city": "Paris", "days": 2}'


def test_native_tool_call_pieces_pass_the_gate_and_count_as_generated_text() -> None:
    # A request with native tools streams ToolCallChunks, which carry arguments, not text: the gate once read
    # `.text` off every chunk that was not a finish and failed on the first call piece.
    call = {"id": "call_1", "name": "get_weather", "arguments": ARGUMENTS}
    with OpenAIServer([Completion("", tool_calls=[call])], usage=False) as server:
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        llm.retry = FAST_RETRY  # type: ignore[attr-defined]
        counted: list[int] = []
        gated = GatedLLM(llm, RateGate(2, clock=lambda: 0.0), on_tokens=counted.append)
        native = NativeTools(
            messages=({"role": "user", "content": "The weather in Paris?"},),
            tools=({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},),
        )
        chunks = list(gated.stream(dataclasses.replace(request("The weather in Paris?"), native=native)))
    pieces = [chunk for chunk in chunks if isinstance(chunk, ToolCallChunk)]
    assert "".join(piece.arguments for piece in pieces) == ARGUMENTS
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].usage is None
    # No usage from the server: the estimate is about four characters a token, of the arguments generated.
    assert counted == [(len(ARGUMENTS) + 3) // 4]
