"""A seccomp filter for what Landlock does not cover: UDP, raw and UNIX sockets, and io_uring's sockets."""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
from functools import lru_cache
from typing import Callable

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16
_X32_BIT = 0x40000000

#: (audit arch, socket(), io_uring_setup()) per machine; elsewhere there is no filter and the README says so.
_ARCHES = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def supported() -> bool:
    """Whether mylm knows this machine's system call numbers (x86-64 and arm64)."""
    return platform.machine() in _ARCHES


@lru_cache(maxsize=4)
def socket_filter(allowed_families: tuple[int, ...]) -> Callable[[], None] | None:
    """A function installing a filter where socket() fails with EACCES unless its family is allowed, io_uring
    (which can open sockets without socket()) is unavailable, and so is every system call of another ABI (x32,
    32-bit) whose numbers the filter does not check. None on machines mylm has no numbers for.

    The program is built here, in the parent; the returned function only makes one prctl call.
    """
    numbers = _ARCHES.get(platform.machine())
    if numbers is None:
        return None
    arch, nr_socket, nr_io_uring = numbers
    families = sorted(set(allowed_families))
    deny = _RET_ERRNO | errno.EACCES
    # Jump offsets count instructions after the current one.
    code: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),  # another ABI: nothing runs there
        (_LD_W_ABS, 0, 0, _NR),
        (_JGE_K, 0, 1, _X32_BIT),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
        (_JEQ_K, 0, 1, nr_io_uring),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
        (_JEQ_K, 1, 0, nr_socket),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_LD_W_ABS, 0, 0, _ARG0),
    ]
    for index, family in enumerate(families):
        # Allowed: jump over the remaining checks and the deny to the allow at the end.
        code.append((_JEQ_K, len(families) - index, 0, family))
    code += [(_RET_K, 0, 0, deny), (_RET_K, 0, 0, _RET_ALLOW)]
    filters = (_Filter * len(code))(*(_Filter(c, jt, jf, k) for c, jt, jf, k in code))
    program = _Program(len(code), ctypes.cast(filters, ctypes.POINTER(_Filter)))
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    pointer = ctypes.addressof(program)
    keep = (filters, program)  # alive as long as the closure: the kernel copies them during the call

    def install() -> None:
        if prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, pointer, 0, 0) != 0 or keep is None:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")

    return install


#: Families an approved command with the network on may open: IP, and netlink (glibc's getaddrinfo asks the
#: kernel for the machine's addresses through it). Not UNIX sockets unless the user allows them (see
#: `mylm.sandbox.Sandbox.unix_sockets`), nor packet, vsock, Bluetooth or any other family.
INTERNET = (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)
#: The UNIX socket family: socket(AF_UNIX) connects to local daemons (socketpair() is another call, and stays).
UNIX = (socket.AF_UNIX,)
