"""The builtin `execute_command` tool: a shell command in its own process group, bounded in time and output."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from ..errors import ToolError
from .base import Tool, ToolContext, tool

DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 120.0
#: Bytes kept from the start and from the end of the output; the middle is elided.
HEAD_BYTES = 16 * 1024
TAIL_BYTES = 16 * 1024
#: Past this many bytes of output the command is killed: nothing useful reads that much.
STREAM_CAP = 64 * 1024 * 1024
#: After the shell exits, how long to wait for a background child still holding the output pipe.
DRAIN_SECONDS = 2.0
KILL_GRACE = 2.0

_ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "PWD")


def child_environment() -> dict[str, str]:
    """The environment a command sees: an allowlist, so API keys and tokens never reach it."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_ALLOWLIST or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


class _Capture:
    """Keeps the head and tail of a byte stream in bounded memory, counting what it drops."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > TAIL_BYTES:
                del self.tail[: len(self.tail) - TAIL_BYTES]

    def text(self) -> str:
        kept = len(self.head) + len(self.tail)
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if kept >= self.total:
            return head + tail
        cut = self.total - kept
        return f"{head}\n[... {cut:,} bytes of output cut; narrow the command (grep, head, tail) to see them ...]\n{tail}"


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        process.wait(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_command(command: str, *, timeout: float, cwd: str | None = None) -> tuple[int | None, str, str]:
    """Run `command` with `sh -c`; return (exit code or None if killed, reason it was killed, output)."""
    process = subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=cwd,
        env=child_environment(),
    )
    capture = _Capture()
    killed = ""
    started = time.monotonic()
    assert process.stdout is not None
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if process.poll() is not None and exited_at is None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_SECONDS:
                break  # a background child still holds the pipe; do not wait for it
            if exited_at is None and now - started > timeout:
                killed = f"timed out after {timeout:g} s"
                break
            if not selector.select(timeout=0.05):
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                break
            capture.add(data)
            if capture.total > STREAM_CAP:
                killed = f"produced more than {STREAM_CAP // (1024 * 1024)} MiB of output"
                break
    finally:
        selector.close()
        # Whatever happened, nothing the command started may outlive the call.
        _kill_group(process)
        process.stdout.close()
        process.wait()
    code = None if killed else process.returncode
    return code, killed, capture.text()


@tool(risk="execute")
def execute_command(command: str, timeout: float = DEFAULT_TIMEOUT, context: ToolContext | None = None) -> str:
    """Run a shell command in the workspace and return its exit code and output (stdout and stderr together).

    Args:
        command: The shell command to run, e.g. `ls -la`.
        timeout: Seconds before the command is killed (at most 120).
    """
    ctx = context or ToolContext()
    limit = ctx.time_left(min(max(float(timeout), 0.1), MAX_TIMEOUT))
    if limit <= 0:
        raise ToolError("no time is left in this run to execute a command")
    code, killed, output = run_command(command, timeout=limit, cwd=str(ctx.workspace))
    status = f"killed: {killed}" if killed else f"exit code {code}"
    return f"[{status}]\n{output}" if output else f"[{status}]\n(no output)"


def builtin_shell_tool() -> Tool:
    """Return the `execute_command` tool."""
    return execute_command
