"""The one list of what holds secrets, read by the kernel's masks and by the policy's questions alike.

Three parts, each judged on a path's *real* location:

- names: `.env*`, keys, `.netrc`, anything in `.ssh/`, `.aws/`, ... (`is_secret_path`, for paths inside a
  workspace);
- the credential floor: `HOME_SECRETS` in `$HOME` and the account's home, mylm's own config, data and state
  (sessions, memory, an MCP server's token), and, as root, the system's secrets (`floor`);
- with `$HOME` as the workspace, the dot-entries at its top that are not shell or editor settings.

A command's launcher masks every one of them that exists in its mount namespace (see `launcher_main.mask`), so
no spelling, link or `/proc/self/cwd` trick reaches them; `read_file` and `list_dir` check the descriptor they
opened (`Secrets.reason_fd`), and the approval policy resolves a command's paths with `real_path`, which never
follows a link through `/proc` or `/dev/fd` (their targets depend on the process that looks).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

from ..core.environ import environment
from ..core.paths import DIR_VARIABLES, config_dir, data_dir, state_dir

__all__ = [
    "SECRET_DIRS",
    "SECRET_FILE_PATTERNS",
    "Secrets",
    "WorkspaceScan",
    "is_secret_path",
    "mylm_private",
    "real_path",
    "scan_workspace",
]

#: File names (matched case-insensitively against the last component) that hold credentials.
SECRET_FILE_PATTERNS: tuple[str, ...] = (
    ".env", ".env.*", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.keystore", "*.jks",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "id_xmss*",
    ".netrc", "_netrc", ".git-credentials", ".pypirc", ".npmrc", ".pgpass", "credentials", "credentials.json",
    ".vault-token", ".bash_history", ".zsh_history", ".python_history", ".psql_history", ".mysql_history",
)
#: Directories whose every file is treated as a secret.
SECRET_DIRS: tuple[str, ...] = (".ssh", ".aws", ".gnupg", ".azure", ".kube", ".docker", ".password-store")
#: Where a link's target depends on the process that follows it (its cwd, its descriptors): never followed
#: on another process's behalf.
_MAGIC = ("/proc", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr")
_MAX_LINKS = 40
#: How many directory entries one scan of a workspace looks at before it stops (and says it is incomplete).
SCAN_BUDGET = 50000


def is_secret_path(relative: str) -> bool:
    """Whether a workspace-relative POSIX path names a credential file or lies in a credential directory."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if not parts:
        return False
    if any(p.lower() in SECRET_DIRS for p in parts[:-1]) or parts[-1].lower() in SECRET_DIRS:
        return True
    name = parts[-1].lower()
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_FILE_PATTERNS)


def _magic(path: str) -> bool:
    return any(path == m or path.startswith(m + "/") for m in _MAGIC)


def real_path(path: str) -> str | None:
    """`os.path.realpath` of an absolute path, except that a link leading into `/proc` or `/dev/fd` is not
    followed: None then (and for a link loop). realpath would resolve `/proc/self/cwd` in *this* process's
    directory, not in the directory of the command that will follow the link."""
    if not path.startswith("/"):
        raise ValueError(f"real_path needs an absolute path, not {path!r}")
    result = "/"
    pending = [p for p in path.split("/") if p]
    hops = 0
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            result = posixpath.dirname(result)
            continue
        candidate = posixpath.join(result, name)
        if _magic(candidate):
            return None
        try:
            target = os.readlink(candidate)
        except OSError:
            result = candidate  # not a link, or not there (what follows is taken as written)
            continue
        hops += 1
        if hops > _MAX_LINKS:
            return None
        if target.startswith("/"):
            result = "/"
        pending = [p for p in target.split("/") if p] + pending
    return result


def _under(path: str, roots: frozenset[str] | Sequence[str]) -> str | None:
    for root in roots:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return root
    return None


def mylm_private(extra: Sequence[str | os.PathLike[str]] = (), environ: Mapping[str, str] | None = None
                 ) -> tuple[str, ...]:
    """mylm's own config, data and state directories (sessions, memory, tokens) and `extra`."""
    env = environment() if environ is None else environ
    # Kept per the variables they are made from: the sandbox asks before every command (~20 µs to build).
    return _mylm_private(tuple(env.get(name) for name in DIR_VARIABLES), tuple(str(p) for p in extra))


