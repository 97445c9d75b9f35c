"""The launcher's mount namespace: secrets masked before it confines itself (see `launcher_main`).

Standard library only, imported by the launcher script from beside it (it never imports mylm).
"""

from __future__ import annotations

import ctypes
import os
import stat
from typing import Any

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def map_user(config: dict[str, Any]) -> None:
    """In a fresh user namespace: the same uid and gid inside as outside, no setgroups."""
    uid, gid = config["uid"], config["gid"]
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def own_mount_namespace(config: dict[str, Any]) -> None:
    """Without the namespaces above (turned off, or refused): a mount namespace alone, if the system allows
    one (in a user namespace when not root)."""
    userns = CLONE_NEWUSER if config["userns"] else 0
    if libc.unshare(CLONE_NEWNS | userns) == 0:
        config["mountns"] = True
        if userns:
            map_user(config)


def mask(paths: list[list[Any]]) -> int:
    """Cover every secret in this mount namespace: an empty read-only tmpfs over a directory, /dev/null over a
    file. Each is opened first without following a link (a link is not masked: where it leads is judged
    there) and the mount goes onto that very object through /proc/self/fd, so a path swapped for a link
    meanwhile cannot move a mask. Nothing propagates out (the namespace is made private first). Returns how
    many were masked; raises OSError if one that exists could not be (the command must not run then)."""
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    done = 0
    for path, _ in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone, or not reachable by this user: nothing to read there either
        try:
            mode = os.fstat(fd).st_mode
            target = f"/proc/self/fd/{fd}".encode()
            if stat.S_ISDIR(mode):
                result = libc.mount(b"mylm-masked", target, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                    b"size=4k,nr_inodes=2,mode=0")
            elif stat.S_ISLNK(mode):
                continue
            else:
                result = libc.mount(b"/dev/null", target, None, MS_BIND, None)
            check(result, f"masking {path}")
            done += 1
        finally:
            os.close(fd)
    return done
