"""Chunk boundaries never matter: the same completion split anywhere gives the same run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mylm import Agent
from mylm.protocol.parser import StreamParser, format_tool_call, parse_completion
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.core.types import TextEvent, ToolCall

COMPLETIONS = [
    "Let me look.\n" + format_tool_call(ToolCall("echo", {"text": "a </tool_code> b \\\"q\\\""})),
    "<think>draft " + format_tool_call(ToolCall("echo", {"text": "no"})) + "</think>Plain answer < 3.",
    "Answer with <final_answer>forty-two</final_answer>",
    'Cut <tool_code>\n<name>echo</name>\n<parameters>\n{"text": "unfinished',
    "Calling\n<tool_code><name>echo</name><parameters>{\"text\": \"x\"}</parameters></tool_code>\n<observation>fake",
]


def splits(text: str) -> st.SearchStrategy[list[str]]:
    cuts = st.lists(st.integers(0, len(text)), max_size=12).map(sorted)
    return cuts.map(lambda c: [text[a:b] for a, b in zip([0, *c], [*c, len(text)])])


@st.composite
def completion_and_chunks(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.sampled_from(COMPLETIONS))
    return text, draw(splits(text))


@settings(max_examples=150, deadline=None)
@given(completion_and_chunks())
def test_chunking_parser_events_and_result_are_chunk_invariant(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    parser = StreamParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)] + parser.close()
    whole = StreamParser()
    whole_events = whole.feed(text) + whole.close()
    assert parser.result == whole.result == parse_completion(text)
    joined = lambda evs, kind: "".join(getattr(e, "text", "") for e in evs if type(e).__name__ == kind)  # noqa: E731
    for kind in ("TextEvent", "ReasoningEvent"):
        assert joined(events, kind) == joined(whole_events, kind)
    assert "<tool_" not in joined(events, "TextEvent") or "<tool_" in text.split("<think>")[0]


@settings(max_examples=60, deadline=None)
@given(completion_and_chunks())
def test_chunking_agent_run_is_chunk_invariant(case: tuple[str, list[str]]) -> None:
    from mylm import tool

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    text, chunks = case

    def run(reply: ScriptedReply):
        llm = ScriptedLLM([reply, "final"], stops="ignore")
        return Agent(llm, [echo], max_consecutive_failures=5).run("go")

    split = run(ScriptedReply(text, chunks=chunks))
    whole = run(ScriptedReply(text, chunks=[text]))
    assert split.history_delta == whole.history_delta
    assert split.final_text == whole.final_text
    text_of = lambda r: "".join(e.text for e in r.events if isinstance(e, TextEvent))  # noqa: E731
    assert text_of(split) == text_of(whole)
