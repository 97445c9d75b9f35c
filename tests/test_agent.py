"""The agent loop through its public API, with a scripted model and real tools."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mylm import Agent, Permission, StopReason, TaskComplete, tool
from mylm.core.errors import EndpointUnreachableError, ServerError
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.tools.shell import shell_tool
from mylm.core.types import (
    ApprovalEvent,
    FinishReason,
    ErrorEvent,
    FinalResponseEvent,
    IterationStartEvent,
    Message,
    ModelCallEvent,
    StepCompleteEvent,
    StepStartEvent,
    TextEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
    UsageEvent,
)


def call(name: str, **arguments: object) -> str:
    """A model turn that calls `name`, written the way the system prompt teaches."""
    return "I will use a tool.\n" + format_tool_call(ToolCall(name, arguments))


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


@tool(risk="write")
def finish(summary: str) -> str:
    """Declare the task complete."""
    raise TaskComplete(summary)


def test_agent_runs_tool_and_feeds_observation_back() -> None:
    llm = ScriptedLLM([call("execute_command", command="echo marker-$((40+2))"), "It printed marker-42."])
    result = Agent(llm, [shell_tool(Path.cwd())]).run("What does it print?")
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.final_text == "It printed marker-42."
    assert result.iterations_used == 2
    second = llm.requests[1].messages
    assert second[-1].role == "user"
    assert second[-1].content.startswith("<observation>")
    assert "marker-42" in second[-1].content  # the command really ran
    llm.assert_complete()


def test_agent_history_delta_is_exact_and_canonical() -> None:
    llm = ScriptedLLM([call("add", a=2, b=3), "5"])
    result = Agent(llm, [add]).run("2+3?")
    roles = [m.role for m in result.history_delta]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert result.history_delta[0] == Message("user", "2+3?")
    assert result.history_delta[1].content.endswith("</tool_code>")  # re-appended although the stop ate it
    assert result.history_delta[2].content == "<observation>\n5\n</observation>"


def test_agent_each_request_extends_the_previous_one_exactly() -> None:
    llm = ScriptedLLM([call("add", a=1, b=1), call("add", a=2, b=2), "done"])
    Agent(llm, [add]).run("count")
    for earlier, later in itertools.pairwise(llm.requests):
        assert later.messages[: len(earlier.messages)] == earlier.messages
        assert later.messages[0] == earlier.messages[0]  # the same system prompt, byte for byte


def test_agent_continues_from_history() -> None:
    first = Agent(ScriptedLLM(["Hello."]), []).run("hi")
    llm = ScriptedLLM(["Still here."])
    second = Agent(llm, []).run("again", history=first.history_delta)
    assert [m.content for m in llm.requests[0].messages[1:]] == ["hi", "Hello.", "again"]
    assert second.history_delta == (Message("user", "again"), Message("assistant", "Still here."))


def test_agent_event_order_per_iteration() -> None:
    llm = ScriptedLLM([ScriptedReply(call("add", a=1, b=2), usage=Usage(10, 5)), ScriptedReply("3", usage=Usage(12, 1))])
    result = Agent(llm, [add]).run("1+2")
    kinds = [type(e) for e in result.events if not isinstance(e, TextEvent)]
    assert kinds == [
        IterationStartEvent, UsageEvent, ModelCallEvent, StepStartEvent, ToolCallEvent, ApprovalEvent,
        ToolResultEvent, StepCompleteEvent, IterationStartEvent, UsageEvent, ModelCallEvent, FinalResponseEvent,
    ]
    approval = next(e for e in result.events if isinstance(e, ApprovalEvent))
    assert (approval.call_id, approval.allowed, approval.grant) == ("call_1_1", True, "workspace-write")
    calls = [e for e in result.events if isinstance(e, ModelCallEvent)]
    assert [(c.finish_reason, c.usage) for c in calls] == [
        (FinishReason.TOOL_USE, Usage(10, 5)), (FinishReason.END_TURN, Usage(12, 1)),
    ]
    assert all(c.time_to_first_token is not None and 0 <= c.time_to_first_token <= c.duration for c in calls)
    assert result.usage == Usage(22, 6)
    tool_call = next(e for e in result.events if isinstance(e, ToolCallEvent))
    assert tool_call.call.id == "call_1_1" and tool_call.call.arguments == {"a": 1, "b": 2}


def test_agent_unknown_tool_is_an_error_observation_naming_the_real_tools() -> None:
    llm = ScriptedLLM([call("ad", a=1, b=2), "sorry"])
    result = Agent(llm, [add, shell_tool(Path.cwd())]).run("x")
    observation = llm.requests[1].messages[-1].content
    assert "no tool named 'ad'" in observation and "Did you mean 'add'" in observation
    assert "execute_command" in observation
    assert result.stop_reason is StopReason.FINAL_ANSWER


def test_agent_invalid_arguments_are_explained_before_running() -> None:
    llm = ScriptedLLM([call("add", a="one", b=2), "ok"])
    result = Agent(llm, [add]).run("x")
    observation = llm.requests[1].messages[-1].content
    assert "argument 'a' must be an integer" in observation
    tool_result = next(e for e in result.events if isinstance(e, ToolResultEvent))
    assert tool_result.is_error


def test_agent_tool_exception_becomes_error_observation_and_loop_goes_on() -> None:
    llm = ScriptedLLM([call("explode", reason="disk"), "It failed."])
    result = Agent(llm, [explode]).run("x")
    assert "RuntimeError: boom: disk" in llm.requests[1].messages[-1].content
    complete = next(e for e in result.events if isinstance(e, StepCompleteEvent))
    assert complete.status == "error"
    assert result.final_text == "It failed."


def test_agent_done_tool_ends_run_and_keeps_its_message_in_history() -> None:
    llm = ScriptedLLM([call("finish", summary="All set.")])
    result = Agent(llm, [finish]).run("x")
    assert result.stop_reason is StopReason.DONE_TOOL
    assert result.final_text == "All set."
    assert result.history_delta[-1].role == "user" and "All set." in result.history_delta[-1].content


def test_agent_permission_hook_denial_is_fed_back() -> None:
    seen: list[ToolCall] = []

    def deny(call_: ToolCall, _tool: object) -> Permission:
        seen.append(call_)
        return Permission.deny("not on a Friday")

    llm = ScriptedLLM([call("execute_command", command="touch should-not-exist"), "ok"])
    result = Agent(llm, [shell_tool(Path.cwd())], permission=deny).run("x")
    assert seen and seen[0].arguments == {"command": "touch should-not-exist"}
    assert "not on a Friday" in llm.requests[1].messages[-1].content
    assert next(e for e in result.events if isinstance(e, StepCompleteEvent)).status == "denied"
    import os

    assert not os.path.exists("should-not-exist")


def test_a_reply_that_only_copies_the_refusal_is_not_the_answer() -> None:
    # The quick start's 1.5B: its `remember` refused (no terminal to ask), it answered with the refusal, word for
    # word, and that went to the user as the answer.
    reason = ("this call needs the user's approval (remember can change files or state), and no one can be asked in "
              "this session (no terminal; the user can rerun with --yes)")
    copied = (f"The call to remember was not run: {reason}. Do not retry it; use a read-only approach or answer "
              "with what you have.")
    llm = ScriptedLLM([call("execute_command", command="touch x"), copied, "There are 5 Python files."])
    result = Agent(llm, [shell_tool(Path.cwd())], permission=lambda _c, _t: Permission.deny(reason)).run(
        "How many Python files are there?")
    assert result.final_text == "There are 5 Python files." and len(llm.requests) == 3
    assert "How many Python files are there?" in llm.requests[2].messages[-1].content  # the task, restated


def test_agent_format_error_is_reported_to_the_model() -> None:
    broken = "<tool_code>\n<name>add</name>\n<parameters>\n{'a': 1, b: }\n</parameters>\n</tool_code>"
    llm = ScriptedLLM([broken, call("add", a=1, b=1), "2"])
    result = Agent(llm, [add]).run("x")
    feedback = llm.requests[1].messages[-1].content
    assert feedback.startswith("<observation>\nFormat error:")
    assert any(isinstance(e, ErrorEvent) and e.kind == "format" for e in result.events)
    assert result.final_text == "2"


def test_agent_cut_off_reply_gets_its_own_observation() -> None:
    cut = ScriptedReply('<tool_code>\n<name>add</name>\n<parameters>\n{"a": 1, "b"', finish_reason="length")
    llm = ScriptedLLM([cut, "fine"])
    Agent(llm, [add], max_tokens=99).run("x")
    feedback = llm.requests[1].messages[-1].content
    assert "cut off by the output token limit (99 tokens)" in feedback


def test_agent_stops_after_repeated_unusable_turns() -> None:
    bad = "<tool_code><name></name></tool_code>"
    llm = ScriptedLLM([bad, bad, bad])
    result = Agent(llm, [add], max_consecutive_failures=3).run("x")
    assert result.stop_reason is StopReason.ERROR
    assert "3 unusable replies in a row" in str(result.error)
    assert len(result.history_delta) == 6  # nothing the model said is lost


def test_agent_iteration_limit_asks_for_a_summary_without_tools() -> None:
    llm = ScriptedLLM([call("add", a=1, b=1), call("add", a=2, b=2), "Partial: 2 and 4."])
    result = Agent(llm, [add], max_iterations=2).run("x")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.final_text == "Partial: 2 and 4."
    assert "limit of 2 steps" in llm.requests[2].messages[-1].content
    assert result.history_delta[-1] == Message("assistant", "Partial: 2 and 4.")


def test_agent_iteration_limit_falls_back_when_summary_fails() -> None:
    llm = ScriptedLLM([call("add", a=1, b=1), ServerError("down", status=503)])
    result = Agent(llm, [add], max_iterations=1).run("x")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.final_text.startswith("I could not finish")


def test_agent_endpoint_error_ends_run_keeping_the_conversation() -> None:
    llm = ScriptedLLM([call("add", a=1, b=1), EndpointUnreachableError("no server at http://x")])
    result = Agent(llm, [add]).run("x")
    assert result.stop_reason is StopReason.ERROR
    assert isinstance(result.error, EndpointUnreachableError)
    assert [m.role for m in result.history_delta] == ["user", "assistant", "user"]
    assert isinstance(result.events[-1], ErrorEvent) and result.events[-1].fatal


def test_agent_timeout_is_enforced_with_the_run_clock() -> None:
    now = [0.0]

    @tool
    def slow() -> str:
        """Takes 100 s of the run's clock."""
        now[0] += 100.0
        return "slept"

    llm = ScriptedLLM([call("slow"), call("slow"), "never"])
    result = Agent(llm, [slow], timeout=150, clock=lambda: now[0]).run("x")
    assert result.stop_reason is StopReason.TIMEOUT and result.timed_out
    assert result.iterations_used == 2
    assert llm.remaining == 1


