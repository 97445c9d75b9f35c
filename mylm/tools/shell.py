"""The builtin `execute_command` tool: a command in its own session, bounded in time, output and lifetime."""

from __future__ import annotations

import math
import os
import secrets
import select
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..core.cancel import CancelToken
from ..core.errors import CancelledError, ToolError
from ..core.redact import redact
from . import procs
from .base import Tool, ToolContext, tool
from .environment import child_environment, neutralised

if TYPE_CHECKING:
    from ..sandbox import Launch, Sandbox
    from ..sandbox.launcher import Child
    from .paths import Workspace

DEFAULT_TIMEOUT = 30.0

_READ_SIZE = 65536


@dataclass(frozen=True)
class ShellLimits:
    """How far one command may go; the defaults follow SECURITY_DEFAULTS.md."""

    #: Bytes kept from the start and from the end of stdout; the middle is elided with a count.
    head_bytes: int = 16 * 1024
    tail_bytes: int = 16 * 1024
    #: The same for stderr, which matters less once the exit code is known.
    stderr_bytes: int = 4 * 1024
    #: Past this many bytes of output (both streams) the command is killed: nothing useful prints that much.
    stream_cap: int = 64 * 1024 * 1024
    #: After the shell exits, how long a background process may keep the output pipe open.
    drain_seconds: float = 2.0
    #: Between SIGTERM and SIGKILL.
    kill_grace: float = 2.0
    max_timeout: float = 120.0


@dataclass(frozen=True)
class CommandResult:
    """What one command did: its exit code (None if mylm stopped it), its output, and why it was stopped."""

    exit_code: int | None
    stdout: str
    stderr: str
    #: Empty when the command ended by itself; otherwise why mylm ended it ("timed out after 5 s", ...).
    stopped: str
    #: Set when a background process still held the output pipe after the command exited.
    lingering: bool
    duration: float
    output_bytes: int
    #: Processes that survived even SIGKILL (0 unless something is stuck in the kernel).
    survivors: int = 0


class _Capture:
    """Keeps the head and tail of a byte stream in bounded memory, counting what it drops."""

    def __init__(self, head: int, tail: int) -> None:
        self._head_room = head
        self._tail_room = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_room - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self._tail_room:
            self.tail += data[-self._tail_room :]
            if len(self.tail) > self._tail_room:
                del self.tail[: len(self.tail) - self._tail_room]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        cut = self.total - len(self.head) - len(self.tail)
        if cut <= 0:
            return head + tail
        note = f"[... {cut:,} bytes cut from the middle; narrow the command (grep, head, tail) ...]"
        return f"{head}\n{note}\n{tail}"


class _Readable:
    """Which of a command's few descriptors can be read: poll(2) where the system has it (the selectors
    module's bookkeeping cost ~10 µs a call, and a command makes a dozen), else the selectors module."""

    def __init__(self, *, use_poll: bool = hasattr(select, "poll")) -> None:
        self._poll = select.poll() if use_poll else None
        self._selector = None if use_poll else selectors.DefaultSelector()

    def add(self, fd: int) -> None:
        if self._poll is not None:
            self._poll.register(fd, select.POLLIN)
        else:
            assert self._selector is not None
            self._selector.register(fd, selectors.EVENT_READ)

    def remove(self, fd: int) -> None:
        if self._poll is not None:
            self._poll.unregister(fd)
        else:
            assert self._selector is not None
            self._selector.unregister(fd)

    def wait(self, timeout: float) -> list[int]:
        """The descriptors readable (or at their end) within `timeout` seconds; none if it passed."""
        if self._poll is not None:
            # Rounded up, as the selectors module does: a wait rounded down would wake early, and again.
            return [fd for fd, _ in self._poll.poll(math.ceil(timeout * 1000))]
        assert self._selector is not None
        return [int(key.fd) for key, _ in self._selector.select(timeout)]

    def close(self) -> None:
        if self._selector is not None:
            self._selector.close()


