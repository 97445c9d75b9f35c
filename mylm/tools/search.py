"""The builtin `search_files` tool: which lines of the workspace's text files contain a piece of text, and which
files' names do.

A small model asked "in which file is parse_header defined?" guesses a path (`src/parse_header.py`) where a
search answers at once; composing `grep -rn` through `execute_command` is a step it rarely takes (Qwen2.5-Coder
1.5B never did in the agent-task suite). The search is confined like the file tools: it walks the workspace from
the descriptor the workspace holds (`os.fwalk`, links never followed, every file opened with `O_NOFOLLOW`
beneath its directory), and never reads what the sandbox hides (credentials, mylm's own data), approved or not.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterator

from ..core.errors import ToolError
from ..core.words import counted
from ..sandbox.hidden import Secrets, is_secret_path
from ..sandbox.profile import secrets_for
from .base import Tool, ToolContext, tool
from .files import os_errors
from .paths import Workspace

#: Matching lines shown at most; the rest are counted.
MAX_MATCHES = 100
#: Files larger than this are not searched (logs, data dumps).
MAX_FILE_BYTES = 2 * 1024 * 1024
#: Files looked at, at most, in one search.
MAX_FILES = 5000
#: A matching line is shown up to this many characters.
MAX_LINE_CHARS = 240
#: Directories of tools' caches and dependencies: searching them buries the project's own files.
SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".tox", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".nox", ".cache",
})
_SNIFF_BYTES = 8192
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def search_text(ws: Workspace, pattern: str, path: str = ".", *, guard: Secrets | None = None) -> str:
    """The lines of the text files under `path` (a directory or a file of the workspace) that contain `pattern`,
    as `path:line: text`; the match ignores case when `pattern` has no capital letter (as ripgrep's smart case).
    """
    if not pattern:
        raise ToolError("argument 'pattern' is empty; give the text to look for")
    if "\n" in pattern:
        raise ToolError("argument 'pattern' holds a line break; search for one line's text at a time")
    fold = pattern == pattern.lower()
    needle = pattern.lower() if fold else pattern
    rel = ws.relative(path)
    matches: list[str] = []
    named: list[str] = []
    found = files_matched = files_seen = 0
    truncated = False
    for shown, fd in _files(ws, rel, guard):
        try:
            files_seen += 1
            if files_seen > MAX_FILES:
                truncated = True
                break
            name = posixpath.basename(shown)
            if needle in (name.lower() if fold else name):
                named.append(shown)
            hits = _search_file(fd, needle, fold)
        finally:
            os.close(fd)
        if not hits:
            continue
        files_matched += 1
        found += len(hits)
        for number, line in hits:
            if len(matches) < MAX_MATCHES:
                text = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS - 3] + "..."
                matches.append(f"{shown}:{number}: {text}")
    where = "the workspace" if rel == "." else rel
    # Models look files up by name with it too ("py" for the Python files: Qwen2.5-Coder-1.5B answered 0 from "no
    # text file contains 'py'"): the names that hold the text are part of the answer, and come first (after "no
    # text file contains 'py'" the 1.5B answered "No Python files" with the four names listed below it).
    names = _names(named, pattern)
    if not found:
        more = f" (stopped after {MAX_FILES:,} files)" if truncated else ""
        nothing = "No line of a text file" if names else "No text file"
        return "\n".join([*names, f"{nothing} in {where} contains {pattern!r}{more}."])
    header = (f"[{counted(found, 'match', 'matches')} for {pattern!r} in {counted(files_matched, 'file')}"
              f"{' (case ignored)' if fold and pattern.lower() != pattern.upper() else ''}]")
    lines = [header, *matches]
    if found > len(matches):
        lines.append(f"[... and {found - len(matches):,} more matches not shown; search a narrower path or text]")
    if truncated:
        lines.append(f"[stopped after {MAX_FILES:,} files; search a narrower path]")
    return "\n".join([*names, *lines])


def _names(named: list[str], pattern: str) -> list[str]:
    """The lines that list the files whose names contain the pattern (none when no name does)."""
    if not named:
        return []
    shown = named[:MAX_MATCHES]
    more = f" (the first {len(shown)} shown)" if len(named) > len(shown) else ""
    verb = "contains" if len(named) == 1 else "contain"
    return [f"[{counted(len(named), 'file name')} {verb} {pattern!r}{more}]", *shown]


def _files(ws: Workspace, rel: str, hidden: Secrets | None) -> Iterator[tuple[str, int]]:
    """(shown path, open descriptor) for each regular file under `rel`, in name order; the caller closes each."""
    try:
        top = ws.open_dir(rel)
    except NotADirectoryError:  # a file: search it alone
        parent = posixpath.dirname(rel) or "."
        parent_fd = ws.open_dir(parent)
        try:
            fd = _open_file(parent_fd, posixpath.basename(rel), rel, hidden)
        finally:
            os.close(parent_fd)
        if fd is not None:
            yield rel, fd
        return
    try:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            prefix = _join(rel, dirpath.removeprefix(".").lstrip("/"))
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not is_secret_path(_join(prefix, d)))
            for filename in sorted(filenames):
                shown = _join(prefix, filename)
                fd = _open_file(dir_fd, filename, shown, hidden)
                if fd is not None:
                    yield shown, fd
    finally:
        os.close(top)


def _join(prefix: str, name: str) -> str:
    if not prefix or prefix == ".":
        return name or "."
    return f"{prefix}/{name}" if name else prefix


def _open_file(dir_fd: int, name: str, shown: str, hidden: Secrets | None) -> int | None:
    """An open descriptor of the regular file `name`, or None (a link, a special file, a secret, unreadable)."""
    if is_secret_path(shown):
        return None
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # a link (O_NOFOLLOW), gone, or not readable
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES or (
            hidden is not None and hidden.reason_fd(fd)):
        os.close(fd)
        return None
    return fd


def _search_file(fd: int, needle: str, fold: bool) -> list[tuple[int, str]]:
    """The (line number, line) pairs of a text file that contain `needle`; none for a binary file."""
    data = os.pread(fd, MAX_FILE_BYTES + 1, 0)
    if b"\0" in data[:_SNIFF_BYTES]:
        return []
    text = data.decode("utf-8", "replace")
    haystack = text.lower() if fold else text
    if needle not in haystack:
        return []
    hits = []
    for number, (line, folded) in enumerate(zip(text.splitlines(), haystack.splitlines()), 1):
        if needle in folded:
            hits.append((number, line.strip()))
    return hits


def search_tools(ws: Workspace, secrets: Secrets | None = None) -> list[Tool]:
    """Return `search_files`, confined to `ws`; it never reads what `secrets` (default: the sandbox's list for
    `ws`) holds."""
    hidden = secrets if secrets is not None else secrets_for(ws.root)
    search = os_errors(search_text)

    @tool(risk="read")
    def search_files(pattern: str, path: str = ".", context: ToolContext | None = None) -> str:
        """Find the lines of the workspace's text files that contain a piece of text (to find where something is
        defined or mentioned), and the files whose names contain it. Shows each line as path:line: text.

        Args:
            pattern: The exact text to look for (case is ignored when it has no capital letter).
            path: A directory or file to search, relative to the workspace (default: the whole workspace).
        """
        return search(ws, pattern, path=path, guard=hidden)

    return [search_files.refine(pattern={"minLength": 1})]
