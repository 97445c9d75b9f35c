"""Running the real `mylm mcp` in a child process and talking to it with the official `mcp` SDK as a client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from mylm.protocol.canonical import format_tool_call
from mylm.core.types import ToolCall
from tests.support import REPO_ROOT

#: How long a test waits for the server to say where it listens (starting Python and the SDK).
START_TIMEOUT = 60.0


def needs_sdk(module: str, extra: str) -> Any:
    """Skip without the SDK of a front end, saying which extra installs it; on CI (which installs the extras and
    sets MYLM_REQUIRE_DELEGATE_SDKS) a missing SDK fails instead."""
    import importlib.util

    import pytest

    missing = importlib.util.find_spec(module) is None and not os.environ.get("MYLM_REQUIRE_DELEGATE_SDKS")
    return pytest.mark.skipif(missing, reason=f"the {module} SDK is not installed: pip install 'mylm[{extra}]'")


class SleepingCommand:
    """A command that says it started (a line into a FIFO in the workspace) and then sleeps, found on the host
    by a sleep argument no other process has: the command runs in the sandbox's own PID namespace, where `$$`
    means nothing to the test."""

    def __init__(self, workspace: Path) -> None:
        self.fifo = workspace / "ready.fifo"
        os.mkfifo(self.fifo)
        self.token = f"300.{os.getpid()}{id(self.fifo) % 1000:03d}"
        self.command = f"echo ready > ready.fifo; sleep {self.token}; echo never"

    def wait_ready(self) -> None:
        """Block until the command has started (it opens the FIFO)."""
        with open(self.fifo, encoding="utf-8") as handle:
            handle.readline()

    def sleepers(self) -> list[int]:
        """The command's sleep processes still alive."""
        from tests.support import running

        return running("sleep", self.token)


def call(name: str, **arguments: Any) -> str:
    """A model turn calling `name`, written as the system prompt teaches."""
    return "I will use a tool.\n" + format_tool_call(ToolCall(name, arguments))


def child_env(script: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for the server: the test's isolation (HOME, XDG dirs), the checkout importable, and a
    scripted model standing in for the endpoint when `script` is given."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    if script is not None:
        env["MYLM_SCRIPTED_LLM"] = str(script)
    env.update(extra)
    return env


def write_script(path: Path, replies: Sequence[Any]) -> Path:
    """A MYLM_SCRIPTED_LLM script file of `replies`."""
    path.write_text(json.dumps(list(replies)), encoding="utf-8")
    return path


def stdio(args: Sequence[str], env: dict[str, str], cwd: Path) -> Any:
    """Parameters launching `mylm mcp ARGS` over stdio."""
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "mylm", "mcp", *args], env=env, cwd=str(cwd))


@contextmanager
def http_server(args: Sequence[str], env: dict[str, str], cwd: Path) -> Iterator[str]:
    """`mylm mcp --port 0 ARGS` in a child process; yields the URL it printed, stops it afterwards."""
    with server_process(["mcp", "--port", "0", *args], env, cwd, "MCP server on ") as url:
        yield url


@contextmanager
def server_process(args: Sequence[str], env: dict[str, str], cwd: Path, marker: str) -> Iterator[str]:
    """`mylm ARGS` in a child process; yields the URL it printed after `marker` on stderr, stops it afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mylm", *args], env=env, cwd=cwd,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:  # ends when the child exits, so a crash cannot hang the test
            lines.append(line)
            if marker in line:
                url = line.split(marker, 1)[1].split()[0].strip()
                break
        else:
            raise AssertionError(f"mylm {' '.join(args)} did not start: {''.join(lines)}")
        # Keep reading, so the server never blocks on a full stderr pipe.
        drain = threading.Thread(target=lambda: [lines.append(x) for x in process.stderr], daemon=True)  # type: ignore[union-attr]
        drain.start()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def saved_sessions(data_home: Path, command: str) -> list[list[dict[str, Any]]]:
    """Every session `mylm COMMAND` saved under the XDG data dir, as its records."""
    directory = data_home / "mylm" / "sessions"
    found = []
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if records and records[0].get("command") == command:
            found.append(records)
    return found


def mcp_sessions(data_home: Path) -> list[list[dict[str, Any]]]:
    """Every session `mylm mcp` saved under the XDG data dir, as its records."""
    return saved_sessions(data_home, "mcp")