def _shell() -> list[str]:
    # Models write bash (arrays, [[ ]], brace expansion); fall back to POSIX sh where there is no bash.
    return ["/bin/bash", "-c"] if os.path.exists("/bin/bash") else ["/bin/sh", "-c"]


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the shell has exited, without reaping it: its pid stays reserved until the sweep is done."""
    if not hasattr(os, "waitid"):
        return process.poll() is not None
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def run_command(
    command: str,
    *,
    cwd: str | os.PathLike[str],
    timeout: float,
    limits: ShellLimits = ShellLimits(),
    env: Mapping[str, str] | None = None,
    cancel: CancelToken | None = None,
    launch: Launch | None = None,
) -> CommandResult:
    """Run `command` in a new session with stdin from /dev/null; no process it starts outlives this call.

    `launch` confines it (see `mylm.sandbox`). Raises `CancelledError` (after the cleanup) if `cancel` fires
    while the command runs.
    """
    tag = secrets.token_hex(12)
    child_env = dict(env if env is not None else child_environment())
    if launch is not None:
        child_env.update(launch.env)
    child_env[procs.TAG_VARIABLE] = tag
    started = time.monotonic()
    out = _Capture(limits.head_bytes, limits.tail_bytes)
    err = _Capture(limits.stderr_bytes, limits.stderr_bytes)
    cancelled: list[bool] = []
    pipe: tuple[int, int] | None = None
    readable: _Readable | None = None
    unregister: Callable[[], None] = lambda: None
    stopped, lingering, graceful = "", False, True
    running = _start(command, cwd, child_env, tag, launch)
    streams = {running.stdout: out, running.stderr: err}
    # Everything after the start is inside the try: a Ctrl-C at any point still stops the command.
    try:
        pipe = os.pipe()
        wake_r, wake_w = pipe

        def on_cancel() -> None:  # runs on the canceller's thread: stop the command now, then wake the loop
            cancelled.append(True)
            running.kill()
            try:
                os.write(wake_w, b"x")
            except OSError:
                pass

        unregister = cancel.on_cancel(on_cancel) if cancel is not None else (lambda: None)
        readable = _Readable()
        exit_fd = running.exit_fd
        for fd in streams:
            os.set_blocking(fd, False)
            readable.add(fd)
        readable.add(wake_r)
        if exit_fd is not None:
            readable.add(exit_fd)
        deadline = started + timeout
        exited_at: float | None = None
        while not cancelled:
            now = time.monotonic()
            if exited_at is None and running.exited():
                exited_at = now
                if exit_fd is not None:
                    readable.remove(exit_fd)
            if exited_at is not None and not streams:
                break
            if exited_at is None and now >= deadline:
                stopped = f"timed out after {timeout:.3g} s"
                break
            if exited_at is not None and now >= exited_at + limits.drain_seconds:
                lingering = True  # a background process holds the pipe; do not wait for it
                break
            until = deadline if exited_at is None else exited_at + limits.drain_seconds
            # Without an exit descriptor, poll for the shell's exit a few times a second.
            wait = min(until - now, 0.1 if exit_fd is None else until - now)
            for fd in readable.wait(max(wait, 0.0)):
                if fd not in streams:
                    continue
                try:
                    data = os.read(fd, _READ_SIZE)
                except BlockingIOError:
                    continue
                if not data:
                    readable.remove(fd)
                    del streams[fd]
                    continue
                streams[fd].add(data)
                if out.total + err.total > limits.stream_cap:
                    stopped = f"printed more than {limits.stream_cap / 2**20:g} MiB"
                    break
            if stopped:
                break
    except BaseException:
        graceful = False  # Ctrl-C or a crash in mylm: kill at once, then let the exception go on
        raise
    finally:
        try:
            unregister()
            survivors = running.stop(grace=limits.kill_grace if graceful else 0)
        finally:
            running.close()
        if readable is not None:
            readable.close()
        for fd in pipe or ():
            os.close(fd)
    if cancelled:
        raise CancelledError("cancelled while the command was running; it was stopped")
    return CommandResult(
        exit_code=None if stopped else running.returncode,
        stdout=out.text(),
        stderr=err.text(),
        stopped=stopped,
        lingering=lingering,
        duration=time.monotonic() - started,
        output_bytes=out.total + err.total,
        survivors=survivors,
    )


def _start(command: str, cwd: str | os.PathLike[str], env: dict[str, str], tag: str,
           launch: Launch | None) -> _Running:
    """Start the shell: through the sandbox's launcher when it has one, else with Popen in a new session."""
    if launch is not None and launch.start is not None:
        return _Launched.start(launch, [*_shell(), command], env, cwd)
    target = procs.Command(tag)
    try:
        with procs.starting() as register:
            process = subprocess.Popen(
                [*(launch.prefix if launch is not None else ()), *_shell(), command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own group and session: no controlling terminal, no Ctrl-C from ours
                cwd=cwd,
                env=env,
                pass_fds=launch.pass_fds if launch is not None else (),
            )
            since = procs.start_time(process.pid)
            target = procs.Command(tag, group=process.pid, root=process.pid, since=since)
            register(target)
    except BaseException:
        # Ctrl-C inside Popen, after the fork: the child may exist with no handle to it; its tag finds it.
        try:
            procs.stop_all(target, grace=0)
        finally:
            procs.finished(tag)
        raise
    return _Popened(process, target)


class _Running(Protocol):
    """A started command as the read loop sees it."""

    stdout: int
    stderr: int
    #: Readable when the shell may have exited (None: poll `exited`).
    exit_fd: int | None

    def exited(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    def kill(self) -> None: ...

    def stop(self, grace: float) -> int: ...

    def close(self) -> None: ...


class _Popened:
    """A command started with Popen (unconfined or under bubblewrap): found and killed by `procs`' sweep."""

    def __init__(self, process: subprocess.Popen[bytes], target: procs.Command) -> None:
        assert process.stdout is not None and process.stderr is not None
        self.process, self.target = process, target
        self.stdout, self.stderr = process.stdout.fileno(), process.stderr.fileno()
        self.exit_fd = _open_pidfd(process.pid)

    def exited(self) -> bool:
        return _exited(self.process)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def kill(self) -> None:
        procs.stop_all(self.target, grace=0)

    def stop(self, grace: float) -> int:
        survivors = procs.stop_all(self.target, grace=grace)
        self.process.wait()
        return survivors

    def close(self) -> None:
        # Even when the clean-up itself was interrupted (a second Ctrl-C): registered, this command's
        # processes would be spared by every other command's clean-up for good.
        procs.finished(self.target.tag)
        if self.exit_fd is not None:
            os.close(self.exit_fd)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        self.process.stderr.close()


class _Launched:
    """A command started by the sandbox's launcher: its init reports its exit and empties its namespace."""

    def __init__(self, child: Child, stdout: int, stderr: int) -> None:
        self.child, self.stdout, self.stderr = child, stdout, stderr
        self.exit_fd: int | None = child.fileno()

    @classmethod
    def start(cls, launch: Launch, argv: list[str], env: Mapping[str, str], cwd: str | os.PathLike[str]
              ) -> _Launched:
        assert launch.start is not None
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            child = launch.start(argv, env, cwd, (null, out_w, err_w))
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        return cls(child, out_r, err_r)

    def exited(self) -> bool:
        self.child.read_reports()
        return self.child.exited

    @property
    def returncode(self) -> int | None:
        # An init that ended without a word was killed from outside, and its namespace with it.
        return self.child.returncode if self.child.returncode is not None else -9

    def kill(self) -> None:
        self.child.kill()

    def stop(self, grace: float) -> int:
        return self.child.stop(grace)

    def close(self) -> None:
        self.child.close()
        os.close(self.stdout)
        os.close(self.stderr)


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux 5.3+): exit is seen without polling."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def format_result(result: CommandResult, note: str = "") -> str:
    """The observation text for a command: its status line (and `note`, the sandbox's line when it stopped
    something), then stdout and stderr when they are not empty."""
    if result.stopped:
        status = f"[stopped: {result.stopped}; the command and its children were killed]"
    elif result.exit_code is not None and result.exit_code < 0:
        status = f"[killed by signal {-result.exit_code}]"
    else:
        status = f"[exit code {result.exit_code}]"
    parts = [status, *([note] if note else [])]
    if result.lingering:
        parts.append("[a background process kept the output open after the command exited; it was stopped]")
    if result.survivors:
        parts.append(f"[warning: {result.survivors} process(es) could not be killed]")
    if result.stdout:
        parts.append(result.stdout if not result.stderr else f"--- stdout ---\n{result.stdout}")
    if result.stderr:
        parts.append(f"--- stderr ---\n{result.stderr}")
    if not result.stdout and not result.stderr:
        parts.append("(no output)")
    return redact("\n".join(parts))


def shell_tool(
    workspace: Path,
    *,
    default_timeout: float = DEFAULT_TIMEOUT,
    limits: ShellLimits = ShellLimits(),
    env_passthrough: Sequence[str] = (),
    sandbox: Sandbox | None = None,
    held: Workspace | None = None,
) -> Tool:
    """Return the `execute_command` tool, running commands in `workspace`, confined by `sandbox` to what the
    call's grant allows (None: the best sandbox this system has; `mylm.sandbox.detect("off")` for none).
    With `held` (the workspace held open), every command is confined to that directory object: refused when
    the path no longer leads to it, started in it and granted it, not what its path leads to later."""
    from ..sandbox import detect

    confinement = sandbox if sandbox is not None else detect()
    default = min(default_timeout, limits.max_timeout)

    def execute_command(command: str, timeout: float = default, context: ToolContext | None = None) -> str:
        """Run a bash command in the workspace; returns its exit code, stdout and stderr. Stdin is empty;
        background processes stop when it returns.

        Args:
            command: The bash command line to run.
            timeout: Seconds before it is killed (max 120).
        """
        ctx = context or ToolContext(workspace=workspace)
        limit = ctx.time_left(min(max(float(timeout), 0.1), limits.max_timeout))
        if limit <= 0:
            raise ToolError("no time is left in this run to execute a command")
        env = child_environment(env_passthrough)
        if ctx.grant == "read-only":
            env = neutralised(env)  # read as a read: git's program-running settings are off for it
        if held is not None:
            held.check_same()
        anchor = held.fd if held is not None else None
        with confinement.launch(ctx.grant, workspace, env, anchor=anchor) as launch:
            result = run_command(
                command, cwd=workspace, timeout=limit, limits=limits, env=env, cancel=ctx.cancel,
                launch=launch,
            )
        if result.stopped.startswith("timed out") and limit < min(float(timeout), limits.max_timeout):
            result = replace(result, stopped=f"the run's time budget ran out after {limit:.3g} s")
        note = confinement.explain(ctx.grant, workspace, env, f"{result.stderr}\n{result.stdout}")
        text = format_result(result, note)
        if result.stopped:
            raise ToolError(text)
        return text

    # No "maximum": a longer timeout is clamped rather than rejected, which would cost the model a turn.
    built = tool(risk="execute")(execute_command)
    return built.refine(command={"minLength": 1}, timeout={"exclusiveMinimum": 0})
