"""Helpers for the CLI tests: scripted tool calls, an in-process runner, and `mylm` in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import select
import sys
from pathlib import Path
from typing import Any

import pexpect
from click.testing import CliRunner, Result

from mylm.cli import Terminal, cli
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM
from mylm.core.types import ToolCall
from tests.support import default_sigint

#: An upper bound for one expected output in a pseudo-terminal; a failing test ends here instead of hanging.
PTY_TIMEOUT = 30


def call(name: str, thought: str = "Checking.", **arguments: object) -> str:
    """A model reply that calls tool `name` after a one-line thought."""
    return f"{thought}\n" + format_tool_call(ToolCall(name, arguments))


class FakeTerminal(Terminal):
    """Answers approval questions from a script and records what was asked."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def ask(self, question: str) -> str:
        self.asked.append(question)
        return self.answers.pop(0)


def invoke(
    args: list[str], llm: ScriptedLLM | None = None, *, terminal: Terminal | None = None, stdin: str = "",
    env: dict[str, str] | None = None,
) -> Result:
    """Run the CLI in-process with an injected model and terminal."""
    obj: dict[str, Any] = {"terminal": lambda: terminal}
    if llm is not None:
        obj["llm"] = llm
    return CliRunner().invoke(cli, args, obj=obj, input=stdin, env=env, catch_exceptions=False, prog_name="mylm")


def write_script(path: Path, replies: list[Any]) -> Path:
    """Write a `MYLM_SCRIPTED_LLM` file."""
    path.write_text(json.dumps(replies))
    return path


def sessions_dir() -> Path:
    """The isolated test user's session directory."""
    return Path(os.environ["XDG_DATA_HOME"]) / "mylm" / "sessions"


def transcripts() -> list[Path]:
    """Every saved transcript of the isolated test user."""
    directory = sessions_dir()
    return sorted(directory.glob("*.jsonl")) if directory.is_dir() else []


def spawn(args: list[str], env: dict[str, str], *, cwd: Path | None = None, color: bool = False) -> pexpect.spawn:
    """Start `python -m mylm ARGS` in a new pseudo-terminal."""
    env = dict(env, TERM="xterm")
    if color:
        env.pop("NO_COLOR", None)
    return pexpect.spawn(
        sys.executable, ["-m", "mylm", *args], env=env, cwd=str(cwd) if cwd else None, encoding="utf-8",
        timeout=PTY_TIMEOUT, dimensions=(40, 120), preexec_fn=default_sigint,
    )


def spawn_shell(command: str, env: dict[str, str], *, cwd: Path | None = None) -> pexpect.spawn:
    """Run a shell command line (with pipes) in a new pseudo-terminal."""
    return pexpect.spawn(
        "/bin/sh", ["-c", command], env=dict(env, TERM="xterm"), cwd=str(cwd) if cwd else None, encoding="utf-8",
        timeout=PTY_TIMEOUT, dimensions=(40, 120), preexec_fn=default_sigint,
    )


def finish(child: pexpect.spawn) -> tuple[str, int | None]:
    """Wait for the child to end; return the rest of its output and its exit status."""
    child.expect(pexpect.EOF)
    output = child.before
    child.close()
    return output, child.exitstatus


class Gate:
    """A FIFO a scripted reply waits on (`{"gate": path}`): the test decides when the model answers.

    Held open read-write by the test, so neither side ever blocks opening it.
    """

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR)

    def open(self) -> None:
        """Let the waiting reply through."""
        os.write(self._fd, b"go\n")

    def close(self) -> None:
        os.close(self._fd)


def read_fifo_line(path: Path, timeout: float = PTY_TIMEOUT) -> str:
    """Wait (at most `timeout`, as a bound, not a delay) for a child to write a line into FIFO `path`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise TimeoutError(f"nothing was written to {path}")
            chunk = os.read(fd, 100)
            if not chunk:
                break  # the writer closed it
            data += chunk
        return data.decode().strip()
    finally:
        os.close(fd)
