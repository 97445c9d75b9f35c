"""Keeping mylm's own process out of reach of the commands it starts."""

from __future__ import annotations

import ctypes
import sys
from functools import lru_cache

_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4


def protect_process() -> bool:
    """Make this process non-dumpable (Linux): a process of the same user that is not root can then neither
    read its /proc/PID/environ or memory nor ptrace it. Process-wide, so the CLI calls it once at start; a
    program embedding mylm decides for itself. Returns whether it is in effect.

    Root (CAP_SYS_PTRACE) is not held back by it; a confined command runs without CAP_SYS_PTRACE (see
    `mylm.sandbox.caps`). Confined commands never share a Landlock domain with mylm (a separate launcher
    process starts them, see `mylm.sandbox.launcher`); this keeps out everything else the user runs.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


def dumpable() -> bool | None:
    """Whether this process is dumpable (None where that cannot be asked: not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return int(_libc().prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)) != 0


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
