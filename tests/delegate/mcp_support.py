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
    process = subprocess.Popen(
        [sys.executable, "-m", "mylm", "mcp", "--port", "0", *args], env=env, cwd=cwd,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:  # ends when the child exits, so a crash cannot hang the test
            lines.append(line)
            if "MCP server on " in line:
                url = line.split("MCP server on ", 1)[1].strip()
                break
        else:
            raise AssertionError(f"mylm mcp --port 0 did not start: {''.join(lines)}")
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


def mcp_sessions(data_home: Path) -> list[list[dict[str, Any]]]:
    """Every session `mylm mcp` saved under the XDG data dir, as its records."""
    directory = data_home / "mylm" / "sessions"
    found = []
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if records and records[0].get("command") == "mcp":
            found.append(records)
    return found
