"""The repeated-call guard: the same call, to the same result, is answered with a note, then ends the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mylm import Agent, StopReason, tool
from mylm.agent import AgentConfig
from mylm.core.errors import RepeatedCallError
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM
from mylm.core.types import ToolCall, ToolResultEvent

NOTE = "gave the same result as your previous call with the same arguments"


def call(name: str, **arguments: object) -> str:
    return "Let me look.\n" + format_tool_call(ToolCall(name, arguments))


def listing(tmp_path: Path) -> object:
    root = tmp_path / "w"  # tmp_path also holds the test's isolated home
    root.mkdir(exist_ok=True)

    @tool
    def list_dir(path: str) -> str:
        """List a directory."""
        return "\n".join(sorted(p.name for p in (root / path).iterdir()))

    return list_dir


def test_repeated_call_is_told_the_result_has_not_changed_then_stopped(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "a.txt").write_text("x")
    same = call("list_dir", path=".")
    llm = ScriptedLLM([same, same, same, "never asked"])
    result = Agent(llm, [listing(tmp_path)], max_iterations=10).run("What is here?")
    assert result.stop_reason is StopReason.REPEATED_CALL and result.iterations_used == 3
    assert isinstance(result.error, RepeatedCallError) and "list_dir 3 times" in str(result.error)
    assert result.error.exit_code == 5 and result.final_text == ""
    first, second = (r.messages[-1].content for r in llm.requests[1:3])
    assert "a.txt" in first and NOTE not in first
    assert NOTE in second and "a.txt" not in second  # the output is not sent again
    assert llm.remaining == 1  # stopped instead of looping on to max_iterations
    # Every call really ran: the application still sees each result.
    assert [e.output for e in result.events if isinstance(e, ToolResultEvent)] == ["a.txt"] * 3
    assert result.history[-1].content.count(NOTE) == 1  # the conversation ends on the observation


def test_repeated_failing_call_is_stopped_too(tmp_path: Path) -> None:
    @tool
    def read(path: str) -> str:
        """Read a file."""
        raise ValueError(f"no such file: {path!r}")

    same = call("read", path="")
    result = Agent(ScriptedLLM([same] * 3), [read]).run("go")
    assert result.stop_reason is StopReason.REPEATED_CALL


def test_same_call_with_a_changed_result_is_not_a_repeat(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "a.txt").write_text("x")
    counter = iter(range(100))

    @tool
    def poll() -> str:
        """Poll a job."""
        return f"still running ({next(counter)})"

    llm = ScriptedLLM([call("poll")] * 4 + ["Done."])
    result = Agent(llm, [poll]).run("wait for it")
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert not any(NOTE in r.messages[-1].content for r in llm.requests)


def test_another_call_in_between_resets_the_count(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "a.txt").write_text("x")
    (tmp_path / "w" / "d").mkdir()
    here, there = call("list_dir", path="."), call("list_dir", path="d")
    llm = ScriptedLLM([here, here, there, here, here, "Two entries."])
    result = Agent(llm, [listing(tmp_path)]).run("look")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "Two entries."
    notes = [NOTE in r.messages[-1].content for r in llm.requests[1:]]
    assert notes == [False, True, False, False, True]


def test_invalid_or_refused_calls_are_not_counted_as_repeats(tmp_path: Path) -> None:
    bad = call("list_dir", where=".")
    llm = ScriptedLLM([call("list_dir", path="."), bad, call("list_dir", path="."), "ok"])
    result = Agent(llm, [listing(tmp_path)]).run("look")
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert not any(NOTE in r.messages[-1].content for r in llm.requests)


def test_a_call_refused_the_same_way_again_and_again_ends_the_run(tmp_path: Path) -> None:
    # The quick start's tiny model, with no terminal to ask, re-sent one unapprovable command until the timeout.
    from mylm.core.types import Permission

    same = call("list_dir", path=".")
    llm = ScriptedLLM([same] * 3 + ["never reached"])
    result = Agent(llm, [listing(tmp_path)], permission=lambda call: Permission(False, "no one can approve it")).run("x")
    assert result.stop_reason is StopReason.REPEATED_CALL and result.iterations_used == 3
    assert NOTE in llm.requests[2].messages[-1].content


def test_repeated_call_limit_is_a_setting(tmp_path: Path) -> None:
    same = call("list_dir", path=".")
    tools = [listing(tmp_path)]
    off = Agent(ScriptedLLM([same] * 4 + ["fine"]), tools, config=AgentConfig(max_repeated_calls=0)).run("x")
    assert off.stop_reason is StopReason.FINAL_ANSWER
    two = Agent(ScriptedLLM([same] * 2), tools, max_repeated_calls=2).run("x")
    assert two.stop_reason is StopReason.REPEATED_CALL and two.iterations_used == 2
    with pytest.raises(ValueError, match="max_repeated_calls"):
        AgentConfig(max_repeated_calls=1)


def test_repeated_calls_in_one_turn_count_too(tmp_path: Path) -> None:
    same = format_tool_call(ToolCall("list_dir", {"path": "."}))
    llm = ScriptedLLM(["\n".join([same] * 3)], stops="ignore")
    result = Agent(llm, [listing(tmp_path)], multiple_calls=True).run("x")
    assert result.stop_reason is StopReason.REPEATED_CALL and result.iterations_used == 1
