"""`mylm eval`'s agent tasks: the shipped suite (every task solvable, none solved by doing nothing), scoring turns,
each mode against a real loopback server, and `--save`."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mylm.config import load_settings
from mylm.core.errors import ConfigError
from mylm.core.types import ToolCall
from mylm.evaluation import judge_turn, load_suite, run_task, totals
from mylm.evaluation.runner import workspace_for
from mylm.evaluation.suite import default_suite_path, normalise
from mylm.llm import FinishChunk
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM
from tests.cli.cli_support import invoke
from tests.providers.servers import Completion, OpenAIServer
from tests.test_config import write_config

needs_python = pytest.mark.skipif(shutil.which("python3") is None, reason="the tasks' checks run python3")


def _edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        path.write_text(path.read_text().replace(old, new))
    return apply


def _write(rel: str, text: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).write_text(text)


#: What a model that solves each shipped task leaves behind: its answer and its edits.
SOLUTIONS: dict[str, tuple[str, Callable[[Path], None] | None]] = {
    "read-secret": ("The code word is PELICAN.", None),
    "count-lines": ("fruits.txt has 7 lines.", None),
    "find-definition": ("`src/util.py`", None),
    "fix-off-by-one": ("Fixed.", _edit("stats.py", "range(1, len(values))", "range(len(values))")),
    "read-json-field": ("5433", None),
    "create-file": ("Done.", _write("hello.txt", "Hello, mylm\n")),
    "rename-variable": ("Renamed.", _edit("app.py", "cnt", "count")),
    "two-step-lookup": ("The access code is 4471.", None),
    "search-string": ("docs/beta.md mentions it.", None),
    "edit-config-value": ("Done.", _edit("settings.ini", "timeout = 30", "timeout = 90")),
    "run-script": ("It prints 2883.", None),
    "list-by-extension": ("jan.csv, feb.csv and mar.csv", None),
    "append-line": ("Added.", _edit("todo.txt", "water plants\n", "water plants\nbuy milk\n")),
    "fix-typo": ("Fixed.", _edit("config.ini", "prot", "port")),
}
#: Near misses each check must catch.
WRONG: dict[str, tuple[str, Callable[[Path], None] | None]] = {
    "count-lines": ("17", None),
    "fix-off-by-one": ("Fixed the test.", _write("test_stats.py", "print('ok')\n")),
    "rename-variable": ("Renamed.", _edit("app.py", "cnt = 0", "count = 0")),
    "edit-config-value": ("Done.", _write("settings.ini", "[net]\ntimeout = 90\n")),
    "append-line": ("Added.", _write("todo.txt", "buy milk\n")),
    "two-step-lookup": ("1234", None),
}


def test_the_shipped_suite_has_at_least_twelve_distinct_checkable_tasks() -> None:
    tasks = load_suite(default_suite_path())
    assert len(tasks) >= 12 and len({t.name for t in tasks}) == len(tasks)
    assert set(SOLUTIONS) == {t.name for t in tasks}
    assert any(t.command for t in tasks) and any("execute_command" in t.tools for t in tasks)


@needs_python
@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_every_task_is_solvable_and_unsolved_by_doing_nothing(name: str) -> None:
    task = next(t for t in load_suite(default_suite_path()) if t.name == name)
    with workspace_for(task) as (root, _, _, run):
        assert task.check("I could not do it.", root, run) is not None
        answer, edit = SOLUTIONS[name]
        if edit is not None:
            edit(root)
        assert task.check(answer, root, run) is None
    if name in WRONG:
        with workspace_for(task) as (root, _, _, run):
            answer, edit = WRONG[name]
            if edit is not None:
                edit(root)
            assert task.check(answer, root, run) is not None


def test_answers_are_compared_normalised() -> None:
    assert normalise("  The answer:\n **`PELICAN`**. ") == "the answer: **`pelican"
    assert normalise('"4471."') == "4471"


def test_a_user_suite_overrides_the_shipped_one_and_bad_ones_are_one_clear_error(tmp_path: Path) -> None:
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "evals" / "suite.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[[task]]\nname = "mine"\nprompt = "p"\nanswer_contains = ["x"]\n')
    assert [t.name for t in load_suite(default_suite_path())] == ["mine"]
    bad = tmp_path / "bad.toml"
    for body, words in (
        ('files = { "../escape" = "x" }\nanswer_contains = ["x"]', "relative path inside the workspace"),
        ('tools = ["remember"]\nanswer_contains = ["x"]', "unknown tool 'remember'"),
        ('file_contains = ["x"]', "need file"),
        ("", "needs a check"),
        ('command = "  "', "command must be a non-empty string"),
    ):
        bad.write_text(f'[[task]]\nname = "t"\nprompt = "p"\n{body}\n')
        with pytest.raises(ConfigError, match=words):
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
    assert (result.turns, result.valid_turns, result.format_errors, result.bad_calls) == (3, 2, 1, 1)
    assert result.tokens_estimated and result.completion_tokens > 0
    assert llm.requests[0].constraint is not None and llm.requests[0].constraint.required
    summary = totals([result, result])
    assert (summary.runs, summary.solved, summary.turns, summary.valid_turns) == (2, 2, 6, 4)


@needs_python
def test_a_command_task_runs_the_command_in_the_sandbox_approved_inside_the_workspace() -> None:
    task = next(t for t in load_suite(default_suite_path()) if t.name == "fix-off-by-one")
    fix = format_tool_call(ToolCall("edit_file", {"path": "stats.py", "old": "range(1, len(values))",
                                                  "new": "range(len(values))"}))
    test = format_tool_call(ToolCall("execute_command", {"command": "python3 test_stats.py"}))
    llm = ScriptedLLM([fix, test, "<final_answer>The test passes now.</final_answer>"])
    result = run_task(llm, task, constrain="off", max_iterations=4)
    assert result.solved, (result.reason, result.turn_log)
    assert result.mode == "protocol-nogrammar" and result.bad_calls == 0


def _items(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_mylm_eval_json_against_a_loopback_server() -> None:
    call = format_tool_call(ToolCall("read_file", {"path": "secret.txt"}))
    with OpenAIServer([call, "<final_answer>It is PELICAN.</final_answer>"]) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "m", "--task", "read-secret", "--json"])
        bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.exit_code == 0, result.stderr
    lines = _items(result.stdout)
    assert [line["type"] for line in lines] == ["item", "row", "run"]
    assert lines[0]["passed"] and lines[0]["suite"] == "tasks" and lines[0]["detail"]["turns"] == 2
    assert lines[1]["passed"] == 1 and lines[1]["category"] == "tasks" and lines[2]["best_mode"] == "protocol"
    assert "grammar" in bodies[0]  # auto: an OpenAI-compatible server is sent the grammar


@needs_python
def test_native_and_serve_tasks_run_the_same_builtin_tools() -> None:
    run = {"id": "c1", "name": "execute_command", "arguments": '{"command": "python3 compute.py"}'}
    replies = [
        Completion("", tool_calls=[run]), Completion("It prints 2883."),  # native: the endpoint's own calls
        # serve: mylm serve upstream reads mylm's protocol, and answers the native loop with tool_calls
        format_tool_call(ToolCall("execute_command", {"command": "python3 compute.py"})),
        "<final_answer>2883</final_answer>",
    ]
    with OpenAIServer(replies) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "m", "--task", "run-script", "--mode",
                         "native,serve", "--json"])
        bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.exit_code == 0, result.stderr
    items = [line for line in _items(result.stdout) if line["type"] == "item"]
    assert [(i["mode"], i["passed"]) for i in items] == [("native", True), ("serve", True)], items
    assert {t["function"]["name"] for t in bodies[0]["tools"]} == {
        "execute_command", "read_file", "write_file", "edit_file", "list_dir", "search_files"}
    assert "parallel_tool_calls" not in bodies[0]
    assert bodies[1]["messages"][-1]["role"] == "tool" and "2883" in bodies[1]["messages"][-1]["content"]
    assert "tools" not in bodies[2] and "execute_command" in bodies[2]["messages"][0]["content"]


def test_mylm_eval_names_an_unknown_task() -> None:
    result = invoke(["eval", "--base-url", "http://127.0.0.1:9/v1", "--task", "nope"])
    assert result.exit_code == 2 and "no task named 'nope'" in result.stderr


def test_save_writes_the_best_mode_into_the_profile_and_the_agent_honours_it() -> None:
    call = format_tool_call(ToolCall("read_file", {"path": "secret.txt"}))
    # protocol (grammar) fails the task, protocol-nogrammar solves it: `constrain = "off"` is saved. (Answered
    # before secret.txt was read, the first answer is sent back once: `unlooked`; the second is taken.)
    dunno = "<final_answer>I do not know.</final_answer>"
    replies = [dunno, dunno, call, "<final_answer>PELICAN</final_answer>", "<final_answer>hello</final_answer>"]
    with OpenAIServer(replies) as server:
        path = write_config(f'# my endpoints\ndefault_profile = "other"\n\n[profiles.bench]  # the box under the desk\n'
                       f'base_url = "{server.base_url}"\nmodel = "m"\n\n[profiles.other]\nmodel = "x"\n')
        result = invoke(["eval", "-m", "bench", "--task", "read-secret", "--mode", "protocol,protocol-nogrammar",
                         "--save"])
        assert result.exit_code == 0, result.stderr
        assert 'saved constrain = "off" in profile bench' in result.stderr
        text = path.read_text()
        assert text.startswith("# my endpoints\n") and "# the box under the desk" in text
        assert load_settings({"model": "bench"}).constrain == "off"
        assert load_settings({"model": "other"}).constrain == "auto"
        asked = invoke(["ask", "-m", "bench", "say hello"])
        body = server.requests[-1].body
    assert asked.exit_code == 0, asked.stderr
    assert "grammar" not in body  # the agent reads the saved setting
    # Saving again replaces the setting and its note rather than adding lines.
    again = _save_once(path)
    assert again.count("constrain =") == 1 and again.count("# mylm eval --save:") == 1


def _save_once(path: Path) -> str:
    from mylm.evaluation.profile import save_setting

    save_setting("bench", "auto", endpoint={}, path=path, comment="protocol scored best")
    return path.read_text()


def test_save_without_a_profile_adds_one_for_the_endpoint_and_model() -> None:
    with OpenAIServer(["<final_answer>PELICAN</final_answer>"]) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "qwen2.5-coder-0.5b", "--task",
                         "read-secret", "--save"])
    assert result.exit_code == 0, result.stderr
    settings = load_settings({"model": "qwen2-5-coder-0-5b"})
    assert (settings.profile, settings.base_url, settings.model, settings.constrain) == (
        "qwen2-5-coder-0-5b", server.base_url, "qwen2.5-coder-0.5b", "auto")


def test_an_agent_ending_the_run_is_a_failed_task_not_an_endpoint_error() -> None:
    from mylm.evaluation.modes import Limits
    from mylm.evaluation.score import Session, run_agent_task
    from mylm.prompts import PromptLoader

    task = next(t for t in load_suite(default_suite_path()) if t.name == "read-secret")
    # What Qwen2.5-Coder-0.5B did on this task: the same read three times, then the run ends (repeated_call).
    same = format_tool_call(ToolCall("read_file", {"path": "secret.txt"}))
    with Session(ScriptedLLM([same] * 4), PromptLoader.default(), Limits(max_tokens=200, timeout=60)) as session:
        item = run_agent_task(session, task, "protocol", max_iterations=6)
    assert (item.passed, item.error) == (False, None)
    assert "3 times in a row" in item.reason and item.detail["stop_reason"] == "repeated_call"
    # every reply as written and the conversation the model saw are kept, to read why a task failed
    assert len(item.detail["replies"]) == 4 and all(r in same for r in item.detail["replies"][:3])
    history = item.detail["history"]
    assert history[0] == {"role": "user", "content": task.prompt}
    assert "The code word" in history[2]["content"] and history[-1]["role"] == "assistant"


def test_a_run_stuck_on_a_call_is_scored_by_the_answer_it_then_gives() -> None:
    from mylm.evaluation.modes import Limits
    from mylm.evaluation.score import Session, run_agent_task
    from mylm.prompts import PromptLoader

    task = next(t for t in load_suite(default_suite_path()) if t.name == "read-secret")
    # What Qwen2.5-Coder-0.5B did: read secret.txt three times, then, asked for its answer with no tools, gave the
    # right word. The user saw that answer, as one given at the iteration limit; the run still says it was stuck.
    same = format_tool_call(ToolCall("read_file", {"path": "secret.txt"}))
    replies = [same] * 3 + ["<final_answer>PELICAN</final_answer>"]
    with Session(ScriptedLLM(replies), PromptLoader.default(), Limits(max_tokens=200, timeout=60)) as session:
        item = run_agent_task(session, task, "protocol", max_iterations=6)
    assert (item.passed, item.error, item.reason) == (True, None, "")
    assert item.detail["stop_reason"] == "repeated_call" and item.detail["answer"] == "PELICAN"
