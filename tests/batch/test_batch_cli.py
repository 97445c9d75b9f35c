"""`mylm batch` as a real process against a loopback server: progress, refusals, real kills, then resume."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mylm.protocol.parser import format_tool_call
from mylm.core.types import ToolCall
from tests.cli.cli_support import invoke
from tests.support import default_sigint
from tests.providers.servers import Hang, HTTPError, OpenAIServer

#: Bounds a wait for the child's output, so a broken test fails instead of hanging.
WAIT = 60.0
ANSWER = "The task is done, and here is a longer answer so that it streams for a while."


def write_tasks(path: Path, count: int) -> Path:
    lines = (json.dumps({"id": f"t{i:02d}", "prompt": f"do {i}"}) + "\n" for i in range(count))
    path.write_text("".join(lines))
    return path


def endpoint(server: OpenAIServer) -> list[str]:
    return ["--base-url", server.base_url, "--provider", "openai", "-m", "m"]


def start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mylm", "batch", *args], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint)


def next_event(child: subprocess.Popen[str], kind: str) -> dict[str, Any]:
    """Read JSON events from the child's stdout until one of `kind` arrives."""
    assert child.stdout is not None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([child.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = child.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        if event["type"] == kind:
            return dict(event)
    raise AssertionError(f"no {kind} event from mylm batch")


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_a_killed_batch_keeps_whole_results_and_resumes(
    signum: int, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 12)
    out = tmp_path / "out.jsonl"
    with OpenAIServer([ANSWER] * 40, delay=0.01) as server:
        child = start([str(tasks), "-o", str(out), *endpoint(server), "-j", "2", "--json"], subprocess_env,
                      tmp_path)
        next_event(child, "task_end")
        next_event(child, "task_end")
        child.send_signal(signum)
        _, stderr = child.communicate(timeout=WAIT)
        first = results(out)  # every line parses: nothing torn
        assert 2 <= len(first) < 12 and len({r["id"] for r in first}) == len(first)
        if signum == signal.SIGINT:
            assert child.returncode == 130
            assert "to resume" in stderr and "mylm batch" in stderr
            assert "Traceback" not in stderr
        else:
            assert child.returncode == -signal.SIGKILL
        again = start([str(tasks), "-o", str(out), *endpoint(server), "-j", "4", "--json"], subprocess_env,
                      tmp_path)
        begin = next_event(again, "batch_start")
        again.communicate(timeout=WAIT)
    assert again.returncode == 0
    assert begin["skipped"] == len(first) and begin["total"] == 12 - len(first)
    final = results(out)
    assert sorted(r["id"] for r in final) == [f"t{i:02d}" for i in range(12)]
    assert all(r["final_text"] == ANSWER for r in final)


def test_a_torn_last_line_is_cut_and_its_task_runs_again(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 2)
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "t00", "final_text": "x", "stop_reason": "final_answer"}\n{"id": "t01", "final_te')
    with OpenAIServer(["Again."]) as server:
        result = invoke(["batch", str(tasks), "-o", str(out), *endpoint(server)])
    assert result.exit_code == 0, result.output
    assert "torn line" in result.stderr
    assert [r["id"] for r in results(out)] == ["t00", "t01"]


def test_calls_that_would_ask_are_refused_and_the_model_is_told(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "w", "prompt": "write it"}\n')
    write = format_tool_call(ToolCall("write_file", {"path": "a.txt", "content": "x"}))
    with OpenAIServer([write, "Could not write."]) as server:
        result = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), *endpoint(server)])
    assert result.exit_code == 0, result.output
    observation = server.requests[1].body["messages"][-1]["content"]
    assert "no one can be asked" in observation
    (record,) = results(tmp_path / "out.jsonl")
    assert record["final_text"] == "Could not write."


def test_yes_lets_calls_run_in_the_task_workspace(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "w", "prompt": "write it"}\n')
    write = format_tool_call(ToolCall("write_file", {"path": "a.txt", "content": "x"}))
    with OpenAIServer([write, "Wrote it."]) as server:
        result = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), "--yes", "--keep-workspaces",
                         *endpoint(server)])
    assert result.exit_code == 0, result.output
    (record,) = results(tmp_path / "out.jsonl")
    assert (Path(record["workspace"]) / "a.txt").read_text() == "x"
    assert not (Path.cwd() / "a.txt").exists()


def test_plain_progress_and_the_summary_when_not_a_terminal(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 3)
    with OpenAIServer([ANSWER] * 3) as server:
        result = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), *endpoint(server)])
    assert result.exit_code == 0
    assert "[3/3]" in result.stderr and "tasks/min" in result.stderr and "tokens/s" in result.stderr
    assert "ended: final_answer" in result.stderr and "\x1b[" not in result.stderr


