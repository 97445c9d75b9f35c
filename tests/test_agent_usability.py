"""The loop's last holes (issue 13): cut-off answers, overrunning tools, named errors, tool choice, the
before-finish hook and agents without tools."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import threading
from pathlib import Path

import pytest

import mylm
from mylm import Agent, StopReason, ToolContext, tool
from mylm.core.errors import MylmError, NoToolsError, UnusableRepliesError
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.core.types import ContinueEvent, ErrorEvent, FinalResponseEvent, Message, ToolCall, ToolResultEvent


def call(name: str, **arguments: object) -> str:
    return "I will use a tool.\n" + format_tool_call(ToolCall(name, arguments))


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


@tool
def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: The text.
    """
    return text.upper()


# ------------------------------------------------------------------------------------- 5: cut-off answers


def test_answer_cut_by_the_token_limit_has_its_own_stop_reason() -> None:
    llm = ScriptedLLM([ScriptedReply("The first half of a long ans", finish_reason="length")])
    result = Agent(llm, [add]).run("write a lot")
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert result.final_text == "The first half of a long ans"
    final = [e for e in result.events if isinstance(e, FinalResponseEvent)]
    assert final[-1].stop_reason is StopReason.MAX_TOKENS
    assert final[-1].to_dict()["stop_reason"] == "max_tokens"


def test_complete_answer_is_still_final_answer() -> None:
    result = Agent(ScriptedLLM([ScriptedReply("Done.", finish_reason="stop")]), [add]).run("x")
    assert result.stop_reason is StopReason.FINAL_ANSWER


# ------------------------------------------------------------------------------ 9: tools that overrun


def test_a_python_tool_that_overruns_is_abandoned_at_the_deadline() -> None:
    release = threading.Event()
    finished = threading.Event()
    seen: list[ToolContext] = []

    @tool
    def slow(context: ToolContext) -> str:
        """Take far longer than the run may."""
        seen.append(context)
        release.wait(20)
        finished.set()
        return "late"

    llm = ScriptedLLM([call("slow")])
    try:
        result = Agent(llm, [slow], timeout=1.0).run("go")
        # The run came back while the tool was still running: it did not wait for it.
        assert not finished.is_set()
        assert result.stop_reason is StopReason.TIMEOUT
        results = [e for e in result.events if isinstance(e, ToolResultEvent)]
        assert results and results[0].is_error and "timed out" in results[0].output
        # The abandoned tool's own cancel token is set, so a cooperative tool can stop.
        assert seen[0].deadline is not None and seen[0].cancel is not None and seen[0].cancel.cancelled
    finally:
        release.set()


def test_a_cooperative_tool_sees_the_cancel_and_stops() -> None:
    stopped = threading.Event()
    woken_by_cancel: list[bool] = []

    @tool
    def patient(context: ToolContext) -> str:
        """Wait until cancelled."""
        assert context.cancel is not None
        woken_by_cancel.append(context.cancel.wait(30))
        stopped.set()
        return "stopped"

    llm = ScriptedLLM([call("patient")])
    Agent(llm, [patient], timeout=0.5).run("go")
    assert stopped.wait(30)
    assert woken_by_cancel == [True]  # its token was set when the run gave up on it, not left to run out


def test_a_quick_tool_still_returns_its_output() -> None:
    llm = ScriptedLLM([call("add", a=2, b=3), "5"])
    result = Agent(llm, [add]).run("2+3")
    assert "5" in llm.requests[1].messages[-1].content
    assert result.final_text == "5"


# ------------------------------------------------------------------------------------ 11: named errors


def test_unusable_replies_raise_their_own_class() -> None:
    llm = ScriptedLLM(["", "", ""])
    result = Agent(llm, [add], max_consecutive_failures=3).run("x")
    assert isinstance(result.error, UnusableRepliesError)
    assert result.error.exit_code == 1


