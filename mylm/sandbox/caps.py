"""Taking root's extra powers away from a confined command (ptrace, raw devices, mounts, set-id, ...)."""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache

_PR_CAPBSET_READ = 23
#: What root keeps: file ownership and permission overrides, inside what the sandbox's rules allow. Everything
#: else goes, CAP_SYS_PTRACE first (with it, root reads another process's environment), and also CAP_FSETID
#: (keeping a set-id bit while writing a file), CAP_SETUID/CAP_SETGID (becoming another user) and CAP_KILL
#: (signalling other users' processes). Setting a set-id mode is refused by the seccomp filter, since root
#: owns the files it makes and needs no capability for chmod u+s on them.
_KEPT = frozenset({0, 1, 2, 3, 10})  # chown, dac_override, dac_read_search, fowner, net_bind_service


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


@lru_cache(maxsize=1)
def bounding_drop() -> tuple[int, ...]:
    """The capabilities to drop from the bounding set (by the launcher, before it confines itself), so that
    commands exec without them; none when this process is not root (it has none to give a command)."""
    if os.geteuid() != 0:
        return ()
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    held = (c for c in range(_last_cap() + 1) if prctl(_PR_CAPBSET_READ, c, 0, 0, 0) == 1)
    return tuple(c for c in held if c not in _KEPT)