def test_failed_tasks_exit_1_and_bad_task_files_exit_2(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    with OpenAIServer([]) as server:  # every request: 500 "script exhausted"
        failed = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), "--retries", "0",
                         *endpoint(server)])
    assert failed.exit_code == 1
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    bad = invoke(["batch", str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "o2.jsonl")])
    assert bad.exit_code == 2 and "line 1" in bad.stderr and "Traceback" not in bad.stderr


def test_batch_help_does_not_import_rich(subprocess_env: dict[str, str]) -> None:
    code = (
        "import sys; from mylm.cli import main; sys.argv = ['mylm', 'batch', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('rich' in sys.modules, 'requests' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env, capture_output=True, text=True,
                          check=True)
    assert done.stderr.split() == ["False", "False"] and "--concurrency" in done.stdout


def test_live_line_on_a_terminal(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    import pexpect

    tasks = write_tasks(tmp_path / "tasks.jsonl", 2)
    env = {**subprocess_env, "TERM": "xterm", "COLUMNS": "200"}
    with OpenAIServer([ANSWER] * 2) as server:
        args = ["-m", "mylm", "batch", str(tasks), "-o", str(tmp_path / "o.jsonl"), *endpoint(server)]
        child = pexpect.spawn(sys.executable, args, env=env, cwd=str(tmp_path), encoding="utf-8",
                              timeout=WAIT, dimensions=(24, 200), preexec_fn=default_sigint)
        child.expect("tasks/min")
        child.expect(pexpect.EOF)
        rest = child.before
        child.close()
    assert child.exitstatus == 0
    assert "mylm batch" in rest and "ended: final_answer" in rest  # the summary table


def test_ray_options_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mylm._version import install_command

    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    out = str(tmp_path / "out.jsonl")
    misplaced = invoke(["batch", str(tasks), "-o", out, "--ray-address", "auto"])
    assert misplaced.exit_code == 2 and "--executor ray" in misplaced.stderr
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    missing = invoke(["batch", str(tasks), "-o", out, "--executor", "ray"])
    assert missing.exit_code == 2 and f"needs Ray: {install_command('ray')}" in missing.stderr


def test_a_failed_task_is_one_progress_line(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    with OpenAIServer(["", "", ""]) as server:  # three empty replies: the run fails with a multi-line reason
        result = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), *endpoint(server)])
    assert result.exit_code == 1
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("[1/1]")]
    assert "unusable replies" in line and "failed" in line
    assert "\n" in results(tmp_path / "out.jsonl")[0]["error"]  # the result keeps the whole message


def test_save_sessions_records_each_task_and_names_it_in_the_result(tmp_path: Path) -> None:
    from tests.cli.cli_support import transcripts

    tasks = write_tasks(tmp_path / "tasks.jsonl", 2)
    with OpenAIServer(["First.", "Second."]) as server:
        result = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), "--save-sessions", "-j", "1",
                         *endpoint(server)])
    assert result.exit_code == 0, result.output
    saved = {path.name.removesuffix(".jsonl"): path for path in transcripts()}
    records = results(tmp_path / "out.jsonl")
    assert {r["session"] for r in records} == set(saved)
    for record in records:
        lines = [json.loads(line) for line in saved[record["session"]].read_text().splitlines()]
        assert lines[0]["command"] == "batch" and lines[0]["task"] == record["id"]
        assert lines[-1]["type"] == "run_end" and record["final_text"] in json.dumps(lines)


def test_ray_start_up_output_comes_before_the_progress_line(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    # Issue 20: Ray's token-auth warning landed inside the live progress line: Ray is joined before the view
    # starts. A stand-in `ray` package prints such a warning, then cannot join.
    fake = tmp_path / "fake" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import sys\n"
        "def is_initialized():\n    return False\n"
        "def init(**options):\n"
        "    print('WARNING: token authentication is disabled', file=sys.stderr)\n"
        "    raise ConnectionError('no cluster here')\n"
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "p"}\n')
    out = tmp_path / "out.jsonl"
    env = dict(subprocess_env, PYTHONPATH=f"{tmp_path / 'fake'}:{subprocess_env['PYTHONPATH']}")
    done = subprocess.run([sys.executable, "-m", "mylm", "batch", str(tasks), "-o", str(out), "--executor", "ray"],
                          env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "WARNING: token authentication is disabled",
        "mylm: error: cannot join the Ray cluster at auto: no cluster here",
    ]
    assert not out.exists()


