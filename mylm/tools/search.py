"""The builtin `search_files` tool: which lines of the workspace's text files contain a piece of text, and which
files' names do.

A small model asked "in which file is parse_header defined?" guesses a path (`src/parse_header.py`) where a
search answers at once; composing `grep -rn` through `execute_command` is a step it rarely takes (Qwen2.5-Coder
1.5B never did in the agent-task suite). The search is confined like the file tools: it walks the workspace from
the descriptor the workspace holds (`os.fwalk`, links never followed, every file opened with `O_NOFOLLOW`
beneath its directory), and never reads what the sandbox hides (credentials, mylm's own data), approved or not.

Models write the patterns their training saw for grep and ripgrep: Qwen2.5-Coder-1.5B, asked how many Python
files a directory holds, sent `.*\\.py$`, read "No text file contains '.*\\.py$'" and answered 0. The text is looked
for as written first (a search for `parse_header(` must not fail on an unbalanced parenthesis); when nothing holds
it as written, a pattern with a regular expression's syntax is read as one, by RE2, whose matching time is linear
in the text whatever the pattern (Python's `re` can backtrack for hours on `(a+)+$`). A pattern with a shell
wildcard (`*.py`, `src/**/test_*.py`) also matches file names, as a glob. The observation says which reading
matched.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class _Reading:
    """One way of reading the pattern: which file names and which lines of a text it matches."""

    #: The verb the observation uses for what this reading found: files "contain" the text as written, and
    #: "match" a regular expression or a wildcard.
    verb: str
    #: Whether a file's name (and its path from the search's root) matches.
    name: Callable[[str, str], bool]
    #: The (line number, line) pairs of a text that match.
    lines: Callable[[str], list[tuple[int, str]]]
    #: Whether case is ignored.
    fold: bool


def search_text(ws: Workspace, pattern: str, path: str = ".", *, guard: Secrets | None = None) -> str:
    """The lines of the text files under `path` (a directory or a file of the workspace) that contain `pattern`,
    as `path:line: text`, and the files whose names hold it; case is ignored when `pattern` has no capital letter
    (as ripgrep's smart case). When nothing holds it as written, a pattern in a regular expression's syntax is
    searched again as one (RE2); a pattern with a shell wildcard also matches file names as a glob."""
    if not pattern:
        raise ToolError("argument 'pattern' is empty; give the text to look for")
    if "\n" in pattern:
        raise ToolError("argument 'pattern' holds a line break; search for one line's text at a time")
    rel = ws.relative(path)
    where = "the workspace" if rel == "." else rel
    literal = _literal(pattern)
    shown = _search(ws, rel, guard, literal, _glob(pattern), pattern, where)
    if shown is not None:
        return shown
    regex = _regex(pattern)
    if regex is not None:
        shown = _search(ws, rel, guard, regex, None, pattern, where)
        if shown is not None:
            return f"[nothing holds {pattern!r} as written; read as a regular expression:]\n{shown}"
    nothing = f"No text file in {where} contains {pattern!r}"
    if regex is not None:
        nothing += ", as written or as a regular expression"
    return nothing + "."


def _search(ws: Workspace, rel: str, guard: Secrets | None, reading: _Reading, glob: _Reading | None,
            pattern: str, where: str) -> str | None:
    """What `reading` (and `glob`, for names) finds under `rel`, as the observation shows it; None if nothing."""
    matches: list[str] = []
    named: list[str] = []
    globbed: list[str] = []
    found = files_matched = files_seen = 0
    truncated = False
    for shown, fd in _files(ws, rel, guard):
        try:
            files_seen += 1
            if files_seen > MAX_FILES:
                truncated = True
                break
            name = posixpath.basename(shown)
            if reading.name(name, shown):
                named.append(shown)
            elif glob is not None and glob.name(name, shown):
                globbed.append(shown)
            hits = _search_file(fd, reading)
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
    if not (found or named or globbed):
        return None
    # Models look files up by name with it too ("py" for the Python files: Qwen2.5-Coder-1.5B answered 0 from "no
    # text file contains 'py'"): the names that hold the text are part of the answer, and come first (after "no
    # text file contains 'py'" the 1.5B answered "No Python files" with the four names listed below it).
    names = _names(named, pattern, reading.verb) + _names(globbed, pattern, "match")
    more = f" (stopped after {MAX_FILES:,} files)" if truncated else ""
    if not found:
        return "\n".join([*names, f"No line of a text file in {where} {_singular(reading.verb)} {pattern!r}{more}."])
    folded = " (case ignored)" if reading.fold and pattern.lower() != pattern.upper() else ""
    header = f"[{counted(found, 'match', 'matches')} for {pattern!r} in {counted(files_matched, 'file')}{folded}]"
    lines = [header, *matches]
    if found > len(matches):
        lines.append(f"[... and {found - len(matches):,} more matches not shown; search a narrower path or text]")
    if truncated:
        lines.append(f"[stopped after {MAX_FILES:,} files; search a narrower path]")
    return "\n".join([*names, *lines])


def _singular(verb: str) -> str:
    """`contain` -> `contains`, `match` -> `matches`."""
    return verb + ("es" if verb.endswith("ch") else "s")


def _names(named: list[str], pattern: str, verb: str) -> list[str]:
    """The lines that list the files whose names hold or match the pattern (none when no name does)."""
    if not named:
        return []
    shown = named[:MAX_MATCHES]
    more = f" (the first {len(shown)} shown)" if len(named) > len(shown) else ""
    said = _singular(verb) if len(named) == 1 else verb
    return [f"[{counted(len(named), 'file name')} {said} {pattern!r}{more}]", *shown]


def _literal(pattern: str) -> _Reading:
    fold = pattern == pattern.lower()
    needle = pattern.lower() if fold else pattern

    def name(base: str, _shown: str) -> bool:
        return needle in (base.lower() if fold else base)

    def lines(text: str) -> list[tuple[int, str]]:
        haystack = text.lower() if fold else text
        if needle not in haystack:
            return []
        return [(number, line.strip()) for number, (line, folded) in
                enumerate(zip(text.splitlines(), haystack.splitlines()), 1) if needle in folded]

    return _Reading("contain", name, lines, fold)


#: The syntax that makes a pattern a regular expression rather than plain text.
_REGEX_SYNTAX = re.compile(r"[.*+?^$|()\[\]{}]|\\[A-Za-z]")


def _regex(pattern: str) -> _Reading | None:
    """The pattern read as a regular expression (RE2, linear time), or None: no such syntax, or not valid."""
    if not _REGEX_SYNTAX.search(pattern):
        return None
    import re2  # only here: a search that finds its text as written never loads it

    options = re2.Options()
    options.log_errors = False  # RE2 logs a bad pattern on stderr; the observation says what happened
    # Smart case as for the text: a capital outside an escape (`\S`, `\W` are classes) makes the case count.
    fold = not any(c.isupper() for c in re.sub(r"\\.", "", pattern))
    options.case_sensitive = not fold
    try:
        compiled: Any = re2.compile(pattern, options)
        lined: Any = re2.compile("(?m)" + pattern, options)  # ^ and $ at each line, as grep reads them
    except re2.error:
        return None

    def name(base: str, _shown: str) -> bool:
        return compiled.search(base) is not None

    def lines(text: str) -> list[tuple[int, str]]:
        if lined.search(text) is None:
            return []
        hits = []
        for number, line in enumerate(text.splitlines(), 1):
            if lined.search(line) is not None:
                hits.append((number, line.strip()))
        return hits

    return _Reading("match", name, lines, fold)


def _glob(pattern: str) -> _Reading | None:
    """The pattern read as a shell wildcard over file names (`*.py`, `src/**/*.md`), or None if it has none."""
    if not any(c in pattern for c in "*?[") or any(c.isspace() for c in pattern):
        return None
    fold = pattern == pattern.lower()
    wanted = pattern.lower() if fold else pattern
    # `**/` matches no directory too (`**/*.py` holds `setup.py`), as in git and ripgrep.
    patterns = {wanted, wanted.replace("**/", "")} if "**/" in wanted else {wanted}
    compiled = [re.compile(fnmatch.translate(p)) for p in patterns]
    by_path = "/" in wanted

    def name(base: str, shown: str) -> bool:
        subject = shown if by_path else base
        subject = subject.lower() if fold else subject
        return any(c.match(subject) for c in compiled)

    return _Reading("match", name, lambda _text: [], fold)


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


def _search_file(fd: int, reading: _Reading) -> list[tuple[int, str]]:
    """The (line number, line) pairs of a text file that `reading` matches; none for a binary file."""
    data = os.pread(fd, MAX_FILE_BYTES + 1, 0)
    if b"\0" in data[:_SNIFF_BYTES]:
        return []
    return reading.lines(data.decode("utf-8", "replace"))


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
            pattern: The text to look for (case is ignored when it has no capital letter); when nothing holds it
                as written, it is read as a regular expression, and `*.py` matches file names.
            path: A directory or file to search, relative to the workspace (default: the whole workspace).
        """
        return search(ws, pattern, path=path, guard=hidden)

    return [search_files.refine(pattern={"minLength": 1})]