def test_agent_cancel_before_a_tool_runs() -> None:
    ran: list[int] = []

    @tool
    def work() -> str:
        """Records that it ran."""
        ran.append(1)
        return "worked"

    llm = ScriptedLLM([call("work"), "done"])
    stream = Agent(llm, [work]).stream("x")
    for event in stream:
        if isinstance(event, StepStartEvent):
            stream.cancel()
    assert stream.result is not None
    assert stream.result.stop_reason is StopReason.CANCELLED
    assert ran == []


def test_agent_closes_the_stream_once_a_call_is_complete() -> None:
    # A server that ignores stops and hallucinates an observation and a whole answer after the call.
    rambling = call("add", a=1, b=1) + "\n<observation>\n3\n</observation>\nThe answer is 3." * 50
    llm = ScriptedLLM([rambling, "2"], stops="ignore", chunk_size=5)
    result = Agent(llm, [add]).run("1+1")
    assert llm.closed_early == 1
    assert result.final_text == "2"
    assert "The answer is 3" not in result.history_delta[1].content


def test_agent_reasoning_is_never_executed() -> None:
    thinking = "<think>maybe " + call("explode", reason="x") + "</think>The answer is 7."
    llm = ScriptedLLM([thinking], stops="ignore")
    result = Agent(llm, [explode]).run("x")
    assert result.final_text == "The answer is 7."
    assert not any(isinstance(e, ToolCallEvent) for e in result.events)


