"""A seccomp filter for what Landlock does not cover: sockets, io_uring, and signals to mylm's own threads."""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _JA, _RET_K = 0x20, 0x15, 0x35, 0x05, 0x06
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24
_X32_BIT = 0x40000000


@dataclass(frozen=True)
class _Numbers:
    """One machine's audit architecture and the system call numbers the filter checks."""

    arch: int
    socket: int
    io_uring_setup: int
    pidfd_send_signal: int
    #: Calls whose first argument names a process or thread: kill, tkill, tgkill, rt_sigqueueinfo,
    #: rt_tgsigqueueinfo, pidfd_open, process_vm_readv, process_vm_writev, prlimit64.
    targeting_arg0: tuple[int, ...]
    #: ptrace, whose second argument is the pid.
    targeting_arg1: tuple[int, ...]


#: Per machine; elsewhere there is no filter and the README says so.
_ARCHES = {
    "x86_64": _Numbers(0xC000003E, 41, 425, 424, (62, 200, 234, 129, 297, 434, 310, 311, 302), (101,)),
    "aarch64": _Numbers(0xC00000B7, 198, 425, 424, (129, 130, 131, 138, 240, 434, 270, 271, 261), (117,)),
}


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def supported() -> bool:
    """Whether mylm knows this machine's system call numbers (x86-64 and arm64)."""
    return platform.machine() in _ARCHES


#: An instruction with symbolic jump targets: (code, k, label if true, label if false); None is the next one.
_Step = tuple[int, int, "str | None", "str | None"]


def command_filter(
    allowed_families: tuple[int, ...], protected: tuple[int, ...] = ()
) -> Callable[[], None] | None:
    """A function installing a filter on the calling thread, inherited by the commands it starts:

    - socket() fails with EACCES unless its family is allowed (socketpair() is another call);
    - io_uring (which can open sockets without socket()) is unavailable, and so is every system call of
      another ABI (x32, 32-bit) whose numbers the filter does not check;
    - signals, pidfds, ptrace, process memory and resource limits aimed at a `protected` pid or thread id
      (mylm and its threads) fail with EPERM, and pidfd_send_signal altogether: the thread that confined
      itself to start a command is in the command's Landlock domain, so Landlock's own scoping lets the
      command signal that thread, and a signal such as SIGKILL or SIGSTOP sent to one thread acts on all of
      mylm. Only the low 32 bits of a pid argument are compared, as the kernel reads only those.

    None on machines mylm has no numbers for. The returned function only makes one prctl call.
    """
    numbers = _ARCHES.get(platform.machine())
    if numbers is None:
        return None
    targets = sorted({pid & 0xFFFFFFFF for pid in protected})
    steps: list[_Step | str] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, numbers.arch, None, "enosys"),
        (_LD_W_ABS, _NR, None, None),
        (_JGE_K, _X32_BIT, "enosys", None),
        (_JEQ_K, numbers.io_uring_setup, "enosys", None),
        (_JEQ_K, numbers.pidfd_send_signal, "eperm", None),
        *((_JEQ_K, nr, "arg0", None) for nr in numbers.targeting_arg0),
        *((_JEQ_K, nr, "arg1", None) for nr in numbers.targeting_arg1),
        (_JEQ_K, numbers.socket, "socket", None),
        (_RET_K, _RET_ALLOW, None, None),
        "arg0",
        (_LD_W_ABS, _ARG0, None, None),
        (_JA, 0, "target", None),
        "arg1",
        (_LD_W_ABS, _ARG1, None, None),
        "target",
        *((_JEQ_K, target, "eperm", None) for target in targets),
        (_RET_K, _RET_ALLOW, None, None),
        "socket",
        (_LD_W_ABS, _ARG0, None, None),
        *((_JEQ_K, family, "allow", None) for family in sorted(set(allowed_families))),
        (_RET_K, _RET_ERRNO | errno.EACCES, None, None),
        "allow",
        (_RET_K, _RET_ALLOW, None, None),
        "enosys",
        (_RET_K, _RET_ERRNO | errno.ENOSYS, None, None),
        "eperm",
        (_RET_K, _RET_ERRNO | errno.EPERM, None, None),
    ]
    code = _assemble(steps)
    filters = (_Filter * len(code))(*(_Filter(c, jt, jf, k) for c, jt, jf, k in code))
    program = _Program(len(code), ctypes.cast(filters, ctypes.POINTER(_Filter)))
    prctl = _prctl()
    pointer = ctypes.addressof(program)
    keep = (filters, program)  # alive as long as the closure: the kernel copies them during the call

    def install() -> None:
        if prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, pointer, 0, 0) != 0 or keep is None:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")

    return install


def _assemble(steps: list[_Step | str]) -> list[tuple[int, int, int, int]]:
    """Classic BPF from `steps`: labels become jump offsets, counted in instructions after the jump."""
    where: dict[str, int] = {}
    instructions: list[_Step] = []
    for step in steps:
        if isinstance(step, str):
            where[step] = len(instructions)
        else:
            instructions.append(step)

    def offset(label: str | None, at: int) -> int:
        if label is None:
            return 0
        distance = where[label] - at - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"seccomp jump to {label} out of range")
        return distance

    code = []
    for at, (op, k, yes, no) in enumerate(instructions):
        if op == _JA:
            code.append((op, 0, 0, where[str(yes)] - at - 1))
        else:
            code.append((op, offset(yes, at), offset(no, at), k))
    return code


@lru_cache(maxsize=1)
def _prctl() -> Callable[..., int]:
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    function: Callable[..., int] = prctl
    return function


#: Families an approved command with the network on may open: IP, and netlink (glibc's getaddrinfo asks the
#: kernel for the machine's addresses through it). Not UNIX sockets unless the user allows them (see
#: `mylm.sandbox.Sandbox.unix_sockets`), nor packet, vsock, Bluetooth or any other family.
INTERNET = (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)
#: The UNIX socket family: socket(AF_UNIX) connects to local daemons (socketpair() is another call, and stays).
UNIX = (socket.AF_UNIX,)
