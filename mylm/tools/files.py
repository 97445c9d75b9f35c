"""The builtin file tools `read_file`, `write_file`, `edit_file` and `list_dir`, confined to the workspace."""

from __future__ import annotations

import collections
import difflib
import errno
import json
import os
import posixpath
import re
import secrets
import stat
from collections.abc import Callable
from typing import Any

from ..core.errors import ToolError
from ..core.redact import redact
from ..core.words import counted
from ..sandbox.hidden import Secrets
from ..sandbox.profile import secrets_for
from .base import Tool, ToolContext, tool
from .paths import Workspace, check_regular

#: Bytes one read_file call returns at most; the rest is paged with offset/limit.
MAX_READ_BYTES = 256 * 1024
DEFAULT_READ_LINES = 2000
#: Files up to this size get an exact line count in the read_file header; larger ones are not scanned twice.
_COUNT_LINES_UP_TO = 64 * 1024 * 1024
#: write_file and edit_file refuse to produce (or load) files larger than this.
MAX_WRITE_BYTES = 10 * 1024 * 1024
MAX_LIST_ENTRIES = 1000
_SNIFF_BYTES = 8192
_CHUNK = 1024 * 1024

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"), (b"\xff\xd8\xff", "JPEG image"), (b"GIF8", "GIF image"),
    (b"%PDF", "PDF document"), (b"PK\x03\x04", "ZIP archive (or .jar, .docx, .whl)"),
    (b"\x1f\x8b", "gzip data"), (b"\x7fELF", "ELF executable or library"),
    (b"SQLite format 3\0", "SQLite database"), (b"\0asm", "WebAssembly module"), (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\0", "xz data"), (b"7z\xbc\xaf'\x1c", "7-Zip archive"),
    (b"\xca\xfe\xba\xbe", "Java class file"), (b"RIFF", "RIFF media file"),
)


def _describe_binary(shown: str, head: bytes, size: int) -> str:
    kind = next((name for magic, name in _MAGIC if head.startswith(magic)), "binary data")
    return (
        f"[{shown} is a binary file ({kind}, {size:,} bytes); its content is not shown. "
        f"Inspect it with execute_command, e.g. `file {shown}` or `xxd {shown} | head`.]"
    )