def _every_error_class() -> set[type[MylmError]]:
    for module in pkgutil.walk_packages(mylm.__path__, "mylm."):
        if module.name.startswith("mylm.cli") or module.name == "mylm.__main__":
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:
            continue
    found: set[type[MylmError]] = set()
    todo: list[type[MylmError]] = [MylmError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return {c for c in found if c.__module__.startswith("mylm.")}


def test_every_error_class_is_in_the_documented_tree() -> None:
    import mylm.core.errors as errors

    tree = ast.get_docstring(ast.parse(Path(errors.__file__).read_text())) or ""
    drawn = {line.split("── ")[-1].split()[0] for line in tree.splitlines() if "── " in line} | {"MylmError"}
    missing = sorted(c.__name__ for c in _every_error_class() if c.__name__ not in drawn)
    assert not missing, f"not drawn in mylm/core/errors.py: {missing}"
    elsewhere = sorted(c.__name__ for c in _every_error_class() if c.__module__ != "mylm.core.errors")
    assert not elsewhere, f"defined outside mylm/core/errors.py: {elsewhere}"


def test_model_calls_counts_every_completion_and_iterations_only_loop_turns() -> None:
    # The first reply stops inside the reasoning (asked again without stops), then the limit's summary call.
    llm = ScriptedLLM([
        ScriptedReply("<think>let me call <tool_code>\n<name>add</name>", finish_reason="stop"),
        call("add", a=1, b=2),
        "Summary: 3.",
    ])
    result = Agent(llm, [add], max_iterations=1).run("x")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.iterations_used == 1
    assert result.model_calls == len(llm.requests) == 3


# ------------------------------------------------------------------------------------ 12: tool choice


def test_tool_choice_none_hides_the_tools_and_refuses_calls() -> None:
    llm = ScriptedLLM([call("add", a=1, b=2), "3"])
    agent = Agent(llm, [add], tool_choice="none")
    assert "<name>add</name>" not in agent.system_prompt
    result = agent.run("1+2")
    results = [e for e in result.events if isinstance(e, ToolResultEvent)]
    assert results[0].is_error and "tool_choice none" in results[0].output
    assert result.final_text == "3"


def test_tool_choice_required_corrects_an_answer_without_a_call() -> None:
    llm = ScriptedLLM(["It is 3.", call("add", a=1, b=2), "It is 3.", "Summary."])
    result = Agent(llm, [add], tool_choice="required", max_iterations=3).run("1+2")
    assert "Call one of the tools now" in llm.requests[1].messages[-1].content
    kinds = [e.kind for e in result.events if isinstance(e, ErrorEvent)]
    assert kinds.count("tool_choice") == 2
    assert result.stop_reason is StopReason.MAX_ITERATIONS


def test_tool_choice_a_name_offers_and_allows_only_that_tool() -> None:
    llm = ScriptedLLM([call("add", a=1, b=2), "no call", call("shout", text="hi"), "Summary."])
    agent = Agent(llm, [add, shout], tool_choice="shout", max_iterations=3)
    assert "<name>shout</name>" in agent.system_prompt and "<name>add</name>" not in agent.system_prompt
    result = agent.run("x")
    results = [e for e in result.events if isinstance(e, ToolResultEvent)]
    assert results[0].is_error and "only shout may be called" in results[0].output
    assert "Call shout now" in llm.requests[2].messages[-1].content
    assert results[1].output == "HI"


def test_tool_choice_must_name_a_tool() -> None:
    with pytest.raises(ValueError, match="tool_choice"):
        Agent(ScriptedLLM([]), [add], tool_choice="nope")


# -------------------------------------------------------------------------------- 14: before_finish


def test_before_finish_sends_the_model_back_to_work_then_accepts() -> None:
    todos = ["write tests"]
    asked: list[str] = []

    def before_finish(answer: str, history: object) -> str | None:
        asked.append(answer)
        return f"Unfinished to-dos: {todos.pop()}" if todos else None

    llm = ScriptedLLM(["Done.", "Tests written. Done."])
    result = Agent(llm, [add], before_finish=before_finish).run("x")
    assert asked == ["Done.", "Tests written. Done."]
    assert result.final_text == "Tests written. Done."
    assert result.iterations_used == 2
    assert llm.requests[1].messages[-1] == Message("user", "Unfinished to-dos: write tests")
    sent_back = [e for e in result.events if isinstance(e, ContinueEvent)]
    assert sent_back == [ContinueEvent("Done.", "Unfinished to-dos: write tests")]


def test_before_finish_stays_within_max_iterations() -> None:
    llm = ScriptedLLM(["a", "b", "Summary."])
    result = Agent(llm, [add], max_iterations=2, before_finish=lambda a, h: "keep going").run("x")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    llm.assert_complete()


# ------------------------------------------------------------------------------------ 15: no tools


def test_an_agent_without_tools_ends_the_run_when_the_model_calls_one() -> None:
    llm = ScriptedLLM([call("add", a=1, b=2), "never asked"])
    result = Agent(llm).run("x")
    assert result.stop_reason is StopReason.ERROR
    assert isinstance(result.error, NoToolsError)
    assert len(llm.requests) == 1
