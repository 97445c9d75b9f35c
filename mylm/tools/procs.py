"""Find and kill every process a command started, including those that left its process group or session."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Iterable

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


def _stat(pid: int) -> tuple[int, int, str, int] | None:
    """(parent pid, process group, state letter, start time) of `pid`, or None if it is gone or unreadable."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; everything after the last ')' is fixed.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return int(fields[1]), int(fields[2]), fields[0].decode("ascii", "replace"), int(fields[19])


def process_table() -> dict[int, tuple[int, int, str, int]]:
    """Every live process: pid → (parent pid, process group, state, start time). Empty without /proc."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return {}
    table: dict[int, tuple[int, int, str, int]] = {}
    for name in names:
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                table[int(name)] = info
    return table


def descendants(root: int, table: dict[int, tuple[int, int, str, int]]) -> set[int]:
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
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return False
    return f"{TAG_VARIABLE}={tag}".encode() in environ.split(b"\0")


def members(
    *, tag: str, group: int | None = None, root: int | None = None, since: int | None = None
) -> set[int]:
    """The live (non-zombie) processes of one command: its group, the tree under `root`, the tagged ones,
    and, when this process is a subreaper, its own descendants started at or after `since`."""
    return _members(process_table(), tag=tag, group=group, root=root, since=since)


def _members(
    table: dict[int, tuple[int, int, str, int]],
    *,
    tag: str,
    group: int | None,
    root: int | None,
    since: int | None,
) -> set[int]:
    me = os.getpid()
    found = descendants(root, table) if root is not None else set()
    if _subreaper and since is not None:
        found |= {pid for pid in descendants(me, table) if table[pid][3] >= since}
    for pid, (_, pgid, _, started) in table.items():
        # Only a process started after the command can carry its tag: reading every other process's
        # environment cost ~10 ms a command on a busy machine.
        recent = since is None or started >= since
        if pid not in found and (pgid == group or (recent and has_tag(pid, tag))):
            found.add(pid)
    found.discard(me)
    return {pid for pid in found if table.get(pid, (0, 0, "Z", 0))[2] not in ("Z", "X")}


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
            with open(f"{_PROC}/self/task/{thread}/children", "rb") as f:
                children = f.read().split()
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


def _reap_adopted(command: Command, table: dict[int, tuple[int, int, str, int]] | None = None) -> None:
    """As a subreaper, reap the zombies of orphans this command left to us (not the shell: Popen owns it)."""
    if not _subreaper or command.since is None:
        return
    me = os.getpid()
    for pid, (ppid, _, state, started) in (table if table is not None else process_table()).items():
        if ppid == me and state == "Z" and started >= command.since and pid != command.root:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