def test_live_summary_table_has_no_empty_header_row() -> None:
    import io

    from mylm.batch import BatchSummary, Progress
    from mylm.cli.batch_view import LiveView

    err = io.StringIO()
    view = LiveView(Progress(1), err, str)
    view.close(BatchSummary(total=1, done=1, failed=0, skipped=0, remaining=0, interrupted=False, wall_s=2.0,
                            tokens=10, rate_limited=0, records=({"stop_reason": "final_answer"},)))
    rows = [line for line in err.getvalue().splitlines() if line.strip()]
    assert rows[0].strip() == "mylm batch"
    # The top border, then the first row at once: no row of blank cells, no header rule under it.
    assert "ended: final_answer" in rows[2], err.getvalue()
    assert not any(set(line.strip()) <= set("│┃ ") for line in rows[1:]), err.getvalue()


def test_failed_tasks_run_again_on_resume_and_the_batch_says_how_they_had_failed(tmp_path: Path) -> None:
    # Issue 30: a timed-out or endpoint-failed task was recorded as done; the same command said "0 tasks to
    # run, 2 already done" and exit 0, and the user deleted the results file by hand.
    tasks = write_tasks(tmp_path / "tasks.jsonl", 3)
    out = tmp_path / "out.jsonl"
    refused = HTTPError(400, {"error": {"message": "bad day", "type": "invalid_request_error"}})
    args = ["batch", str(tasks), "-o", str(out), "-j", "1", "--retries", "0", "--timeout", "1"]
    with OpenAIServer([ANSWER, Hang(), refused]) as server:  # -j 1: the tasks take them in order
        first = invoke([*args, *endpoint(server)])
    assert first.exit_code == 1, first.output
    assert [r["stop_reason"] for r in results(out)] == ["final_answer", "timeout", "error"]
    assert "mylm: 2 tasks failed (1 endpoint error, 1 timed out): the same command runs them again; more time " \
           "for each: --timeout SECONDS (or timeout = SECONDS in config.toml, or MYLM_TIMEOUT), or the task's " \
           '"timeout"' in first.stderr
    with OpenAIServer([ANSWER] * 2) as server:
        second = invoke([*args, *endpoint(server)])
    assert second.exit_code == 0, second.output
    assert second.stderr.splitlines()[0] == \
        "batch: 2 tasks to run again: 1 endpoint error, 1 timed out; 1 already done, 1 at a time"
    assert len(server.requests) == 2
    # The last line of an id is its result: every task now has an answer.
    latest = {r["id"]: r for r in results(out)}
    assert sorted(latest) == ["t00", "t01", "t02"] and all(r["final_text"] == ANSWER for r in latest.values())
    with OpenAIServer([]) as server:
        third = invoke([*args, *endpoint(server)])
    assert third.exit_code == 0 and not server.requests
    assert third.stderr.splitlines()[0] == "batch: 0 tasks to run, 3 already done, 1 at a time"


def test_batch_takes_ask_s_run_flags_and_gives_each_task_ask_s_agent(tmp_path: Path) -> None:
    # Issue 30: batch had no --max-tokens (nor --tool-choice); every flag of `ask`'s run options is `batch`'s.
    from mylm.cli.ask import ask
    from mylm.cli.batch import batch

    run_flags = {"--max-iterations", "--timeout", "--max-tokens", "--yes", "--sandbox", "--tool-choice"}
    for command in (ask, batch):
        assert run_flags <= {opt for param in command.params for opt in param.opts}, command.name
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    with OpenAIServer([ANSWER]) as server:
        result = invoke(["batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), "--max-tokens", "77",
                         "--tool-choice", "none", *endpoint(server)])
    assert result.exit_code == 0, result.output
    body = server.requests[0].body
    assert body["max_tokens"] == 77
    assert "list_dir" not in body["messages"][0]["content"]  # tool choice none: no tool is offered
    bad = invoke(["batch", str(tasks), "-o", str(tmp_path / "o2.jsonl"), "--tool-choice", "nope"])
    assert bad.exit_code == 2 and "--tool-choice" in bad.stderr and "read_file" in bad.stderr


def test_with_nothing_configured_a_batch_task_gets_the_endpoint_ask_would(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 30: `ask` ran the pulled in-process model, `batch` failed every task with "ollama needs a model name".
    from mylm.cli import runner
    from mylm.cli.batch_agent import BatchAgentFactory
    from mylm.config import load_settings

    settings = load_settings({})
    monkeypatch.setattr("mylm.providers.local_engine.engine_available", lambda: True)
    factory = BatchAgentFactory.from_settings(settings)
    assert factory.endpoint["provider"] == runner.make_endpoint(settings).provider == "local"
    assert factory.suggest_local and factory.agent_options() == runner.agent_options(settings, None)
    monkeypatch.setattr("mylm.providers.local_engine.engine_available", lambda: False)
    assert BatchAgentFactory.from_settings(settings).endpoint["provider"] is None  # a local Ollama, as `ask`
