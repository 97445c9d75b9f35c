"""A seccomp filter for what Landlock does not cover: socket families, io_uring, set-id modes, SysV IPC."""

from __future__ import annotations

import errno
import platform
import socket
import struct
from dataclasses import dataclass

_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _JA, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x05, 0x06
_NR, _ARCH = 0, 4
_X32_BIT = 0x40000000
#: The set-user-ID and set-group-ID mode bits; O_CREAT and O_TMPFILE's own bit (the same on both machines).
_SET_ID, _CREATING = 0o6000, 0o100 | 0o20000000


def _arg(index: int) -> int:
    """Where the low 32 bits of a system call's argument are in `struct seccomp_data` (little-endian)."""
    return 16 + 8 * index


@dataclass(frozen=True)
class _Numbers:
    """One machine's audit architecture and the system call numbers the filter checks."""

    arch: int
    socket: int
    #: io_uring_setup (it can open sockets and files without the calls checked here), openat2 (its mode is
    #: behind a pointer the filter cannot read; libc falls back to openat on ENOSYS).
    unavailable: tuple[int, ...]
    pidfd_send_signal: int
    #: Calls whose first argument names a process or thread: kill, tkill, tgkill, rt_sigqueueinfo,
    #: rt_tgsigqueueinfo, pidfd_open, process_vm_readv, process_vm_writev, prlimit64.
    targeting_arg0: tuple[int, ...]
    #: ptrace, whose second argument is the pid.
    targeting_arg1: tuple[int, ...]
    #: (call, argument holding a mode): chmod, fchmod, fchmodat, fchmodat2, mknod, mknodat, creat.
    mode_args: tuple[tuple[int, int], ...]
    #: (call, argument holding the flags): open, openat (the mode is the next argument).
    open_args: tuple[tuple[int, int], ...]
    #: SysV shared memory, semaphores and message queues (refused when commands share an IPC namespace).
    sysv: tuple[int, ...]
    #: Always refused: the kernel keyring (add_key, request_key, keyctl: the user's keyring is shared by every
    #: process of the user, namespaces or not) and opening files by handle (name_to_handle_at,
    #: open_by_handle_at: with CAP_DAC_READ_SEARCH, root's commands could open a masked file by its inode).
    refused: tuple[int, ...]


#: Per machine; elsewhere there is no filter and the README says so.
_ARCHES = {
    "x86_64": _Numbers(
        0xC000003E, 41, (425, 437), 424, (62, 200, 234, 129, 297, 434, 310, 311, 302), (101,),
        ((90, 1), (91, 1), (268, 2), (452, 2), (133, 1), (259, 2), (85, 1)), ((2, 1), (257, 2)),
        (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220), (248, 249, 250, 303, 304),
    ),
    "aarch64": _Numbers(
        0xC00000B7, 198, (425, 437), 424, (129, 130, 131, 138, 240, 434, 270, 271, 261), (117,),
        ((52, 1), (53, 2), (452, 2), (33, 2)), ((56, 2),), tuple(range(186, 198)), (217, 218, 219, 264, 265),
    ),
}


def supported() -> bool:
    """Whether mylm knows this machine's system call numbers (x86-64 and arm64)."""
    return platform.machine() in _ARCHES


#: An instruction with symbolic jump targets: (code, k, label if true, label if false); None is the next one.
_Step = tuple[int, int, "str | None", "str | None"]


