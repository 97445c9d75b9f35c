"""`mylm` in a real pseudo-terminal: spinner, approvals with piped stdin, Ctrl-C, chat line editing, secrets.

The model is a `MYLM_SCRIPTED_LLM` script; a reply can wait on a FIFO gate (the test decides when it answers) or
hold its stream open until cancelled (a slow model). Nothing here sleeps: every wait is on output or a FIFO.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import Gate, call, finish, read_fifo_line, spawn, spawn_shell, transcripts, write_script

from mylm.core.paths import data_dir
from mylm.sessions import INTERRUPTED, load
from tests.support import running

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")


@pytest.fixture
def env(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The child's environment; `script(replies)` points MYLM_SCRIPTED_LLM at a new script."""
    return subprocess_env


def scripted(env: dict[str, str], tmp_path: Path, replies: list[object], name: str = "script.json") -> dict[str, str]:
    return dict(env, MYLM_SCRIPTED_LLM=str(write_script(tmp_path / name, replies)))


def test_pty_spinner_shows_while_waiting_and_is_erased(env: dict[str, str], tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    child = spawn(["ask", "q"], scripted(env, tmp_path, [{"text": "The answer.", "gate": str(gate.path)}]))
    child.logfile_read = seen = io.StringIO()
    child.expect("waiting for the model…")
    gate.open()
    _, code = finish(child)
    gate.close()
    output = seen.getvalue()
    assert code == 0
    # The last frame is erased (carriage return, erase line) before the answer is written over it.
    assert output.rindex("waiting for the model") < output.rindex("\r\x1b[K") < output.index("The answer.")


def test_pty_approval_comes_from_the_terminal_while_stdin_is_piped(env: dict[str, str], tmp_path: Path) -> None:
    workspace = Path.cwd()
    replies = [call("execute_command", command="touch approved.txt"), call("execute_command", command="touch refused.txt"),
               "Made one file."]
    command = f"printf 'some context' | {sys.executable} -m mylm ask 'make the files'"
    child = spawn_shell(command, scripted(env, tmp_path, replies), cwd=workspace)
    child.expect(r"run `touch approved.txt`")
    child.expect(r"Allow\? \[y\]es / \[n\]o / \[a\]lways execute_command this run: ")
    child.sendline("y")
    child.expect(r"Allow\? ")
    child.sendline("n")
    child.expect("Reason to give the model")
    child.sendline("only one file")
    child.expect("Made one file.")
    _, code = finish(child)
    assert code == 0
    assert (workspace / "approved.txt").exists() and not (workspace / "refused.txt").exists()
    history = load(transcripts()[0]).history
    assert history[0].content == "some context\n\nmake the files"
    assert "only one file" in history[4].content


def test_pty_ctrl_c_during_a_reply_exits_130_and_keeps_it(env: dict[str, str], tmp_path: Path) -> None:
    child = spawn(["ask", "q"], scripted(env, tmp_path, [{"text": "Working on it slowly", "hold": True}]))
    child.expect("Working on it slowly")
    child.sendintr()
    output, code = finish(child)
    assert code == 130 and "mylm: interrupted" in output and "Traceback" not in output
    assert load(transcripts()[0]).history[-1].content == f"Working on it slowly\n{INTERRUPTED}"


def test_pty_chat_ctrl_c_during_a_tool_kills_it_and_returns_to_the_prompt(env: dict[str, str], tmp_path: Path) -> None:
    fifo = Path.cwd() / "ready"  # in the workspace: a command, even approved, writes nowhere else (the sandbox)
    os.mkfifo(fifo)
    # The command runs in the sandbox's PID namespace, where `$$` is no host pid: it is found by its argument.
    token = f"600.{os.getpid()}"
    # More output than a pipe holds first: once the pid arrives, mylm is reading the output, i.e. inside the
    # tool's run loop, so Ctrl-C lands there (not in the instant between starting the process and reading it).
    command = f"yes | head -c 200000; echo ready > {fifo}; exec sleep {token}"
    replies = [call("execute_command", command=command), "Back at work."]
    child = spawn(["chat", "--yes"], scripted(env, tmp_path, replies))
    child.expect("> ")
    child.sendline("run the slow thing")
    read_fifo_line(fifo)
    deadline = time.monotonic() + 30
    while not running("sleep", token) and time.monotonic() < deadline:
        os.sched_yield()
    assert running("sleep", token), "the command never started its sleep"  # the command is running now
    child.sendintr()
    child.expect(r"  (error|interrupted) (in|after) [0-9.]+s")  # issue 20: Ctrl-C is not an error
    assert child.match.group(1) == "interrupted"
    child.expect("Stopped; what was said so far is kept")
    child.expect("> ")
    assert running("sleep", token) == []  # killed and reaped with its process group, not left behind
    child.sendline("carry on")
    child.expect("Back at work.")
    child.expect("> ")
    child.sendeof()
    _, code = finish(child)
    assert code == 0
    history = load(transcripts()[0]).history
    assert "<tool_code>" in history[1].content
    # The interrupted call gets its observation, so the model's next turn knows what happened to it.
    assert history[2].role == "user" and "interrupted by the user" in history[2].content
    assert history[3].content == INTERRUPTED  # the session marks where the run stopped
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant", "user", "assistant"]


def test_pty_chat_ctrl_c_stops_a_reply_and_twice_leaves(env: dict[str, str], tmp_path: Path) -> None:
    replies = ["Hello.", {"text": "A long story", "hold": True}]
    child = spawn(["chat"], scripted(env, tmp_path, replies))
    child.expect("> ")
    child.sendline("hi")
    child.expect("Hello.")
    child.expect("> ")
    child.sendline("tell me a story")
    child.expect("A long story")
    child.sendintr()
    child.expect(r"\(Ctrl-C again or Ctrl-D to leave\)")
    child.expect("> ")
    child.sendintr()
    output, code = finish(child)
    assert code == 130 and "Traceback" not in output
    history = load(transcripts()[0]).history
    assert [m.content for m in history] == ["hi", "Hello.", "tell me a story", f"A long story\n{INTERRUPTED}"]


def test_pty_chat_line_editing_history_and_ctrl_d(env: dict[str, str], tmp_path: Path) -> None:
    child = spawn(["chat"], scripted(env, tmp_path, ["One.", "Two."]))
    child.expect("> ")
    child.send("helo")
    child.expect("helo")
    child.send("\x1b[D")  # left arrow, then insert the missing letter
    child.send("l\r")
    child.expect("One.")
    child.expect("> ")
    child.send("\x1b[A")  # up arrow recalls the line
    child.expect("hello")
    child.send("\r")
    child.expect("Two.")
    child.expect("> ")
    child.send("typed then abandoned")
    child.expect("abandoned")
    child.sendintr()  # with text typed, Ctrl-C only clears the line
    child.expect("> ")
    child.sendeof()
    _, code = finish(child)
    assert code == 0
    assert [m.content for m in load(transcripts()[0]).history if m.role == "user"] == ["hello", "hello"]
    history_file = data_dir() / "chat_history"
    assert "hello" in history_file.read_text() and oct(history_file.stat().st_mode & 0o777) == "0o600"


def test_pty_thought_is_redrawn_dimmed_and_the_answer_is_not(env: dict[str, str], tmp_path: Path) -> None:
    replies = [call("execute_command", thought="Let me count.", command="echo 3"), "There are 3."]
    child = spawn(["ask", "--yes", "count"], scripted(env, tmp_path, replies), color=True)
    output, code = finish(child)
    assert code == 0
    assert "Let me count.\r\n\r\x1b[1A\x1b[J\x1b[2mLet me count." in output
    assert output.rstrip().endswith("There are 3.") and "\x1b[2mThere are 3." not in output


def test_pty_two_processes_append_to_one_session(env: dict[str, str], tmp_path: Path) -> None:
    first = subprocess.run([sys.executable, "-m", "mylm", "ask", "start"],
                           env=scripted(env, tmp_path, ["started"]), capture_output=True, text=True, check=False)
    assert first.returncode == 0
    (path,) = transcripts()
    gates = [Gate(tmp_path / f"gate{i}") for i in range(2)]
    children = []
    for i, gate in enumerate(gates):
        replies = [{"text": f"answer {i}", "gate": str(gate.path)}]
        child = spawn(["ask", "--session", path.stem, f"question {i}"], scripted(env, tmp_path, replies, f"s{i}.json"))
        child.expect("waiting for the model")  # both are now between writing their prompt and their answer
        children.append(child)
    for gate, child in zip(gates, children):
        gate.open()
        assert finish(child)[1] == 0
        gate.close()
    session = load(path)
    assert session.skipped == 0
    contents = [m.content for m in session.history]
    assert {"question 0", "question 1", "answer 0", "answer 1"} <= set(contents)


def test_pty_secret_canary_reaches_no_output_log_transcript_or_history(env: dict[str, str], tmp_path: Path) -> None:
    key, token = "sk-test-CANARY-0123456789abcdef", "CANARY2-token-value"
    env = dict(env, MYLM_API_KEY=key, FOO_TOKEN=token)
    Path("notes.txt").write_text(f"key={key}\nFOO_TOKEN={token}\n")
    replies = [call("execute_command", thought=f"I see {key}.", command="cat notes.txt; env"),
               f"Your key is {key} and the token is {token}."]
    done = subprocess.run([sys.executable, "-m", "mylm", "ask", "--yes", "-vv", f"is {key} valid?"],
                          env=scripted(env, tmp_path, replies), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "[REDACTED]" in done.stdout and "[INFO] Agentic iteration 1/10" in done.stderr
    child = spawn(["chat"], scripted(env, tmp_path, [f"Noted: {token}."], "chat.json"))
    child.logfile_read = seen = io.StringIO()
    child.expect("> ")
    child.sendline(f"remember {token}")
    child.expect("Noted: ")
    child.expect("> ")
    child.sendeof()
    assert finish(child)[1] == 0
    # What the user typed is echoed by the terminal itself; everything mylm wrote must be clean.
    mylm_output = seen.getvalue().replace(f"remember {token}", "")
    saved = "".join(p.read_text() for p in [*transcripts(), data_dir() / "chat_history"])
    for where in (done.stdout, done.stderr, mylm_output, saved):
        assert "CANARY" not in where
