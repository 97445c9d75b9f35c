"""Finding and signalling a command's processes where it has no PID namespace, and collecting the children
that ended (see `launcher_main`).

Standard library only, imported by the launcher script from beside it (it never imports mylm).
"""

from __future__ import annotations

import os


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def descendants(root: int) -> list[tuple[int, bytes]]:
    """Every process below `root` and its state letter (only used without a PID namespace). Followed through
    /proc's `children` files: reading the subtree only, a sweep outpaces a process that forks and exits in a
    loop, which a scan of all of /proc (milliseconds on a busy machine) does not."""
    found: list[tuple[int, bytes]] = []
    stack = [root]
    while stack:
        parent = stack.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                if parent == root and not os.path.exists(f"/proc/{root}/task/{thread}/children"):
                    return _scan(root)  # a kernel without the children files
                continue
            except OSError:
                continue
            for child in children:
                found.append((child, _state(child)))
                stack.append(child)
    return found


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return b"X"
    return raw[raw.rfind(b")") + 2:].split()[0]


def _scan(root: int) -> list[tuple[int, bytes]]:
    """`descendants` from a scan of every process."""
    children: dict[int, list[tuple[int, bytes]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2:].split()
            children.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    found: list[tuple[int, bytes]] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child[0])
    return found


def drain(fd: int) -> None:
    """Empty a non-blocking wake-up pipe."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def reap_children() -> set[int]:
    """Collect every child that ended (the launcher's inits, and any orphan of its namespace); their pids."""
    ended: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.add(pid)
