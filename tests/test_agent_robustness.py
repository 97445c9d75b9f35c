"""The loop when things go wrong around it: failing hooks, interrupted tools, failed summaries, odd histories."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from mylm import Agent, CancelToken, StopReason, tool
from mylm.core.errors import LLMTimeoutError, ServerError
from mylm.llm import LLMRequest, alternating
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.tools.base import ToolContext
from mylm.core.types import ErrorEvent, Message, StepCompleteEvent, ToolCall, ToolResultEvent


def call(name: str, **arguments: object) -> str:
    return format_tool_call(ToolCall(name, arguments))


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def roles(request: LLMRequest) -> list[str]:
    return [m.role for m in request.messages]


def test_robustness_a_failing_permission_hook_refuses_the_call_and_the_run_goes_on() -> None:
    def broken_hook(call_: ToolCall, tool_: object) -> object:
        raise RuntimeError("tty gone")

    llm = ScriptedLLM([call("echo", text="x"), "answered anyway"])
    result = Agent(llm, [echo], permission=broken_hook).run("go")  # type: ignore[arg-type]
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "answered anyway"
    assert any(isinstance(e, ErrorEvent) and e.kind == "permission" for e in result.events)
    assert "approval check failed (RuntimeError)" in llm.requests[1].messages[-1].content
    assert next(e for e in result.events if isinstance(e, StepCompleteEvent)).status == "denied"


def test_robustness_the_result_survives_iterating_the_stream_again() -> None:
    stream = Agent(ScriptedLLM(["done"]), []).stream("go")
    first = stream.consume()
    assert list(stream) == [] and stream.result is first and stream.consume() is first


def test_robustness_requests_never_hold_two_user_messages_in_a_row() -> None:
    llm = ScriptedLLM([call("echo", text="x"), "summary"])
    history = (Message("user", "earlier question"),)  # a conversation left without a reply
    Agent(llm, [echo], max_iterations=1).run("go", history=history)
    for request in llm.requests:
        sent = roles(request)
        assert all(a != b for a, b in itertools.pairwise(sent)), sent
    assert "earlier question\n\ngo" in llm.requests[0].messages[1].content
    assert alternating([Message("user", "a"), Message("user", "b")]) == (Message("user", "a\n\nb"),)


def test_robustness_a_block_that_could_not_run_is_reported_next_to_the_calls_that_did() -> None:
    turn = call("echo", text="first") + "\n<tool_code>\n<name>echo</name>\n<parameters>\n{oops}\n</parameters>\n</tool_code>"
    llm = ScriptedLLM([turn, "ok"], stops="ignore")
    result = Agent(llm, [echo], multiple_calls=True).run("go")
    observation = llm.requests[1].messages[-1].content
    assert "first" in observation and "Another tool block in your reply was not run" in observation
    assert any(isinstance(e, ErrorEvent) and e.kind == "format" for e in result.events)


def test_robustness_no_stopless_retry_without_evidence_that_a_stop_fired() -> None:
    # The reply simply ends inside <think> (no stop hit, no drafted call): a format error, not a stop retry.
    llm = ScriptedLLM([ScriptedReply("<think>let me ponder", finish_reason="stop"), "Done."], stops="ignore")
    result = Agent(llm, []).run("go")
    assert all(r.stop for r in llm.requests)
    assert not any(isinstance(e, ErrorEvent) and e.kind == "retry" for e in result.events)
    assert result.final_text == "Done."


def test_robustness_a_failed_summary_keeps_history_and_result_in_step() -> None:
    llm = ScriptedLLM([call("echo", text="x"), ServerError("down", status=503)])
    result = Agent(llm, [echo], max_iterations=1).run("go")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.history_delta[-2].content.startswith("You have reached the limit")
    assert result.history_delta[-1] == Message("assistant", result.final_text)


def test_robustness_a_deadline_passing_during_the_summary_is_a_timeout() -> None:
    now = [0.0]

    class SlowSummary(ScriptedLLM):
        """The summary call runs past the deadline, and the endpoint reports the timeout."""

        def stream(self, request: LLMRequest):  # type: ignore[no-untyped-def]
            if len(self.requests) == 1:
                now[0] += 20.0
            return super().stream(request)

    llm = SlowSummary([call("echo", text="x"), LLMTimeoutError("the run's time limit ran out")])
    result = Agent(llm, [echo], max_iterations=1, timeout=15, clock=lambda: now[0]).run("go")
    assert result.stop_reason is StopReason.TIMEOUT and result.timed_out


def test_robustness_an_interrupted_tool_still_gets_its_result_and_observation() -> None:
    started = threading.Event()

    @tool
    def block(context: ToolContext) -> str:
        """Blocks until cancelled, then stops like a killed command."""
        started.set()
        assert context.cancel is not None
        context.cancel.wait(30)
        context.cancel.raise_if_cancelled()
        return "never"

    token = CancelToken()
    threading.Thread(target=lambda: started.wait(30) and token.cancel()).start()
    result = Agent(ScriptedLLM([call("block"), "unused"]), [block]).run("go", cancel=token)
    assert result.stop_reason is StopReason.CANCELLED
    kinds = [type(e) for e in result.events]
    assert ToolResultEvent in kinds and StepCompleteEvent in kinds
    assert result.history_delta[-1].role == "user" and "interrupted by the user" in result.history_delta[-1].content


def test_robustness_an_injected_clock_does_not_leak_into_http_deadlines() -> None:
    llm = ScriptedLLM(["done"])
    Agent(llm, [], timeout=30, clock=lambda: 1_000_000.0).run("go")
    deadline = llm.requests[0].deadline
    assert deadline is not None and 25 < deadline - time.monotonic() <= 30


def test_robustness_cancelling_an_async_consumer_keeps_the_result() -> None:
    started, release = threading.Event(), threading.Event()

    @tool
    def block() -> str:
        """Blocks until released (it ignores the cancel, like a slow tool)."""
        started.set()
        release.wait(30)
        return "stopped"

    async def scenario() -> None:
        stream = Agent(ScriptedLLM([call("block"), "never"]), [block]).astream("go")
        consumer = asyncio.ensure_future(stream.consume())
        await asyncio.to_thread(started.wait, 30)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        # Re-enter while the worker is still inside the loop: it must be awaited, not driven twice.
        again = asyncio.ensure_future(stream.consume())
        await asyncio.sleep(0)
        release.set()
        result = await again
        assert result.stop_reason is StopReason.CANCELLED and stream.result is result

    asyncio.run(scenario())


def test_robustness_compaction_leaves_room_for_the_reply() -> None:
    from mylm.agent.context import Compactor, TokenEstimator
    from mylm.prompts import PromptLoader

    compactor = Compactor(ScriptedLLM(["summary"]), PromptLoader.default(), TokenEstimator(),
                          budget=8000, max_tokens=4000, keep_recent=2)
    filler = [Message("user", "x" * 8000), Message("assistant", "y" * 4000), Message("user", "z" * 4000)]
    # ~4,000 tokens of prompt: under 80% of 8,000, but over 80% of what is left once the reply has room.
    outcome = compactor.compact("system", filler, task="t", deadline=None, cancel=None)
    assert outcome is not None and outcome.event.tokens_after < outcome.event.tokens_before


def test_a_cancel_token_wakes_its_waiters_whenever_it_is_cancelled() -> None:
    """The token makes its event at the first wait only: a cancel before, during or after a wait is seen."""
    from mylm.core.errors import CancelledError

    hang = 30.0
    before = CancelToken()
    before.cancel()
    assert before.cancelled and before.wait(hang)
    during = CancelToken()
    assert not during.wait(0.0) and not during.cancelled
    waiting = threading.Event()

    def cancel_when_waiting() -> None:
        waiting.wait(hang)
        time.sleep(0.05)  # most likely inside the wait below; either way it must return True
        during.cancel()

    threading.Thread(target=cancel_when_waiting, daemon=True).start()
    waiting.set()
    assert during.wait(hang)
    calls: list[str] = []
    after = CancelToken()
    after.on_cancel(lambda: calls.append("called"))
    after.cancel()
    after.cancel()
    assert calls == ["called"] and after.wait(0.0)
    with pytest.raises(CancelledError):
        after.raise_if_cancelled()