@lru_cache(maxsize=16)
def _mylm_private(values: tuple[str | None, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    env = {name: value for name, value in zip(DIR_VARIABLES, values, strict=True) if value is not None}
    mine = [config_dir(env), data_dir(env), state_dir(env)]
    return tuple(dict.fromkeys([*(str(p) for p in mine), *extra]))


@dataclass(frozen=True)
class Secrets:
    """What no auto-approved read may reach, for one workspace: real absolute paths."""

    workspace: str
    #: The credential floor and mylm's private directories (and, with $HOME as workspace, its hidden dot-entries).
    floor: frozenset[str]

    @cached_property
    def _inside(self) -> frozenset[str]:
        """The floor's paths inside the workspace (usually none: then a path inside is judged by name only)."""
        ws = self.workspace.rstrip("/") + "/"
        return frozenset(p for p in self.floor if p.startswith(ws))

    def reason(self, real: str) -> str | None:
        """Why the real absolute path `real` is a secret, or None."""
        ws = self.workspace
        inside = real.startswith(ws.rstrip("/") + "/")
        found = _under(real, self._inside if inside else self.floor)
        if found is not None:
            return f"{found} is hidden from tools and commands (credentials or mylm's own data)"
        if inside and is_secret_path(real[len(ws.rstrip("/")) + 1:]):
            return f"{real[len(ws.rstrip('/')) + 1:]} looks like a secret (keys, tokens, passwords)"
        return None

    def reason_fd(self, fd: int) -> str | None:
        """`reason` for what an open descriptor really is (its path as the kernel knows it)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None  # not Linux: the name checks before the open are all there is
        if not real.startswith("/"):
            return None  # a pipe or socket, not a path
        return self.reason(real)


# ------------------------------------------------------------------------------------- the workspace scan


@dataclass(frozen=True)
class WorkspaceScan:
    """The secret files and directories found in a workspace (real entries, never links), and how to tell
    whether it still holds: every directory looked at, with its modification time (an entry made, removed or
    renamed in a directory changes it)."""

    root: str
    #: (absolute path, is a directory), sorted.
    found: tuple[tuple[str, bool], ...]
    #: False when the scan stopped at its budget: masks then cover only what it found.
    complete: bool
    dirs: tuple[tuple[str, int], ...]

    def current(self) -> bool:
        """Whether no directory looked at has changed since (one stat each)."""
        for path, mtime in self.dirs:
            try:
                if os.stat(path, follow_symlinks=False).st_mtime_ns != mtime:
                    return False
            except OSError:
                return False
        return True


def scan_workspace(root: str, budget: int = SCAN_BUDGET) -> WorkspaceScan:
    """Find every secret in the workspace at `root` (real path): names `is_secret_path` matches, and every
    hard link to one of those files (it shares the contents under another name). Links are not followed (a
    link inside leads to an entry this scan finds where it is; one outside leads where the kernel's rules
    decide). Not `.git/objects` (hashed names, compressed contents)."""
    found: list[tuple[str, bool]] = []
    dirs: list[tuple[str, int]] = []
    inodes: dict[int, list[str]] = {}
    secret_inodes: set[int] = set()
    stack = [""]
    complete = True
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        try:
            mtime = os.stat(path, follow_symlinks=False).st_mtime_ns
            entries = list(os.scandir(path))
        except OSError:
            continue
        dirs.append((path, mtime))
        budget -= len(entries)
        if budget < 0:
            complete = False
            break
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_secret_path(child) and (is_dir or is_file):
                found.append((entry.path, is_dir))
                if is_file:
                    secret_inodes.add(entry.inode())
                continue
            if is_dir:
                if child != ".git/objects":
                    stack.append(child)
            elif is_file:
                inodes.setdefault(entry.inode(), []).append(entry.path)
    for inode in secret_inodes:
        for path in inodes.get(inode, ()):
            found.append((path, False))
    return WorkspaceScan(root, tuple(sorted(set(found))), complete, tuple(dirs))


class ScanCache:
    """The last scan of each workspace, taken again only when one of its directories changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scans: dict[str, WorkspaceScan] = {}

    def get(self, root: str) -> WorkspaceScan:
        with self._lock:
            scan = self._scans.get(root)
        if scan is not None and scan.current():
            return scan
        scan = scan_workspace(root)
        with self._lock:
            self._scans[root] = scan
            while len(self._scans) > 32:
                self._scans.pop(next(iter(self._scans)))
        return scan


scans = ScanCache()

