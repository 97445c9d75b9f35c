"""Keeping mylm's own process out of reach of the commands it starts."""

from __future__ import annotations

import ctypes
import sys

_PR_SET_DUMPABLE = 4


def protect_process() -> bool:
    """Make this process non-dumpable (Linux): a process of the same user that is not root can then neither
    read its /proc/PID/environ or memory nor ptrace it. Process-wide, so the CLI calls it once at start; a
    program embedding mylm decides for itself. Returns whether it is in effect.

    Root (CAP_SYS_PTRACE) is not held back by it; the Landlock sandbox is, since a confined process may not
    inspect any process outside its own sandbox.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
