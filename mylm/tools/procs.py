"""Find and kill every process a command started, including those that left its process group or session."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

#: Every command mylm runs carries `MYLM_TOOL_RUN=<random tag>` in its environment. Children inherit it, so a
#: grandchild that called setsid() (and so left the process group) or was orphaned can still be found.
TAG_VARIABLE = "MYLM_TOOL_RUN"
_PROC = "/proc"
_POLL = 0.02
_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux), so that a command's double-forked daemon
    that also cleared its environment is still found and killed. Process-wide, so the CLI opts in once at
    start; a library embedding mylm may prefer not to. Returns whether it is in effect."""
    global _subreaper
    if sys.platform.startswith("linux") and not _subreaper:
        libc = ctypes.CDLL(None, use_errno=True)
        _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _subreaper


def start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (orders processes; None if it is gone)."""
    info = _stat(pid)
    return info[3] if info else None


#: (parent pid, process group, state letter, start time, session) of one process.
Info = tuple[int, int, str, int, int]


def read_proc(path: str) -> bytes:
    """A /proc file's contents, read with bare system calls (open() and its buffered file cost as much again,
    and a command's clean-up reads several)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = [os.read(fd, 4096)]
        while parts[-1]:
            parts.append(os.read(fd, 65536))
        return b"".join(parts)
    finally:
        os.close(fd)


def _stat(pid: int) -> Info | None:
    """(parent pid, process group, state letter, start time, session) of `pid`, or None if it is gone or
    unreadable."""
    try:
        raw = read_proc(f"{_PROC}/{pid}/stat")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; everything after the last ')' is fixed.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    state = fields[0].decode("ascii", "replace")
    return int(fields[1]), int(fields[2]), state, int(fields[19]), int(fields[3])


def process_table() -> dict[int, Info]:
    """Every live process: pid → (parent pid, process group, state, start time, session). Empty without
    /proc."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return {}
    table: dict[int, Info] = {}
    for name in names:
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                table[int(name)] = info
    return table


def descendants(root: int, table: dict[int, Info]) -> set[int]:
    """The pids below `root` in the parent tree of `table`, whatever their process group or session."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def has_tag(pid: int, tag: str) -> bool:
    """Whether process `pid` was started with `MYLM_TOOL_RUN=tag` in its environment."""
    return tag_of(pid) == tag


def tag_of(pid: int) -> str | None:
    """The `MYLM_TOOL_RUN` tag in process `pid`'s environment, if it has one and it can be read."""
    try:
        environ = read_proc(f"{_PROC}/{pid}/environ")
    except OSError:
        return None
    prefix = f"{TAG_VARIABLE}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("ascii", "replace")
    return None


def members(
    *, tag: str, group: int | None = None, root: int | None = None, since: int | None = None
) -> set[int]:
    """The live (non-zombie) processes of one command: its group, the tree under `root`, the tagged ones,
    and, when this process is a subreaper, its own descendants started at or after `since`."""
    return _members(process_table(), tag=tag, group=group, root=root, since=since)


def _members(
    table: dict[int, Info],
    *,
    tag: str,
    group: int | None,
    root: int | None,
    since: int | None,
) -> set[int]:
    me = os.getpid()
    found = descendants(root, table) if root is not None else set()
    if _subreaper and since is not None:
        with _running_lock:
            found |= _adopted(table, tag=tag, since=since)
    for pid, (_, pgid, _, started, _) in table.items():
        # Only a process started after the command can carry its tag: reading every other process's
        # environment cost ~10 ms a command on a busy machine.
        recent = since is None or started >= since
        if pid not in found and (pgid == group or (recent and has_tag(pid, tag))):
            found.add(pid)
    found.discard(me)
    return {pid for pid in found if table.get(pid, (0, 0, "Z", 0, 0))[2] not in ("Z", "X")}


def _adopted(table: dict[int, Info], *, tag: str, since: int) -> set[int]:
    """This process's descendants started since the command did that may be what it left behind: orphans
    re-parented here (this process is a subreaper) whatever their group, session or environment.

    Never mylm's own other children (a git the policy runs, an MCP server: they are in mylm's session, which
    no command can join), nor what belongs to another command still running: its tree, its group, its tag.
    An orphan that cleared its environment and left its command's session cannot be told apart; it is taken
    for this command's (it would be stopped at its own command's end anyway)."""
    mine = os.getsid(0)
    candidates = {
        pid for pid in descendants(os.getpid(), table) if table[pid][3] >= since and table[pid][4] != mine
    }
    others = running(excluding=tag)
    if not candidates or not others:
        return candidates
    theirs: set[int] = set()
    for other in others:
        if other.root is not None:
            theirs |= {other.root, *descendants(other.root, table)}
        if other.group is not None:
            theirs |= {pid for pid in candidates if table[pid][1] == other.group}
    tags = {other.tag for other in others}
    return {pid for pid in candidates - theirs if tag_of(pid) not in tags}


