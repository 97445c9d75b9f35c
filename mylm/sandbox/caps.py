"""Taking root's extra powers away from a confined command (ptrace, raw devices, modules, mounts, ...)."""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from typing import Callable

_PR_CAPBSET_READ, _PR_CAPBSET_DROP = 23, 24
#: What root keeps: file ownership and permission overrides and identity changes, all still inside what the
#: sandbox's rules allow. Everything else goes, CAP_SYS_PTRACE first: with it, root reads the environment of
#: mylm's process (/proc/PID/environ), which Landlock does not stop for a non-dumpable process.
_KEPT = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 10})  # chown, dac_override, dac_read_search, fowner, fsetid, kill,
#                                                    setgid, setuid, net_bind_service


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


@lru_cache(maxsize=1)
def bounding_drop() -> Callable[[], None] | None:
    """A function dropping every capability but a few file-related ones from the bounding set, so that the
    command execs without them; None when this process is not root (it has none to give a command)."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    held = (c for c in range(_last_cap() + 1) if prctl(_PR_CAPBSET_READ, c, 0, 0, 0) == 1)
    dropped = tuple(c for c in held if c not in _KEPT)

    def drop() -> None:
        for cap in dropped:
            if prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap}) failed")

    return drop
