"""Output that cannot be written (issue 20, item 5): a full disk, a closed stdout, a reader that went away.

Each is one line on stderr and its own exit code, in every command, `--help` included, and the conversation is
saved; and click's own usage errors read like mylm's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import call, transcripts, write_script

from mylm.cli.root import EXIT_BROKEN_PIPE, EXIT_OUTPUT
from mylm.sessions import load

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")


def _shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `python -m mylm` through a shell line (its redirections are the point), detached from any terminal."""
    return subprocess.run(
        ["/bin/sh", "-c", line.replace("mylm ", f"{sys.executable} -m mylm ")], env=env, capture_output=True,
        text=True, stdin=subprocess.DEVNULL, timeout=60, start_new_session=True,
    )


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("mylm: error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize("command", [
    "config", "tools", "sessions list", "models --known", "prompts list", "--help", "ask --help", "--version",
    "prompts path", "prompts show system", "models list --local", "completion bash", "tools --json",
    "config --json",
])
def test_full_disk_is_one_line_and_exit_74(command: str, subprocess_env: dict[str, str], tmp_path: Path) -> None:
    # A saved session first, so that `sessions list` has something to write to stdout.
    env = dict(subprocess_env, MYLM_SCRIPTED_LLM=str(write_script(tmp_path / "s.json", ["hello"])))
    assert _shell("mylm ask hi", env).returncode == 0
    done = _shell(f"mylm {command} > /dev/full", env)
    line = _one_error_line(done.stderr)
    assert done.returncode == EXIT_OUTPUT, done.stderr
    assert line == "mylm: error: cannot write the output: No space left on device"


@pytest.fixture
def tool_then_answer(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A model that lists the workspace (the tool's output goes to stderr), then answers on stdout."""
    script = write_script(tmp_path / "s.json", [call("list_dir", path="."), "The workspace is empty."])
    return dict(subprocess_env, MYLM_SCRIPTED_LLM=str(script))


def _ask_into(stdout: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`mylm ask hi` with stdout closed, on a full disk, or into a pipe whose reader has already gone."""
    if stdout == "closed":
        return _shell("exec mylm ask hi >&-", env)
    if stdout == "full":
        return _shell("exec mylm ask hi > /dev/full", env)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "mylm", "ask", "hi"], env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, timeout=60)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("stdout, code, reason", [
    ("closed", EXIT_OUTPUT, "stdout is closed"),
    ("full", EXIT_OUTPUT, "cannot write the output: No space left on device"),
    ("broken pipe", EXIT_BROKEN_PIPE, "stdout was closed by the program reading it (broken pipe)"),
])
def test_ask_whose_answer_cannot_be_written_says_so_and_saves_the_session(
    stdout: str, code: int, reason: str, tool_then_answer: dict[str, str]
) -> None:
    done = _ask_into(stdout, tool_then_answer)
    assert "→ list_dir" in done.stderr  # the tool ran before the output failed
    error = _one_error_line(done.stderr)
    assert done.returncode == code, done.stderr
    assert error == f"mylm: error: {reason}; the conversation is saved: `mylm ask --continue` resumes it"
    [path] = transcripts()
    session = load(path)
    assert session.history[0].content == "hi"
    assert session.history[-1].content == "The workspace is empty."


def test_full_stderr_too_exits_74_in_silence(tool_then_answer: dict[str, str]) -> None:
    done = _shell("mylm ask hi >/dev/full 2>/dev/full; echo $?", tool_then_answer)
    assert done.stdout.strip() == str(EXIT_OUTPUT) and done.stderr == ""


def test_chat_whose_output_cannot_be_written_says_so(tool_then_answer: dict[str, str]) -> None:
    done = _shell("echo hi | exec mylm chat > /dev/full", tool_then_answer)
    assert _one_error_line(done.stderr) == "mylm: error: cannot write the output: No space left on device"
    assert done.returncode == EXIT_OUTPUT


@pytest.mark.parametrize("args, expected", [
    (["ask", "--frobnicate"], "mylm: error: no such option '--frobnicate' (see `mylm ask --help`)"),
    (["sessions", "show"], "mylm: error: missing argument 'ID' (see `mylm sessions show --help`)"),
    (["nosuch"], "mylm: error: no such command 'nosuch' (see `mylm --help`)"),
    (["ask", "--max-iterations", "many", "x"],
     "mylm: error: invalid value for '--max-iterations': 'many' is not a valid integer "
     "(see `mylm ask --help`)"),
])
def test_click_usage_errors_read_like_mylm_errors(
    args: list[str], expected: str, subprocess_env: dict[str, str]
) -> None:
    done = subprocess.run([sys.executable, "-m", "mylm", *args], env=subprocess_env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2
    assert done.stderr == expected + "\n"