def _count_lines(fd: int, size: int) -> int | None:
    if size > _COUNT_LINES_UP_TO:
        return None
    count, pos, last = 0, 0, b"\n"
    while True:
        chunk = os.pread(fd, _CHUNK, pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
        last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


def _seek_line(fd: int, line: int) -> int | None:
    """Byte position where 1-based `line` starts, or None when the file has fewer lines."""
    pos, current = 0, 1
    while current < line:
        chunk = os.pread(fd, _CHUNK, pos)
        if not chunk:
            return None
        newlines = chunk.count(b"\n")
        if current + newlines < line:
            current += newlines
            pos += len(chunk)
            continue
        index = -1
        for _ in range(line - current):
            index = chunk.index(b"\n", index + 1)
        return pos + index + 1
    return pos


def _refuse_secret(guard: Secrets | None, fd: int, path: str) -> None:
    """With `guard` (a read nobody approved), refuse what the opened descriptor really is when it is a secret:
    judged on the object opened, so no name, link or race between the policy's look and the open gets past."""
    why = guard.reason_fd(fd) if guard is not None else None
    if why:
        raise ToolError(f"'{path}' was not read: {why}; it needs the user's approval")


def read_text(ws: Workspace, path: str, offset: int = 1, limit: int = DEFAULT_READ_LINES, *,
              guard: Secrets | None = None) -> str:
    """Lines `offset`…`offset+limit-1` of a text file (at most 256 KiB), with a header saying which; with
    `guard`, never a secret's."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; check_regular refuses it right after.
    fd = ws.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        _refuse_secret(guard, fd, path)
        info = check_regular(fd, path)
        head = os.pread(fd, _SNIFF_BYTES, 0)
        if b"\0" in head:
            return _describe_binary(path, head, info.st_size)
        if info.st_size == 0:
            return f"[{path} is empty]"
        start = _seek_line(fd, offset)
        total = _count_lines(fd, info.st_size)
        if start is None or start >= info.st_size:
            known = f"it has {total:,} lines" if total is not None else "it has fewer lines"
            raise ToolError(f"offset {offset} is past the end of {path}: {known}")
        data = os.pread(fd, MAX_READ_BYTES + 1, start)
    finally:
        os.close(fd)
    return _page(path, data, start, offset, limit, info.st_size, total)


def _page(path: str, data: bytes, start: int, offset: int, limit: int, size: int, total: int | None) -> str:
    chunk = data[:MAX_READ_BYTES]
    pieces = chunk.split(b"\n")
    complete, rest = pieces[:-1], pieces[-1]
    at_end = start + len(chunk) >= size
    notes: list[str] = []
    if len(complete) >= limit:
        lines = complete[:limit]
    elif at_end:
        lines = complete + ([rest] if rest else [])
    elif complete:
        lines = complete  # the partial last line is shown whole on the next page
    else:
        lines = [rest]
        notes.append(
            f"[line {offset} is longer than {MAX_READ_BYTES // 1024} KiB and was cut; see the rest with "
            "execute_command, e.g. `cut -c` or `head -c`]"
        )
    last = offset + len(lines) - 1
    used = sum(len(line) + 1 for line in lines)
    more = start + used < size and not notes
    of = f" of {total:,}" if total is not None else ""
    header = f"[{path}: lines {offset}-{last}{of}]"
    if more:
        notes.append(f"[more lines follow; call read_file with offset={last + 1} to continue]")
    # Known secret values (mylm's own key, tokens in the environment) never reach the model, even from a file.
    text = redact(b"\n".join(lines).decode("utf-8", errors="replace"))
    return "\n".join([header, text, *notes])


def _atomic_replace(dir_fd: int, name: str, data: bytes, mode: int | None) -> None:
    """Write `data` to a new file beside `name`, then rename it over `name`: no reader sees half a file,
    and the rename replaces the directory entry without following whatever link may sit there."""
    temp = f".mylm-{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o666 if mode is None else 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _existing(dir_fd: int, name: str, shown: str) -> os.stat_result | None:
    """lstat the target of a write: refuse links, directories and special files; None if it does not exist."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(name, dir_fd=dir_fd)
        raise ToolError(f"'{shown}' is a symbolic link (to '{target}'); mylm does not write through links, "
                        "so write to the file it points to instead")
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"'{shown}' is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"'{shown}' is not a regular file")
    if info.st_nlink > 1:
        raise ToolError(f"'{shown}' has {info.st_nlink} hard links; a hard link may point at a file outside "
                        "the workspace, so mylm does not write to it")
    return info


def _split(ws: Workspace, path: str) -> tuple[str, str, str]:
    rel = ws.relative(path)
    if rel == "." or path.rstrip().endswith(("/", os.sep)):
        raise ToolError(f"'{path}' names a directory; give the path of a file")
    parent, name = posixpath.split(rel)
    return rel, parent or ".", name


def write_text(ws: Workspace, path: str, content: str) -> str:
    """Create or replace a file with `content`, creating missing parent directories inside the workspace."""
    data = content.encode("utf-8", errors="surrogatepass")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(f"the content is {len(data):,} bytes; write_file accepts at most {MAX_WRITE_BYTES:,}")
    rel, parent, name = _split(ws, path)
    dir_fd = ws.open_dir(parent, create=True)
    try:
        before = _existing(dir_fd, name, rel)
        _atomic_replace(dir_fd, name, data, stat.S_IMODE(before.st_mode) if before else None)
    finally:
        os.close(dir_fd)
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    what = "replaced its previous content" if before else "new file"
    return f"Wrote {counted(len(data), 'byte')} ({counted(lines, 'line')}) to {rel} ({what})."


def edit_text(ws: Workspace, path: str, old: str, new: str, replace_all: bool = False) -> str:
    """Replace the one occurrence of `old` in a text file with `new` (every occurrence with `replace_all`)."""
    if old == new:
        raise ToolError("arguments 'old' and 'new' are identical, so there is nothing to change")
    rel, parent, name = _split(ws, path)
    dir_fd = ws.open_dir(parent)
    try:
        before = _existing(dir_fd, name, rel)
        if before is None:
            raise ToolError(f"'{rel}' does not exist; create it with write_file")
        if before.st_size > MAX_WRITE_BYTES:
            raise ToolError(f"'{rel}' is {before.st_size:,} bytes; edit_file edits up to {MAX_WRITE_BYTES:,}")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(name, flags, dir_fd=dir_fd)
        try:
            check_regular(fd, rel)
            data = os.pread(fd, MAX_WRITE_BYTES + 1, 0)
        finally:
            os.close(fd)
        if b"\0" in data[:_SNIFF_BYTES]:
            raise ToolError(f"'{rel}' is a binary file; edit_file only edits text")
        if not old:
            raise ToolError(_empty_old(data, rel, path, new))
        old_b, new_b, note = _match(data, old, new, rel, replace_all)
        index = data.index(old_b)
        occurrences = data.count(old_b)
        after = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if _identity(after) != _identity(before):
            raise ToolError(f"'{rel}' changed while it was being edited; read it again and retry")
        _atomic_replace(dir_fd, name, data.replace(old_b, new_b, -1 if replace_all else 1),
                        stat.S_IMODE(before.st_mode))
    finally:
        os.close(dir_fd)
    if replace_all and occurrences > 1:
        lines = ", ".join(map(str, _lines_of(data, old_b)[:10])) + (", ..." if occurrences > 10 else "")
        return f"Edited {rel}: replaced {counted(occurrences, 'occurrence')} (at lines {lines}).{note}"
    line = data.count(b"\n", 0, index) + 1
    removed, added = old_b.count(b"\n") + 1, new_b.count(b"\n") + 1
    return f"Edited {rel}: replaced {counted(removed, 'line')} at line {line} with {counted(added, 'line')}.{note}"


def _empty_old(data: bytes, rel: str, path: str, new: str) -> str:
    """The message for an edit with an empty `old`: the edit_file arguments that add `new` at the end, with the
    file's real last line. Qwen2.5-Coder-1.5B, asked to append a line, tried `old: ""`; pointed at write_file, it
    replaced the whole file with the one line, and told in words how to append, it still wrote the file whole."""
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return f"argument 'old' is empty and {rel} is empty too; write its content with write_file"
    last = lines[-1] if len(lines[-1]) <= 200 else lines[-1][-200:]
    arguments = {"path": path, "old": last, "new": f"{last}\n{new.strip(chr(10))}"}
    return (f"argument 'old' is empty; give the exact text to replace. To add the text at the end of {rel}, after "
            f"its last line, call edit_file with these arguments: {json.dumps(arguments, ensure_ascii=False)}")


def _identity(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_ino, info.st_mtime_ns, info.st_size


def _match(data: bytes, old: str, new: str, rel: str, replace_all: bool = False) -> tuple[bytes, bytes, str]:
    """The byte strings to swap, adapting to CRLF files; refuse when `old` is absent or (unless `replace_all`)
    ambiguous."""
    old_b, new_b = old.encode("utf-8", "surrogatepass"), new.encode("utf-8", "surrogatepass")
    count = data.count(old_b)
    note = ""
    if count == 0 and b"\r\n" in data and "\r" not in old:
        crlf_old, crlf_new = old_b.replace(b"\n", b"\r\n"), new_b.replace(b"\n", b"\r\n")
        if data.count(crlf_old) >= 1:
            old_b, new_b, count = crlf_old, crlf_new, data.count(crlf_old)
            note = " (the file uses CRLF line endings, so they were kept)"
    if count == 1 or (count > 1 and replace_all):
        return old_b, new_b, note
    if count > 1:
        lines = ", ".join(map(str, _lines_of(data, old_b)[:10]))
        raise ToolError(
            f"'old' occurs {count} times in {rel} (at lines {lines}); include more of the surrounding text "
            "so that it matches exactly once, or set replace_all to true to replace every occurrence"
        )
    loose = re.compile(rb"\s+".join(re.escape(w) for w in old_b.split()))
    found = loose.search(data) if old_b.split() else None
    if found:
        line = data.count(b"\n", 0, found.start()) + 1
        raise ToolError(
            f"'old' was not found in {rel} exactly, but text differing only in whitespace is at line {line}; "
            "read_file that part again and copy it exactly (indentation and line breaks included)"
        )
    raise ToolError(f"'old' was not found in {rel}; copy the exact text to replace from the file (read_file it "
                    f"again if you need to).{_nearest_line(data, old)}")


#: Files up to this size are searched for the line most like an `old` that is not in them.
_NEAREST_UP_TO = 1024 * 1024


def _nearest_line(data: bytes, old: str) -> str:
    """" The line most like it is line N:\n<the line>" when one line of the file resembles `old`'s first line
    (a small model writes `port: 5433` for the file's `"port": 5433`), else "" (the caller's sentence ends)."""
    wanted = next((line.strip() for line in old.splitlines() if line.strip()), "")
    if not wanted or len(data) > _NEAREST_UP_TO:
        return ""
    best, best_ratio, best_number = "", 0.6, 0  # below 0.6 a line is not "like" it
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(wanted)
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.strip()
        if not line or len(line) > 4 * len(wanted) + 80:
            continue
        matcher.set_seq1(line)
        # A partial match is enough when the line holds more than `old` (a JSON object on one line).
        if matcher.real_quick_ratio() < best_ratio / 2:
            continue
        blocks = sum(block.size for block in matcher.get_matching_blocks())
        ratio = blocks / len(wanted)
        if ratio > best_ratio:
            best, best_ratio, best_number = raw.rstrip(), ratio, number
    if not best:
        return ""
    shown = best if len(best) <= 300 else best[:297] + "..."
    return f" The line most like it is line {best_number}:\n{shown}"


def _lines_of(data: bytes, needle: bytes) -> list[int]:
    lines, start = [], 0
    while (index := data.find(needle, start)) != -1:
        lines.append(data.count(b"\n", 0, index) + 1)
        start = index + 1
    return lines


def list_entries(ws: Workspace, path: str = ".", *, guard: Secrets | None = None) -> str:
    """The entries of a directory: subdirectories first (with '/'), files with sizes, links with targets;
    with `guard`, never a secret directory's."""
    rel = ws.relative(path)
    try:
        dir_fd = ws.open_dir(rel)
    except NotADirectoryError:
        raise ToolError(f"'{path}' is a file, not a directory; use read_file to read it") from None
    rows: list[tuple[int, str, str]] = []
    try:
        _refuse_secret(guard, dir_fd, path)
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                rows.append(_entry_row(dir_fd, entry.name))
    finally:
        os.close(dir_fd)
    if not rows:
        return f"[{rel} is empty]"
    rows.sort()
    shown = rows[:MAX_LIST_ENTRIES]
    dirs = sum(1 for kind, _, _ in rows if kind == 0)
    header = (f"[{rel}: {counted(len(rows), 'entry', 'entries')}{_file_kinds([n for k, n, _ in rows if k == 1])}, "
              f"{counted(dirs, 'directory', 'directories')}]")
    lines = [header, *(text for _, _, text in shown)]
    if len(rows) > len(shown):
        lines.append(f"[... and {len(rows) - len(shown):,} more entries not shown]")
    return "\n".join(lines)


#: The file name extensions a listing's header counts, at most (the most common first).
_KINDS_SHOWN = 6


def _file_kinds(names: list[str]) -> str:
    """The header's count of the files by extension (": 2 .py files, 1 .md file, 1 file with no extension"): small
    models count badly (asked how many Python files a directory holds, Qwen2.5-Coder-1.5B answered 3 from a
    listing of 2), so the listing counts for them. No total of files: given "4 files: 2 .py", it answered 4."""
    if not names:
        return ""
    kinds = collections.Counter(posixpath.splitext(name)[1].lower() for name in names)
    common = sorted(kinds.items(), key=lambda item: (-item[1], not item[0], item[0]))
    parts = [counted(n, f"{ext} file" if ext else "file") + ("" if ext else " with no extension")
             for ext, n in common[:_KINDS_SHOWN]]
    if len(common) > _KINDS_SHOWN:
        parts.append(counted(sum(n for _, n in common[_KINDS_SHOWN:]), "other file"))
    return ": " + ", ".join(parts)


def _entry_row(dir_fd: int, name: str) -> tuple[int, str, str]:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return 3, name, f"{name}  (unreadable)"
    if stat.S_ISDIR(info.st_mode):
        return 0, name, f"{name}/"
    if stat.S_ISLNK(info.st_mode):
        return 2, name, f"{name} -> {os.readlink(name, dir_fd=dir_fd)}"
    if stat.S_ISREG(info.st_mode):
        return 1, name, f"{name}  ({_size(info.st_size)})"
    return 3, name, f"{name}  (special file)"


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


#: Entries of the nearest existing directory a "does not exist" error shows.
_NEARBY_ENTRIES = 30


def _nearby(ws: Workspace, path: str, guard: Secrets | None) -> str:
    """What a model that guessed a path should see: "; src/ holds: util.py, main.py" (the deepest directory on
    `path` that exists, listed as list_dir would, secrets kept out the same way), or ""."""
    try:
        rel = ws.relative(path)
    except ToolError:
        return ""
    parent = posixpath.dirname(rel) or "."
    while True:
        try:
            listing = list_entries(ws, parent, guard=guard)
            break
        except (ToolError, OSError):
            if parent == ".":
                return ""
            parent = posixpath.dirname(parent) or "."
    names = [line.split("  (")[0] for line in listing.splitlines()[1:] if not line.startswith("[")]
    if not names:
        return f"; {'the workspace' if parent == '.' else parent + '/'} is empty"
    more = f", ... ({len(names) - _NEARBY_ENTRIES} more)" if len(names) > _NEARBY_ENTRIES else ""
    where = "the workspace holds" if parent == "." else f"{parent}/ holds"
    return f"; {where}: {', '.join(names[:_NEARBY_ENTRIES])}{more}"


def os_errors(function: Callable[..., str]) -> Callable[..., str]:
    """Turn the OS errors a file tool can meet into messages that name the problem, not an errno."""

    def wrapper(*args: Any, **kwargs: Any) -> str:
        try:
            return function(*args, **kwargs)
        except FileNotFoundError:
            path = kwargs.get("path", args[1] if len(args) > 1 else "")
            raise ToolError(f"'{path}' does not exist{_nearby(args[0], path, kwargs.get('guard'))}") from None
        except NotADirectoryError:
            raise ToolError("a component of the path is a file, not a directory") from None
        except PermissionError:
            raise ToolError("permission denied by the operating system") from None
        except OSError as error:
            if error.errno == errno.ENAMETOOLONG:
                raise ToolError("the path is too long") from None
            raise ToolError(f"the operating system refused: {error.strerror or error}") from None

    return wrapper


def file_tools(ws: Workspace, secrets: Secrets | None = None) -> list[Tool]:
    """Return `read_file`, `write_file`, `edit_file` and `list_dir`, confined to `ws`. A read the permission
    hook allowed without asking (grant "read-only") never returns what `secrets` (default: the sandbox's list
    for `ws`) holds, whatever path leads there."""
    read, write, edit, listing = (os_errors(f) for f in (read_text, write_text, edit_text, list_entries))
    hidden = secrets if secrets is not None else secrets_for(ws.root)

    def guard(context: ToolContext | None) -> Secrets | None:
        return hidden if context is not None and context.grant == "read-only" else None

    @tool(risk="read")
    def read_file(path: str, offset: int = 1, limit: int = DEFAULT_READ_LINES,
                  context: ToolContext | None = None) -> str:
        """Read a text file in the workspace, a page of lines at a time (at most 256 KiB).

        Args:
            path: The file's path, relative to the workspace.
            offset: First line to read (1-based).
            limit: How many lines to read.
        """
        return read(ws, path, offset, limit, guard=guard(context))

    @tool(risk="write")
    def write_file(path: str, content: str) -> str:
        """Create a file in the workspace, or replace its whole content; missing directories are created.

        Args:
            path: The file, relative to the workspace.
            content: The complete new content of the file.
        """
        return write(ws, path, content)

    @tool(risk="write")
    def edit_file(path: str, old: str, new: str, replace_all: bool = False) -> str:
        """Replace one exact piece of text in a file; `old` must occur exactly once, unless replace_all is set.

        Args:
            path: The file, relative to the workspace.
            old: The exact text to replace, copied from the file (whitespace included).
            new: The text to put in its place.
            replace_all: Replace every occurrence of `old` (to rename something throughout the file).
        """
        return edit(ws, path, old, new, replace_all)

    @tool(risk="read")
    def list_dir(path: str = ".", context: ToolContext | None = None) -> str:
        """List a directory of the workspace: subdirectories end with '/', files show their size.

        Args:
            path: The directory, relative to the workspace (default: the workspace itself).
        """
        return listing(ws, path, guard=guard(context))

    # Explain 0 or negative values before the call; a path must not be empty.
    read_file = read_file.refine(path={"minLength": 1}, offset={"minimum": 1}, limit={"minimum": 1})
    write_file, edit_file = (t.refine(path={"minLength": 1}) for t in (write_file, edit_file))
    return [read_file, write_file, edit_file, list_dir]
