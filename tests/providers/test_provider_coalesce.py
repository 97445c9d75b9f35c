"""A read's events become one chunk: a fast server costs the agent once per read, a slow one still streams."""

from __future__ import annotations

import pytest

from mylm.core.errors import StreamError
from mylm.llm import FinishChunk, ReasoningChunk, TextChunk
from mylm.providers import Endpoint, create_llm
from mylm.providers.decoder import _coalesced
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



@pytest.mark.parametrize("datas", [
    ['{"choices":[{"index":0,"delta":{"content":"a"}}]}', '{"choices":[{"index":0,"delta":{"content":"b"}}]}',
     "[DONE]", '{"choices":[{"index":0,"delta":{"content":"after done"}}]}'],
    # Two objects in one event (a server without blank lines), junk after an object, an object then a bracket.
    ['{"choices":[{"delta":{"content":"x"}}]}\n{"choices":[{"delta":{"content":"y"}}]}',
     '{"choices":[{"delta":{"content":"z"}}]}'],
    ['{"choices":[{"delta":{"content":"x"}}]} ', '{"choices":[{"delta":{"content":"y"}}],"usage":'
     '{"prompt_tokens":3,"completion_tokens":2}}'],
    ['{"choices":[{"delta":{"content":"x"}}]}', '{"a":1}],[{"b":2}'],
    ['{"choices":[{"delta":{"content":"x"}}]}', '{"error":{"message":"overloaded"}}',
     '{"choices":[{"delta":{"content":"never"}}]}'],
    ['{"choices":[{"delta":{"content":"x","reasoning_content":"r"},"finish_reason":"length"}]}', "5", "{}"],
])
def test_a_reads_events_decoded_together_give_what_each_decoded_alone_gives(datas: list[str]) -> None:
    """The OpenAI decoder reads a read's plain JSON events in one pass (`feed_all`); whatever they hold, the
    chunks, the finish and the failure are those of feeding each event alone."""
    from mylm.providers.framing import SSEEvent

    def run(together: bool) -> tuple[list[object], object, object, object]:
        decoder = provider().new_decoder()  # type: ignore[attr-defined]
        events = [SSEEvent("message", data) for data in datas]
        out: list[object] = []
        failed = None
        try:
            if together:
                decoder.feed_all(events, out)
            else:
                for event in events:
                    out.extend(decoder.feed(event))
                    if decoder.done:
                        break
        except StreamError as error:
            failed = str(error)
        # Adjacent text chunks joined, as the provider joins them (a run of text events may be one chunk).
        return _coalesced(out), (decoder.reason, decoder.usage, decoder.done), failed, decoder.stop_sequence

    assert run(True) == run(False)
