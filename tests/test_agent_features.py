"""The richer loop behaviours (seeds 000–004): several calls, output cache, compaction, async, cancel, logging."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from mylm import Agent, CancelToken, LLMRequest, StopReason, tool
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM, ScriptedReply, ScriptExhaustedError
from mylm.tools.base import ToolContext
from mylm.core.types import CompactionEvent, Message, TextEvent, ToolCall, ToolResultEvent, Usage


def call(name: str, **arguments: object) -> str:
    return format_tool_call(ToolCall(name, arguments))


@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


@tool
def big(n: int) -> str:
    """Return n numbered lines."""
    return "\n".join(f"line {i:06d}" for i in range(n))


def test_features_several_calls_run_in_order_when_enabled() -> None:
    turn = "Two at once.\n" + call("shout", text="a") + "\n" + call("shout", text="b")
    llm = ScriptedLLM([turn, "A and B."], stops="ignore")
    result = Agent(llm, [shout], multiple_calls=True).run("x")
    outputs = [e.output for e in result.events if isinstance(e, ToolResultEvent)]
    assert outputs == ["A", "B"]
    observation = llm.requests[1].messages[-1].content
    assert observation.count("<observation>") == 2 and observation.index("A") < observation.index("B")
    assert "</tool_code>" not in llm.requests[0].stop  # the first block must not end generation
    assert "several blocks" in llm.requests[0].messages[0].content


def test_features_only_the_first_call_runs_by_default() -> None:
    turn = call("shout", text="a") + "\n" + call("shout", text="b")
    llm = ScriptedLLM([turn, "done"], stops="ignore")
    result = Agent(llm, [shout]).run("x")
    assert [e.output for e in result.events if isinstance(e, ToolResultEvent)] == ["A"]
    assert result.history_delta[1].content.count("<tool_code>") == 1
    assert "One tool call per reply" in llm.requests[0].messages[0].content


def test_features_large_output_is_cut_and_pageable_by_handle() -> None:
    llm = ScriptedLLM([call("big", n=5000), call("read_output", handle="out_1", offset=30000, limit=50), "ok"])
    Agent(llm, [big], max_observation_chars=2000).run("x")
    first = llm.requests[1].messages[-1].content
    assert "line 000000" in first and "line 004999" in first and "line 002500" not in first
    assert 'call the read_output tool with {"handle": "out_1"' in first
    assert "characters were cut" in first
    page = llm.requests[2].messages[-1].content
    assert "[out_1: characters 30000-30050 of" in page and "line 00" in page


def test_features_unknown_output_handle_is_explained() -> None:
    llm = ScriptedLLM([call("read_output", handle="out_9"), "ok"])
    Agent(llm, []).run("x")
    assert "no kept output 'out_9'" in llm.requests[1].messages[-1].content


def test_features_compaction_summarises_old_turns_near_the_budget() -> None:
    filler = "x" * 2000
    script = [
        call("shout", text=filler), call("shout", text=filler),
        "The user wants shouting; done twice.",  # the compaction summary
        "All done.",
    ]
    llm = ScriptedLLM(script)
    agent = Agent(llm, [shout], context_budget=1500, keep_recent_messages=2)
    result = agent.run("shout twice")
    compactions = [e for e in result.events if isinstance(e, CompactionEvent)]
    assert len(compactions) == 1 and compactions[0].tokens_after < compactions[0].tokens_before
    assert "Summarise it" in llm.requests[2].messages[-1].content
    final_prompt = llm.requests[3].messages
    assert final_prompt[1].role == "user" and "done twice" in final_prompt[1].content
    assert "shout twice" in final_prompt[1].content  # the task survives compaction
    assert [m.role for m in final_prompt[1:]] == ["user", "assistant", "user"]
    assert result.compacted and result.history[0] == final_prompt[1]
    assert len(result.history_delta) == 6  # everything the run added is still reported


def test_features_no_compaction_below_the_budget() -> None:
    llm = ScriptedLLM([call("shout", text="a"), "done"])
    result = Agent(llm, [shout], context_budget=100_000).run("x")
    assert not result.compacted and len(llm.requests) == 2


def test_features_usage_is_summed_and_calibrates_the_estimator() -> None:
    llm = ScriptedLLM([ScriptedReply(call("shout", text="a" * 500), usage=Usage(300, 20)), ScriptedReply("ok", usage=Usage(330, 2))])
    agent = Agent(llm, [shout])
    result = agent.run("x")
    assert result.usage == Usage(630, 22)
    assert agent.estimator.chars_per_token != 4.0


def test_features_cancel_mid_stream_keeps_the_partial_turn() -> None:
    llm = ScriptedLLM(["A long answer that is being streamed in many small pieces."], chunk_size=3)
    stream = Agent(llm, []).stream("x")
    for event in stream:
        if isinstance(event, TextEvent):
            stream.cancel()
    result = stream.result
    assert result is not None and result.stop_reason is StopReason.CANCELLED
    assert result.history_delta[-1].role == "assistant"
    assert result.history_delta[-1].content.endswith("[interrupted]")


def test_features_cancel_token_reaches_a_running_tool() -> None:
    started = threading.Event()

    @tool
    def wait_for_cancel(context: ToolContext) -> str:
        """Blocks until the run is cancelled."""
        started.set()
        assert context.cancel is not None
        return "cancelled" if context.cancel.wait(30) else "not cancelled"

    token = CancelToken()
    threading.Thread(target=lambda: started.wait(30) and token.cancel()).start()
    result = Agent(ScriptedLLM([call("wait_for_cancel"), "never"]), [wait_for_cancel]).run("x", cancel=token)
    assert result.stop_reason is StopReason.CANCELLED
    assert result.history_delta[-1].role == "user" and "cancelled" in result.history_delta[-1].content


def test_features_arun_and_astream() -> None:
    async def scenario() -> None:
        agent = Agent(ScriptedLLM([call("shout", text="hi"), "HI"]), [shout])
        stream = agent.astream("x")
        kinds = [event.type async for event in stream]
        assert kinds[-1] == "final" and stream.result is not None and stream.result.final_text == "HI"
        result = await Agent(ScriptedLLM(["plain"]), []).arun("y")
        assert result.final_text == "plain"

    asyncio.run(scenario())


def test_features_cancelling_the_async_task_cancels_the_run() -> None:
    started = threading.Event()
    finished: list[str] = []

    @tool
    def block(context: ToolContext) -> str:
        """Blocks until cancelled."""
        started.set()
        assert context.cancel is not None
        finished.append("cancelled" if context.cancel.wait(30) else "timed out")
        return "stopped"

    async def scenario() -> None:
        task = asyncio.create_task(Agent(ScriptedLLM([call("block"), "never"]), [block]).arun("x"))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert finished == ["cancelled"]


def test_features_logging_follows_seed_002(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mylm")
    Agent(ScriptedLLM([call("shout", text="a"), "done"]), [shout], max_iterations=5).run("x")
    messages = [r.getMessage() for r in caplog.records]
    assert "Agentic iteration 1/5" in messages and "Agentic iteration 2/5" in messages
    assert "Executing 1 tool call(s)" in messages
    assert "Final response received (no tool calls)" in messages
    assert any(m.startswith("Model turn ended: tool_use") for m in messages)


def test_features_logging_reports_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mylm")
    Agent(ScriptedLLM([call("shout", text="a"), "summary"]), [shout], max_iterations=1).run("x")
    assert "Max agentic iterations reached without final response" in caplog.text


def test_features_scripted_llm_fails_loudly() -> None:
    llm = ScriptedLLM(["one", "two"])
    Agent(llm, []).run("x")
    with pytest.raises(AssertionError, match="1 scripted completion"):
        llm.assert_complete()
    with pytest.raises(ScriptExhaustedError, match="script holds only 0"):
        ScriptedLLM([]).stream(LLMRequest((Message("user", "x"),)))
    with pytest.raises(ScriptExhaustedError):
        Agent(ScriptedLLM([call("shout", text="a")]), [shout]).run("x")  # a test's script ran short: loud