#: Held while a command starts and registers, and while a clean-up works out what is a command's: until a
#: command is registered, its fresh shell looks like anything else this process started.
_running_lock = threading.RLock()
_running: dict[str, Command] = {}


def running(*, excluding: str = "") -> list[Command]:
    """The commands started and not yet cleaned up, in this process (other than `excluding`)."""
    with _running_lock:
        return [command for tag, command in _running.items() if tag != excluding]


@contextmanager
def starting() -> Iterator[Callable[[Command], None]]:
    """Start a command inside: no other command's clean-up decides what to stop until the function yielded
    has registered it. From then until `finished(tag)` those clean-ups leave its processes alone."""
    with _running_lock:
        yield lambda command: _running.__setitem__(command.tag, command)


def finished(tag: str) -> None:
    """The command tagged `tag` is cleaned up: its processes are nobody's now."""
    with _running_lock:
        _running.pop(tag, None)


@dataclass(frozen=True)
class Command:
    """How to find one command's processes: its tag, its process group, its root pid, when it started."""

    tag: str
    group: int | None = None
    root: int | None = None
    since: int | None = None

    def members(self) -> set[int]:
        """The command's live processes now."""
        return members(tag=self.tag, group=self.group, root=self.root, since=self.since)


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_group(group: int | None, sig: int) -> None:
    if group is None:
        return
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(command: Command, *, grace: float) -> int:
    """SIGTERM the command's processes, SIGKILL what is left after `grace` seconds; return how many remain.

    With `grace` 0 it goes straight to SIGKILL (on cancel or Ctrl-C, when nothing should wait). Returns 0
    unless a process survived even SIGKILL for a second (stuck in the kernel), which the caller reports.
    """
    if grace > 0:
        if _nothing_left(command):
            return 0
        _signal_group(command.group, signal.SIGTERM)
        table = process_table()
        first = _members(table, tag=command.tag, group=command.group, root=command.root, since=command.since)
        if not first:
            # The usual end of a command: nothing is left. Nothing new can appear either (only a live process
            # can start one), so there is nothing to wait for; reap adopted zombies from the same scan.
            _reap_adopted(command, table)
            return 0
        _signal(first, signal.SIGTERM)
        # A stopped process only acts on SIGTERM once continued.
        _signal(first, signal.SIGCONT)
        _signal_group(command.group, signal.SIGCONT)
        if not _wait_gone(command, grace):
            _kill(command)
    else:
        _kill(command)
    gone = _wait_gone(command, 1.0)
    _reap_adopted(command)
    return 0 if gone else len(command.members())


def _nothing_left(command: Command) -> bool:
    """Whether the command has certainly left nothing behind, known without scanning every process.

    As a subreaper, this process inherits every orphan of its descendants, so whatever a command left running
    (whatever its group, session or environment) is below one of this process's own children. When the shell
    has exited and no other child started since the command did, nothing can be left. Only a yes is cheap:
    on any doubt (no subreaper, no `children` files, a recent child) the caller scans as before.
    """
    if not _subreaper or command.root is None or command.since is None:
        return False
    root = _stat(command.root)
    if root is not None and root[2] not in ("Z", "X"):
        return False
    try:
        threads = os.listdir(f"{_PROC}/self/task")
    except OSError:
        return False
    for thread in threads:
        try:
            children = read_proc(f"{_PROC}/self/task/{thread}/children").split()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except OSError:
            return False
        for raw in children:
            pid = int(raw)
            if pid == command.root:
                continue
            started = start_time(pid)
            if started is not None and started >= command.since:
                return False
    return True


def _kill(command: Command) -> None:
    # Two passes: a process may fork between the scan and the signal (its child inherits the tag).
    for _ in range(2):
        _signal_group(command.group, signal.SIGKILL)
        _signal(command.members(), signal.SIGKILL)


def _wait_gone(command: Command, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while command.members():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)
    return True


def _reap_adopted(command: Command, table: dict[int, Info] | None = None) -> None:
    """As a subreaper, reap the zombies of orphans this command left to us: not the shell (Popen owns it),
    not mylm's own children (their Popen would lose their exit status: they are in mylm's session), not
    another running command's shell."""
    if not _subreaper or command.since is None:
        return
    me, mine = os.getpid(), os.getsid(0)
    # Under the lock, with a table scanned after taking it: a command that starts meanwhile is registered
    # before its shell could show up as a zombie here.
    with _running_lock:
        roots = {other.root for other in running()} | {command.root}
        table = process_table() if table is None else table
        for pid, (ppid, _, state, started, session) in table.items():
            if ppid == me and state == "Z" and started >= command.since and session != mine and pid not in roots:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
