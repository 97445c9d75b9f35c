"""What a path argument really reaches: symlinks resolved, containment in the workspace, secrets, trees below.

The shell resolves paths in the kernel, through symlinks; so does this module (`os.path.realpath`), and a path
is judged both as written and as resolved. A path is fine when it stays inside the workspace, names no secret
either way, and is not a hard link (which can share an outside file's contents).
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from ..sandbox.hidden import real_path
from ..sandbox.profile import secrets_for
from .sensitive import is_secret_path

#: Files read by a command that are harmless wherever they are.
_HARMLESS = frozenset({"/dev/null"})
#: How many directory entries a recursive check may look at before it gives up (and the command asks).
WALK_BUDGET = 20000


def path_problem(workspace: Path | None, cwd: str, value: str) -> str | None:
    """Why the path `value`, used from the workspace-relative directory `cwd`, is unsafe to read, or None."""
    if value in _HARMLESS:
        return None
    lexical = posixpath.normpath(posixpath.join(cwd, value)) if value else cwd
    if lexical == ".." or lexical.startswith(("../", "/")):
        return f"it reads outside the workspace ({value})"
    if is_secret_path(lexical):
        return f"it reads the secret file {value}"
    if workspace is None:
        return None
    real = resolved(workspace, cwd, value)
    if real is None:
        return (f"it reads outside the workspace ({value} resolves there through a symbolic link, or through "
                "/proc or /dev/fd, whose links lead wherever the reading process is)")
    secret = secrets_for(workspace).reason(os.path.join(os.path.realpath(workspace), real))
    if secret:
        return f"it reads a secret: {secret}" + ("" if real == lexical else f" (through {value})")
    try:
        info = os.stat(os.path.join(workspace, cwd, value))
    except (OSError, ValueError):
        return None  # missing: the command fails; a NUL cannot reach here (the lexer has no way to make one)
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return f"{value} has {info.st_nlink} hard links, one of which may be a file outside the workspace"
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return f"{value} is not a regular file (a FIFO, socket or device can block or reach elsewhere)"
    return None


def resolved(workspace: Path, cwd: str, value: str) -> str | None:
    """The workspace-relative real path `value` names from `cwd` ('.' for the root), or None when outside."""
    root = os.path.realpath(workspace)
    # Resolved as the command will see it from its own directory, never through a link into /proc or
    # /dev/fd (`s -> /proc/self/cwd/x` means the *command's* directory, which realpath would take as mylm's).
    real = real_path(os.path.join(root, cwd, value))
    if real is None:
        return None
    if real == root:
        return "."
    if not real.startswith(root.rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(real, root).replace(os.sep, "/")


def directory(workspace: Path | None, cwd: str, value: str) -> str | None:
    """Where `cd value` from `cwd` leads, as the shell tracks it (lexically), when that is a real directory
    inside the workspace; None when it fails or leaves (the caller then asks)."""
    if workspace is None or not value or value.startswith("-"):
        return None
    lexical = posixpath.normpath(posixpath.join(cwd, value))
    if lexical == ".." or lexical.startswith(("../", "/")):
        return None
    real = resolved(workspace, cwd, value)
    if real is None or not os.path.isdir(os.path.join(workspace, real)):
        return None
    return lexical


def secret_beneath(
    workspace: Path | None, cwd: str, roots: list[str], *, into_git: bool = True
) -> str | None:
    """The first secret (or escaping symlink) a recursive reader of `roots` could reach, following every
    symlink (as `grep -R` and `rg -L` do), or a reason the tree cannot be checked. `into_git=False` skips
    `.git/` (git never puts links there, so only a reader that follows links could be led out through one)."""
    if workspace is None:
        return "(unknown: no workspace)"
    budget = WALK_BUDGET
    secrets = secrets_for(workspace)
    real_root = secrets.workspace
    seen: set[str] = set()
    stack: list[str] = []
    for root in roots:
        rel = resolved(workspace, cwd, root)
        if rel is None:
            return f"{root} (outside the workspace)"
        if os.path.isdir(os.path.join(workspace, rel)):
            stack.append(rel)
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            entries = list(os.scandir(os.path.join(real_root, current)))
        except OSError:
            continue  # unreadable: the reader cannot read it either
        budget -= len(entries)
        if budget < 0:
            return "(too many files to check)"
        for entry in entries:
            rel = posixpath.normpath(posixpath.join(current, entry.name))
            if secrets.reason(entry.path):
                return rel
            if entry.is_symlink():
                target = resolved(workspace, current, entry.name)
                if target is None:
                    return f"{rel} (a symbolic link that leads outside the workspace)"
                if secrets.reason(os.path.join(real_root, target)):
                    return f"{rel} (a symbolic link to {target})"
                if os.path.isdir(os.path.join(workspace, target)):
                    stack.append(target)
            elif entry.is_dir(follow_symlinks=False) and (into_git or entry.name != ".git"):
                stack.append(rel)
    return None
