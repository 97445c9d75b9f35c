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


def test_repeated_call_is_told_what_it_has_then_asked_for_its_answer(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "a.txt").write_text("x")
    same = call("list_dir", path=".")
    llm = ScriptedLLM([same, same, same, "There is one file, a.txt.", "never asked"])
    result = Agent(llm, [listing(tmp_path)], max_iterations=10).run("What is here?")
    assert result.stop_reason is StopReason.REPEATED_CALL and result.iterations_used == 3
    assert isinstance(result.error, RepeatedCallError) and "list_dir 3 times" in str(result.error)
    # Stuck, the model is asked for the answer it can give from what it has (Qwen2.5-Coder 0.5B lost five of
    # twelve tasks to this guard when it ended the run with nothing): the run ends with that answer.
    assert result.error.exit_code == 5 and result.final_text == "There is one file, a.txt."
    assert result.error.answer == result.final_text
    first, second, last = (r.messages[-1].content for r in llm.requests[1:4])
    assert "a.txt" in first and NOTE not in first
    # The repeat is told that nothing changed, with the result it already has (a small model loses track).
    assert NOTE in second and "You already have this result:\na.txt" in second
    assert "so no more tools will be run" in last and "list_dir 3 times" in last
    assert llm.remaining == 1  # stopped instead of looping on to max_iterations
    # Every call really ran: the application still sees each result.
    assert [e.output for e in result.events if isinstance(e, ToolResultEvent)] == ["a.txt"] * 3
    assert result.history[-1].content == "There is one file, a.txt."


def test_repeated_failing_call_is_stopped_too(tmp_path: Path) -> None:
    @tool
    def read(path: str) -> str:
        """Read a file."""
        raise ValueError(f"no such file: {path!r}")

    same = call("read", path="")
    result = Agent(ScriptedLLM([same] * 3 + ["The file could not be read."]), [read]).run("go")
    assert result.stop_reason is StopReason.REPEATED_CALL and result.final_text == "The file could not be read."


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


CIRCLES = "gave the same result as when you made this exact call before"


def test_another_call_in_between_resets_the_count_but_the_repeat_is_still_told(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "a.txt").write_text("x")
    (tmp_path / "w" / "d").mkdir()
    here, there = call("list_dir", path="."), call("list_dir", path="d")
    llm = ScriptedLLM([here, here, there, here, here, "Two entries."])
    result = Agent(llm, [listing(tmp_path)]).run("look")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "Two entries."
    notes = [(NOTE in r.messages[-1].content, CIRCLES in r.messages[-1].content) for r in llm.requests[1:]]
    assert notes == [(False, False), (True, False), (False, False), (False, True), (True, False)]


def test_a_model_going_in_circles_is_told_and_stopped_at_twice_the_limit(tmp_path: Path) -> None:
    # Qwen2.5-Coder-1.5B (temperature 0) asked for a port in config.json: read the file, an edit whose `old` is not
    # in it, read it again, the same edit... to the step limit. No call repeated the one before it.
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "config.json").write_text('{"database": {"port": 5433}}\n')

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return (tmp_path / "w" / path).read_text()

    @tool
    def edit_file(path: str, old: str, new: str) -> str:
        """Edit a file."""
        raise ValueError(f"'old' was not found in {path}")

    read = call("read_file", path="config.json")
    edit = call("edit_file", path="config.json", old="port: 5433", new="port: 5434")
    llm = ScriptedLLM([read, edit] * 5 + [read, "The port is 5433."])
    result = Agent(llm, [read_file, edit_file], max_iterations=20).run("Which port does config.json set?")
    observations = [r.messages[-1].content for r in llm.requests[1:]]
    assert CIRCLES not in observations[0] and CIRCLES not in observations[1]
    assert all(CIRCLES in o and "You already have this result" in o for o in observations[2:6])
    assert '"port": 5433' in observations[2]  # shown again: a small model loses track of what it read
    # the sixth identical read (twice max_repeated_calls) ends the run with the answer it then gives
    assert result.stop_reason is StopReason.REPEATED_CALL and result.final_text == "The port is 5433."
    assert result.iterations_used == 11 and "read_file 6 times in this run" in str(result.error)


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
    two = Agent(ScriptedLLM([same] * 2 + ["Here it is."]), tools, max_repeated_calls=2).run("x")
    assert two.stop_reason is StopReason.REPEATED_CALL and two.iterations_used == 2
    with pytest.raises(ValueError, match="max_repeated_calls"):
        AgentConfig(max_repeated_calls=1)


