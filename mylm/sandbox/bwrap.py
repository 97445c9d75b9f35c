"""The bubblewrap fallback: the same profile as a mount namespace holding only what the command may see."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache

from .profile import SYSTEM_READ, Profile


@lru_cache(maxsize=1)
def find() -> str | None:
    """The `bwrap` program if it is installed and can make a namespace here (user namespaces may be off)."""
    program = shutil.which("bwrap")
    if program is None:
        return None
    try:
        probe = subprocess.run([program, "--ro-bind", "/", "/", "--unshare-net", "true"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return program if probe.returncode == 0 else None


#: The capabilities a command run as root keeps (see `mylm.sandbox.caps`), by bubblewrap's names.
_KEPT_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_NET_BIND_SERVICE")


def argv(program: str, profile: Profile, drop: tuple[int, ...] = ()) -> list[str]:
    """The `bwrap ...` words that run a command under `profile` (the shell and the command follow them).

    Only the granted trees are mounted (read-only unless writable); hidden paths inside them are covered by an
    empty tmpfs or /dev/null; the command gets its own PID namespace (mylm's /proc entries do not exist
    for it) and, when the profile has no network, its own empty network namespace.
    """
    words = [program, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
    if drop:
        words += ["--cap-drop", "ALL", *(w for cap in _KEPT_CAPS for w in ("--cap-add", cap))]
    words += ["--proc", "/proc", "--dev", "/dev"]
    if not profile.network:
        words.append("--unshare-net")
    # /proc is the namespace's own (--proc): mylm's entries are not in it.
    mounts = {root: "--ro-bind" for root in profile.read if root != "/proc" and not root.startswith("/proc/")}
    mounts.update({root: "--bind" for root in profile.write})
    # Parents before children, so a writable workspace inside a read-only tree is mounted over it.
    for path in sorted(mounts, key=lambda p: (p.count(os.sep), p)):
        if not any(path == h or path.startswith(h + os.sep) for h in profile.hidden):
            words += [f"{mounts[path]}-try", path, path]
    # The system's own links (/bin -> usr/bin on merged-/usr systems): the profile holds their targets.
    for link in SYSTEM_READ:
        if os.path.islink(link):
            words += ["--symlink", os.readlink(link), link]
    for hidden in sorted(profile.hidden):
        inside = any(hidden.startswith(p.rstrip(os.sep) + os.sep) for p in mounts)
        if inside and os.path.lexists(hidden):
            words += ["--tmpfs", hidden] if os.path.isdir(hidden) else ["--ro-bind", "/dev/null", hidden]
    words += ["--chdir", profile.workspace]
    if profile.tmpdir:
        words += ["--setenv", "TMPDIR", profile.tmpdir]
    return [*words, "--"]
