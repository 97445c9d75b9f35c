"""`mylm eval`: the shipped suite, scoring turns, and the command against a real loopback server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mylm.core.errors import ConfigError
from mylm.evaluation import judge_turn, load_suite, run_task, totals
from mylm.evaluation.suite import default_suite_path
from mylm.llm import FinishChunk
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM
from mylm.core.types import ToolCall
from tests.cli.cli_support import invoke
from tests.providers.servers import OpenAIServer


def test_the_shipped_suite_loads_and_every_task_is_checkable() -> None:
    tasks = load_suite(default_suite_path())
    assert len(tasks) >= 5 and len({t.name for t in tasks}) == len(tasks)
    assert all(t.answer_contains or t.file for t in tasks)


def test_a_user_suite_overrides_the_shipped_one_and_bad_ones_are_one_clear_error(tmp_path: Path) -> None:
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "evals" / "suite.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[[task]]\nname = "mine"\nprompt = "p"\nanswer_contains = ["x"]\n')
    assert [t.name for t in load_suite(default_suite_path())] == ["mine"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[task]]\nname = "t"\nprompt = "p"\nfiles = { "../escape" = "x" }\nanswer_contains = ["x"]\n')
    with pytest.raises(ConfigError, match="relative path inside the workspace"):
        load_suite(bad)


def test_judging_a_turn() -> None:
    from mylm.tools.files import file_tools
    from mylm.tools.paths import Workspace

    tools = {t.name: t for t in file_tools(Workspace(Path.cwd()))}
    good = format_tool_call(ToolCall("read_file", {"path": "a"}))
    assert judge_turn("thinking" + good, FinishChunk("stop"), tools) == (True, 1)
    assert judge_turn(format_tool_call(ToolCall("read_file", {"offset": 2})), FinishChunk("stop"), tools)[0] is False
    assert judge_turn(format_tool_call(ToolCall("nope", {})), FinishChunk("stop"), tools)[0] is False
    assert judge_turn("<final_answer>42</final_answer>", FinishChunk("stop"), tools) == (True, 0)
    assert judge_turn("The answer is", FinishChunk("length"), tools)[0] is False


def test_a_task_runs_in_a_fresh_workspace_and_is_scored() -> None:
    task = next(t for t in load_suite(default_suite_path()) if t.name == "read-secret")
    llm = ScriptedLLM([
        "Let me read it." + format_tool_call(ToolCall("read_file", {"path": "secret.txt"})),
        "<tool_code>\n<name>read_file</name>\n<parameters>\n{broken\n</parameters>\n</tool_code>",
        "<final_answer>PELICAN</final_answer>",
    ])
    result = run_task(llm, task, constrain="grammar", max_iterations=4)
    assert result.solved and result.called_tool and result.stop_reason == "final_answer"
    assert (result.turns, result.valid_turns, result.format_errors) == (3, 2, 1)
    assert result.tokens_estimated and result.completion_tokens > 0
    assert llm.requests[0].constraint is not None and llm.requests[0].constraint.required
    summary = totals([result, result])
    assert (summary.runs, summary.solved, summary.turns, summary.valid_turns) == (2, 2, 6, 4)


def test_mylm_eval_json_against_a_loopback_server() -> None:
    call = format_tool_call(ToolCall("read_file", {"path": "secret.txt"}))
    with OpenAIServer([call, "<final_answer>It is PELICAN.</final_answer>"]) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "m", "--task", "read-secret", "--json"])
        bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["task", "summary"]
    assert lines[0]["solved"] and lines[0]["valid_turns"] == 2 and lines[0]["called_tool"]
    assert lines[1]["solved"] == 1 and lines[1]["constrain"] == "auto"
    assert "grammar" in bodies[0]  # auto: an OpenAI-compatible server is sent the grammar


def test_mylm_eval_names_an_unknown_task() -> None:
    result = invoke(["eval", "--base-url", "http://127.0.0.1:9/v1", "--task", "nope"])
    assert result.exit_code == 2 and "no task named 'nope'" in result.stderr