def test_agent_retries_without_stops_when_a_stop_cut_the_reasoning() -> None:
    # The server honours </tool_code> even inside <think>, so the first reply ends mid-thought.
    thinking = "<think>I could write " + call("explode", reason="x") + " but no.</think>The answer is 7."
    llm = ScriptedLLM([thinking, thinking], stops="honour")
    agent = Agent(llm, [explode])
    agent.opens_reasoning = False  # earlier replies showed no template-opened reasoning: </tool_code> is sent
    result = agent.run("x")
    assert result.final_text == "The answer is 7."
    assert "</tool_code>" in llm.requests[0].stop and llm.requests[1].stop == ()
    assert any(isinstance(e, ErrorEvent) and e.kind == "retry" for e in result.events)


def test_agent_sends_no_call_stop_until_replies_show_the_template_does_not_open_reasoning() -> None:
    llm = ScriptedLLM([call("explode", reason="x").join(["<think>maybe ", " no</think>"]) + "7.", "8."],
                      stops="honour")
    agent = Agent(llm, [explode])
    assert agent.run("x").final_text == "7." and "</tool_code>" not in llm.requests[0].stop
    assert agent.opens_reasoning is False  # the reply opened its own <think>
    agent.run("y")
    assert "</tool_code>" in llm.requests[1].stop


def test_agent_rejects_bad_limits() -> None:
    with pytest.raises(ValueError):
        Agent(ScriptedLLM([]), max_iterations=0)
    with pytest.raises(ValueError):
        Agent(ScriptedLLM([]), timeout=0)


def test_agent_empty_reply_is_sent_back_not_taken_as_the_answer() -> None:
    llm = ScriptedLLM(["", "The answer."])
    result = Agent(llm, []).run("x")
    assert "Your reply was empty" in llm.requests[1].messages[-1].content
    assert result.final_text == "The answer."
