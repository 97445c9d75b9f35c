"""The loop with models that drift (issue 11): drifted calls run and are recorded canonically, reasoning never
runs, cut-off and out-of-order blocks are corrected, and a repeated invalid call ends the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mylm import Agent, StopReason, tool
from mylm.protocol.canonical import format_tool_call
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.core.types import ErrorEvent, ToolCall, ToolResultEvent

SCHEMA_ECHO = ('<tool_code>\n<name>list_dir</name>\n<parameters>\n{"type": "object", "properties": {"path": '
               '{"type": "string", "description": "Directory"}}, "required": ["path"]}\n</parameters>\n</tool_code>')


def make_tools(ran: list[str]) -> list[object]:
    @tool
    def list_dir(path: str) -> str:
        """List a directory."""
        ran.append(f"list_dir {path}")
        return "a.txt\nb.txt"

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        ran.append(f"write_file {path}")
        return "written"

    return [list_dir, write_file]


def agent(replies: list[str | ScriptedReply], ran: list[str], **options: object) -> tuple[Agent, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    return Agent(llm, make_tools(ran), workspace=Path("."), **options), llm  # type: ignore[arg-type]


def test_drift_tool_name_as_tag_runs_and_history_records_the_canonical_form() -> None:
    ran: list[str] = []
    a, llm = agent(["I will look.\n<list_dir>\n<path>src</path>\n</list_dir>", "Two files."], ran)
    result = a.run("what is in src?")
    assert ran == ["list_dir src"] and result.final_text == "Two files."
    recorded = [m.content for m in result.history if m.role == "assistant"][0]
    assert format_tool_call(ToolCall("list_dir", {"path": "src"})) in recorded and "<list_dir>" not in recorded


def test_drift_react_action_runs() -> None:
    ran: list[str] = []
    a, _ = agent(['Thought: look first\nAction: list_dir\nAction Input: {"path": "."}', "Done."], ran)
    assert a.run("go").final_text == "Done." and ran == ["list_dir ."]


def test_drift_unknown_tool_as_tag_is_corrected_never_the_answer() -> None:
    ran: list[str] = []
    a, llm = agent(['<tool code name="read_file">{"path": "a"}</tool code>', "Fine, no file reading."], ran)
    result = a.run("go")
    assert result.final_text == "Fine, no file reading." and ran == []
    assert "not one of the tools" in llm.requests[1].messages[-1].content


def test_lone_think_close_call_drafted_in_reasoning_never_runs() -> None:
    ran: list[str] = []
    draft = 'Maybe <tool_code><name>write_file</name><parameters>{"path": "x", "content": "y"}</parameters></tool_code>'
    a, _ = agent([draft + "\nNo need.</think>\nNothing to write.", "unused"], ran, multiple_calls=False)
    result = a.run("go")
    assert ran == [] and result.final_text == "Nothing to write."
    assert a.opens_reasoning is True  # learned from the lone </think>: later turns start in reasoning


def test_lone_think_close_learned_template_reads_later_replies_as_reasoning() -> None:
    ran: list[str] = []
    call = format_tool_call(ToolCall("list_dir", {"path": "."}))
    a, _ = agent(["thinking</think>\n" + call, "still thinking " + call + "</think>\nTwo files, done."], ran)
    result = a.run("go")
    assert ran == ["list_dir ."] and result.final_text == "Two files, done."


def test_truncated_opening_tag_is_a_cut_off_turn_not_the_answer() -> None:
    ran: list[str] = []
    a, llm = agent(["Let me check.\n<tool_co", "No files needed."], ran)
    result = a.run("go")
    assert result.final_text == "No files needed."
    assert "cut off" in llm.requests[1].messages[-1].content


def test_sequenced_blocks_a_broken_first_block_stops_the_second() -> None:
    ran: list[str] = []
    broken = '<tool_code><name>write_file</name><parameters>{"path": "x", content: </parameters></tool_code>'
    good = format_tool_call(ToolCall("list_dir", {"path": "."}))
    a, llm = agent([f"{broken}\n{good}", "gave up"], ran, multiple_calls=True)
    result = a.run("go")
    assert ran == [] and result.final_text == "gave up"
    told = llm.requests[1].messages[-1].content
    assert "write_file" in told and "list_dir" in told and "run in order" in told


def test_repeated_schema_echo_ends_the_run_with_a_changing_correction() -> None:
    ran: list[str] = []
    a, llm = agent([SCHEMA_ECHO] * 5, ran, max_consecutive_failures=3, max_iterations=10)
    result = a.run("go")
    assert result.stop_reason is StopReason.ERROR and ran == [] and llm.remaining == 2
    first, second = (r.messages[-1].content for r in llm.requests[1:3])
    assert "JSON Schema" in first and first != second and "same problem" in second


def test_repeated_invalid_arguments_count_as_unusable_turns() -> None:
    ran: list[str] = []
    bad = format_tool_call(ToolCall("write_file", {"path": "x"}))  # content missing, every time
    a, llm = agent([bad] * 5, ran, max_consecutive_failures=3, max_iterations=10)
    result = a.run("go")
    assert result.stop_reason is StopReason.ERROR and llm.remaining == 2
    errors = [e.output for e in result.events if isinstance(e, ToolResultEvent)]
    assert errors[0] != errors[1] and "Write the call in exactly this form" in errors[1]
    # The block to copy reaches the model as written, keeping the model's path and filling what it left out.
    second = llm.requests[2].messages[-1].content
    assert '<tool_code>\n<name>write_file</name>\n<parameters>\n{"path": "x", "content": "example"}' in second
    assert any(isinstance(e, ErrorEvent) for e in result.events)


def test_a_turn_with_one_valid_call_is_not_an_unusable_turn() -> None:
    ran: list[str] = []
    bad = format_tool_call(ToolCall("write_file", {"path": "x"}))
    good = format_tool_call(ToolCall("list_dir", {"path": "."}))
    a, _ = agent([f"{bad}\n{good}"] * 3 + ["done"], ran, multiple_calls=True, max_consecutive_failures=2)
    result = a.run("go")
    assert result.stop_reason is StopReason.FINAL_ANSWER and ran == ["list_dir ."] * 3


@pytest.mark.slow
def test_end_to_end_a_drifted_call_runs_and_only_the_answer_reaches_stdout(subprocess_env: dict[str, str]) -> None:
    """`mylm ask` with a model that writes Cline-style markup: the call runs, stdout holds the answer alone."""
    from tests.providers.servers import OpenAIServer
    from tests.test_end_to_end import mylm

    with OpenAIServer() as server:
        server.script(["I'll look.\n<list_dir>\n<path>.</path>\n</list_dir>", "The workspace is empty."])
        done = mylm(["ask", "--yes", "what is here?"], subprocess_env,
                    MYLM_BASE_URL=server.base_url, MYLM_MODEL="m", MYLM_API_KEY="k")
        posts = [r for r in server.requests if r.method == "POST"]
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The workspace is empty.\n"
    assert len(posts) == 2 and "<observation" in json.dumps(posts[1].body)


@pytest.mark.slow
def test_end_to_end_a_model_stuck_in_another_format_never_exits_0_with_markup(
    subprocess_env: dict[str, str]
) -> None:
    from tests.providers.servers import OpenAIServer
    from tests.test_end_to_end import mylm

    stuck = "<ask_followup_question>\n<question>Which folder?</question>\n</ask_followup_question>"
    with OpenAIServer() as server:
        server.script([stuck] * 6)
        done = mylm(["ask", "--yes", "go"], subprocess_env,
                    MYLM_BASE_URL=server.base_url, MYLM_MODEL="m", MYLM_API_KEY="k")
    assert done.returncode != 0 and "<ask_followup_question>" not in done.stdout
    assert "unusable replies" in done.stderr and "Traceback" not in done.stderr
