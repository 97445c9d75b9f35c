"""Ctrl-C during a command that traps INT and TERM: `mylm ask` ends promptly, nothing of the command survives,
and no `mylm-cmds-*` directory is left behind (interrupted or not)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

from tests.support import default_sigint

#: Only catches a hang: the command loops for 30 s, and mylm must not wait for it.
HANG = 25.0


def script(tmp_path: Path, marker: str) -> Path:
    command = f"trap 'echo got' INT TERM; for i in $(seq 300); do sleep 0.{marker}; done"
    call = json.dumps({"name": "execute_command", "arguments": {"command": command}})
    path = tmp_path / "script.json"
    path.write_text(json.dumps([f"<tool_call>\n{call}\n</tool_call>", "<final_answer>done</final_answer>"]))
    return path


def survivors(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"sleep 0.{marker}"], capture_output=True, text=True, check=False).stdout
    return found.split()


@pytest.mark.parametrize("delay", [0.0, 0.6, 2.0])
def test_ctrl_c_during_a_trapping_command_ends_mylm_and_the_command(
    tmp_path: Path, workspace: Path, subprocess_env: dict[str, str], delay: float
) -> None:
    landlock_sandbox()
    marker = f"{int(delay * 10)}7{time.monotonic_ns() % 1000:03d}"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**subprocess_env, "MYLM_SCRIPTED_LLM": str(script(tmp_path, marker)), "TMPDIR": str(temp)}
    child = subprocess.Popen([sys.executable, "-m", "mylm", "ask", "--yes", "go"], cwd=workspace, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    # Wait until the command runs (its sleeps are there), then Ctrl-C.
    deadline = time.monotonic() + HANG
    while not survivors(marker) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("mylm ask still ran long after Ctrl-C")
    assert child.returncode == 130, err[-1000:]
    assert survivors(marker) == []
    assert [p.name for p in temp.iterdir()] == []  # no mylm-cmds-* (nor mylm-cmd-*) left


def test_a_finished_run_leaves_no_tmpdir_root(tmp_path: Path, workspace: Path, subprocess_env: dict[str, str]
                                              ) -> None:
    """Before: the confined launcher emptied its TMPDIR root but could not remove it (its parent is /tmp)."""
    landlock_sandbox()
    temp = tmp_path / "tmp"
    temp.mkdir()
    call = json.dumps({"name": "execute_command", "arguments": {"command": "echo hi > f.txt"}})
    path = tmp_path / "script.json"
    path.write_text(json.dumps([f"<tool_call>\n{call}\n</tool_call>", "<final_answer>done</final_answer>"]))
    env = {**subprocess_env, "MYLM_SCRIPTED_LLM": str(path), "TMPDIR": str(temp)}
    done = subprocess.run([sys.executable, "-m", "mylm", "ask", "--yes", "go"], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-1000:]
    assert (workspace / "f.txt").read_text() == "hi\n"
    assert [p.name for p in temp.iterdir()] == []
