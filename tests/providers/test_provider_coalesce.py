"""A read's events become one chunk: a fast server costs the agent once per read, a slow one still streams."""

from __future__ import annotations

import pytest

from mylm.core.errors import StreamError
from mylm.llm import FinishChunk, ReasoningChunk, TextChunk
from mylm.providers import Endpoint, create_llm
from mylm.providers.framing import LineSplitter
from tests.providers.helpers import request
from tests.providers.servers import OpenAIServer, Raw, sse


def delta(**fields: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": fields, "finish_reason": None}]})


def provider() -> object:
    return create_llm(Endpoint(provider="openai", base_url="http://127.0.0.1:9/v1", model="m"))


def test_events_of_one_read_are_one_chunk_and_reads_stay_apart() -> None:
    llm = provider()
    reads = [delta(content="Hel"), delta(content="lo") + delta(content=", ") + delta(reasoning_content="hm")
             + delta(reasoning_content="m") + delta(content="world"), sse("[DONE]")]
    chunks = list(llm._decode(iter(reads), llm.new_decoder()))  # type: ignore[attr-defined]
    assert chunks == [TextChunk("Hel"), TextChunk("lo, "), ReasoningChunk("hmm"), TextChunk("world")]


def test_text_before_an_error_in_the_same_read_still_arrives() -> None:
    llm = provider()
    reads = [delta(content="partial ") + delta(content="answer") + sse({"error": {"message": "overloaded"}})]
    got: list[object] = []
    with pytest.raises(StreamError, match="overloaded"):
        for chunk in llm._decode(iter(reads), llm.new_decoder()):  # type: ignore[attr-defined]
            got.append(chunk)
    assert got == [TextChunk("partial answer")]


def test_a_whole_answer_in_one_read_over_http() -> None:
    body = b"".join(delta(content=w) for w in ("one ", "two ", "three")) + sse(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + sse("[DONE]")
    with OpenAIServer([Raw([body])]) as server:
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        chunks = list(llm.stream(request()))
    assert chunks[0] == TextChunk("one two three") and isinstance(chunks[-1], FinishChunk)


def test_an_overlong_line_fails_after_the_lines_before_it() -> None:
    splitter = LineSplitter(limit=10)
    assert splitter.feed(b"ok\r\n" + b"x" * 11) == ["ok"]
    with pytest.raises(StreamError, match="longer than"):
        splitter.check()
    assert LineSplitter().feed("é\n".encode()[:1]) == []  # half a character waits for its other half

