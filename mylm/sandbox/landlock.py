"""Landlock (Linux 5.13+) through its three system calls: build a ruleset in mylm, apply it in the child."""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from ..core.errors import SandboxError

# The Landlock system calls have the same numbers on every architecture.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights, by the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
#: Network rights (ABI 4): TCP only; UDP and other families are left to the seccomp filter.
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
#: Scopes (ABI 6): abstract UNIX sockets and signals may not reach a process outside the sandbox.
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
#: The rights that apply to a file (not a directory); the kernel refuses others on a file rule.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc: ctypes.CDLL | None = None


def _syscall() -> Callable[..., int]:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    function: Callable[..., int] = _libc.syscall
    return function


def abi_version() -> int:
    """The Landlock ABI the kernel offers (0: none, not Linux, or disabled at boot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _syscall()(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                             ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def fs_rights(abi: int) -> int:
    """Every filesystem right the kernel at `abi` knows: all are handled, so all are denied by default."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


@dataclass(frozen=True)
class Rule:
    """`rights` under `path` (a directory's tree, or a file); `follow` False opens a link, not its target."""

    path: str
    rights: int
    follow: bool = True


class OpenedRules:
    """Rules with their paths already opened (O_PATH), to add to many rulesets without opening them again.

    A rule holds the inode it was opened on: whoever keeps one must re-open it when the path may have been
    replaced (`mylm.sandbox.confine` checks the directories' modification times)."""

    def __init__(self, abi: int, rules: Iterable[Rule]) -> None:
        handled = fs_rights(abi)
        self._attrs: list[_PathBeneath] = []
        self._paths: list[str] = []
        for rule in rules:
            flags = os.O_PATH | os.O_CLOEXEC | (0 if rule.follow else os.O_NOFOLLOW)
            try:
                fd = os.open(rule.path, flags)
            except OSError:
                continue  # a path that is not there grants nothing
            rights = rule.rights & handled
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= FILE_RIGHTS
            if not rights:
                os.close(fd)
                continue
            self._attrs.append(_PathBeneath(allowed_access=rights, parent_fd=fd))
            self._paths.append(rule.path)

    def add_to(self, ruleset: int) -> None:
        """Add every rule to `ruleset`."""
        syscall = _syscall()
        number, kind, flags = ctypes.c_long(_ADD_RULE), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.c_uint32(0)
        target = ctypes.c_int(ruleset)
        for index, attr in enumerate(self._attrs):
            if syscall(number, target, kind, ctypes.byref(attr), flags) != 0:
                error = os.strerror(ctypes.get_errno())
                raise SandboxError(f"landlock_add_rule for {self._paths[index]} failed: {error}")

    def close(self) -> None:
        """Close the paths' descriptors."""
        for attr in self._attrs:
            os.close(attr.parent_fd)
        self._attrs.clear()
        self._paths.clear()


def build_ruleset(
    abi: int, rules: Iterable[Rule], *, network: bool, scoped: bool = True, opened: Iterable[OpenedRules] = ()
) -> int:
    """A ruleset descriptor (close-on-exec) allowing only `rules` and `opened`; every other access the ABI
    knows is denied. `network` False also denies every TCP bind and connect (ABI 4+). Paths that do not exist
    are skipped."""
    attr = _RulesetAttr(handled_access_fs=fs_rights(abi))
    size = 8
    if abi >= 4:
        attr.handled_access_net = 0 if network else NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6 and scoped:
        attr.scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL
        size = 24
    syscall = _syscall()
    number, flags = ctypes.c_long(_CREATE_RULESET), ctypes.c_uint32(0)
    fd = int(syscall(number, ctypes.byref(attr), ctypes.c_size_t(size), flags))
    if fd < 0:
        raise SandboxError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    fresh = OpenedRules(abi, rules)
    try:
        for group in (*opened, fresh):
            group.add_to(fd)
    except BaseException:
        os.close(fd)
        raise
    finally:
        fresh.close()
    return fd


@lru_cache(maxsize=1)
def _calls() -> tuple[Callable[..., int], Callable[..., int]]:
    """prctl (with its argument types) and syscall, from a libc handle of their own."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl, libc.syscall


def restrictor(
    ruleset: int, *, drop_caps: Callable[[], None] | None = None, seccomp: Callable[[], None] | None = None
) -> Callable[[], None]:
    """A function confining the calling thread for good: drop capabilities, no new privileges, the seccomp
    filter (which needs no_new_privs first), then the ruleset. Each of these applies to one thread (Linux
    keeps them per task) and is inherited by the processes it starts.

    Why a thread and not preexec_fn or a re-exec helper (measured, see scripts/bench_tools.py): preexec_fn
    makes Popen fork instead of vfork, and the copy-on-write that follows in a Python process cost 4-8 ms per
    command; a helper costs a Python start-up (about 30 ms). A fresh thread that confines itself and then
    starts the command with vfork costs about 2 ms, and runs no Python code in a forked child at all.
    """
    prctl, syscall = _calls()
    number, fd, zero = ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)

    def restrict() -> None:
        if drop_caps is not None:
            drop_caps()
        if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if seccomp is not None:
            seccomp()
        if syscall(number, fd, zero) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")

    return restrict