def test_a_call_repeated_in_one_turn_ends_the_turn_and_runs_once(tmp_path: Path) -> None:
    # Qwen2.5-Coder under a grammar that allowed several calls wrote its one call again and again until
    # max_tokens: the second copy ends the turn, the call runs once, and the run goes on.
    same = format_tool_call(ToolCall("list_dir", {"path": "."}))
    other = format_tool_call(ToolCall("list_dir", {"path": "d"}))
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "d").mkdir()
    llm = ScriptedLLM(["\n".join([same, other, same, same, same]), "Done."], stops="ignore")
    result = Agent(llm, [listing(tmp_path)], multiple_calls=True).run("x")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "Done."
    assert [e.name for e in result.events if isinstance(e, ToolResultEvent)] == ["list_dir", "list_dir"]
    assert result.history[1].content.count("<tool_code>") == 2  # the turn as run: each call once


# Qwen2.5-Coder-1.5B (temperature 0), asked how many lines fruits.txt has: it read the file (7 lines), called a
# tool that does not exist, and answered with the unknown-tool correction word for word.
COUNT_LINES = '<tool_code>\n<name>count_lines</name>\n<parameters>\n{"text": "apple\\nbanana"}\n</parameters>\n</tool_code>'
ECHO = ("There is no tool named 'count_lines'. The available tools are: add. Call one of them; if none of them "
        "can do what you need, reply with your answer instead, without a tool call.")


def test_a_reply_that_only_repeats_the_correction_is_not_the_answer() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    llm = ScriptedLLM([COUNT_LINES, ECHO, "The file has 7 lines."])
    result = Agent(llm, [add]).run("How many lines does fruits.txt have? Answer with the number.")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "The file has 7 lines."
    told = llm.requests[2].messages[-1].content
    assert "repeated the message mylm sent you" in told
    assert "How many lines does fruits.txt have? Answer with the number." in told


def test_an_answer_quoting_a_tool_s_output_or_a_short_answer_is_still_the_answer(tmp_path: Path) -> None:
    @tool
    def read(path: str) -> str:
        """Read a file."""
        return "The code word is PELICAN, and it is written in this file on purpose."

    quoted = "The code word is PELICAN, and it is written in this file on purpose."
    llm = ScriptedLLM([call("read", path="secret.txt"), quoted])
    assert Agent(llm, [read]).run("What does secret.txt say?").final_text == quoted
    # after a correction, an answer that shares a few words with it is the model's own
    llm = ScriptedLLM([COUNT_LINES, "There is no tool for that, but the file has 7 lines."])
    result = Agent(llm, [read]).run("How many lines?")
    assert result.final_text == "There is no tool for that, but the file has 7 lines."


def test_a_call_repeated_on_the_first_turn_ends_the_stream_at_its_second_copy(tmp_path: Path) -> None:
    # BFCL simple_python_3, Qwen2.5-Coder-1.5B behind llama-server: on a first turn nobody knows yet whether the
    # template opened reasoning, so the parser holds calls back until the reply ends; the model wrote its one call
    # eight times (337 tokens, 50 s) before the repeat was noticed. The repeat is seen as it is written.
    from mylm.evaluation.runner import RecordingLLM

    call = format_tool_call(ToolCall("list_dir", {"path": "."}))
    recorder = RecordingLLM(ScriptedLLM(["\n".join([call] * 8), "Done."], chunk_size=3, stops="ignore"))
    agent = Agent(recorder, [listing(tmp_path)], multiple_calls=True)
    assert agent.opens_reasoning is None  # a first turn: unknown
    result = agent.run("x")
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert recorder.turns[0].text.count("<tool_code>") == 2
    assert [e.name for e in result.events if isinstance(e, ToolResultEvent)] == ["list_dir"]