def command_program(
    allowed_families: tuple[int, ...], protected: tuple[int, ...] = (), *, sysv: bool = True
) -> bytes:
    """The filter for confined commands, as the bytes of a `struct sock_filter` array (empty on machines
    mylm has no numbers for), installed by the launcher (or bubblewrap) and inherited by every command:

    - socket() fails with EACCES unless its family is allowed (socketpair() is another call);
    - io_uring and openat2 are unavailable, and so is every system call of another ABI (x32, 32-bit) whose
      numbers the filter does not check;
    - the kernel keyring (add_key, request_key, keyctl) and opening files by handle fail with EPERM;
    - a set-user-ID or set-group-ID mode fails with EPERM (chmod and its kin, mknod, creat, and open with
      O_CREAT or O_TMPFILE): Landlock does not look at modes, and an approved command run as root could
      otherwise leave a set-uid root shell in the workspace;
    - without `sysv`, SysV shared memory, semaphores and message queues fail with EPERM (used when the
      command has no IPC namespace of its own, where it would reach other processes' segments);
    - signals, pidfds, ptrace, process memory and resource limits aimed at a `protected` pid or thread id
      fail with EPERM, and pidfd_send_signal altogether. Commands run in a Landlock domain nested below their
      launcher's (scoped signals, ABI 6+) and, where the system allows, in a PID namespace of their own, where
      no pid outside has a number: this list is the last guard, for kernels without either. Only the low 32
      bits of a pid argument are compared, as the kernel reads only those.
    """
    numbers = _ARCHES.get(platform.machine())
    if numbers is None:
        return b""
    targets = sorted({pid & 0xFFFFFFFF for pid in protected})
    steps: list[_Step | str] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, numbers.arch, None, "enosys"),
        (_LD_W_ABS, _NR, None, None),
        (_JGE_K, _X32_BIT, "enosys", None),
        *((_JEQ_K, nr, "enosys", None) for nr in numbers.unavailable),
        (_JEQ_K, numbers.pidfd_send_signal, "eperm", None),
        *((_JEQ_K, nr, "eperm", None) for nr in numbers.refused),
        *((_JEQ_K, nr, "eperm", None) for nr in (() if sysv else numbers.sysv)),
        *((_JEQ_K, nr, f"mode{arg}", None) for nr, arg in numbers.mode_args),
        *((_JEQ_K, nr, f"open{arg}", None) for nr, arg in numbers.open_args),
        *((_JEQ_K, nr, "arg0", None) for nr in numbers.targeting_arg0),
        *((_JEQ_K, nr, "arg1", None) for nr in numbers.targeting_arg1),
        (_JEQ_K, numbers.socket, "socket", None),
        (_RET_K, _RET_ALLOW, None, None),
    ]
    for arg in sorted({arg for _, arg in numbers.open_args}):
        steps += [f"open{arg}", (_LD_W_ABS, _arg(arg), None, None),
                  (_JSET_K, _CREATING, f"mode{arg + 1}", "allow")]
    for arg in sorted({arg for _, arg in numbers.mode_args} | {arg + 1 for _, arg in numbers.open_args}):
        steps += [f"mode{arg}", (_LD_W_ABS, _arg(arg), None, None), (_JSET_K, _SET_ID, "eperm", "allow")]
    steps += [
        "arg0",
        (_LD_W_ABS, _arg(0), None, None),
        (_JA, 0, "target", None),
        "arg1",
        (_LD_W_ABS, _arg(1), None, None),
        "target",
        *((_JEQ_K, target, "eperm", None) for target in targets),
        (_RET_K, _RET_ALLOW, None, None),
        "socket",
        (_LD_W_ABS, _arg(0), None, None),
        *((_JEQ_K, family, "allow", None) for family in sorted(set(allowed_families))),
        (_RET_K, _RET_ERRNO | errno.EACCES, None, None),
        "allow",
        (_RET_K, _RET_ALLOW, None, None),
        "enosys",
        (_RET_K, _RET_ERRNO | errno.ENOSYS, None, None),
        "eperm",
        (_RET_K, _RET_ERRNO | errno.EPERM, None, None),
    ]
    return b"".join(struct.pack("=HBBI", *step) for step in _assemble(steps))


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


#: Families an approved command with the network on may open: IP, and netlink (glibc's getaddrinfo asks the
#: kernel for the machine's addresses through it). Not UNIX sockets unless the user allows them (see
#: `mylm.sandbox.Sandbox.unix_sockets`), nor packet, vsock, Bluetooth or any other family.
INTERNET = (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)
#: The UNIX socket family: socket(AF_UNIX) connects to local daemons (socketpair() is another call, and stays).
UNIX = (socket.AF_UNIX,)
