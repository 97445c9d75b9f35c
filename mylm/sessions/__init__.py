"""Saved conversations: one JSON Lines transcript per session, owner-only, appended one whole record at a time.

A transcript is a sequence of records, each one line:

    {"type": "session", "version": 1, "id": ..., "created": ..., "command": "ask", "model": ..., ...}
    {"type": "message", "role": "user", "content": ..., "time": ...}
    {"type": "run_end", "stop_reason": ..., "usage": {...}, "error": ..., "time": ...}
    {"type": "compacted", "messages": [{"role": ..., "content": ...}, ...], "time": ...}
    {"type": "reset", "time": ...}

Replaying the records gives the conversation: messages append, `compacted` replaces everything before it and
`reset` clears it. Every record is redacted, serialised to one `bytes` and written with a single `os.write` on an
`O_APPEND` descriptor, so concurrent writers and crashes never interleave or tear records (THREATS T9, T11).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.paths import data_dir
from ..core.redact import Redactor
from ..core.types import Message

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; only annotations use it

SUFFIX = ".jsonl"
FORMAT_VERSION = 1
#: Marks an assistant turn cut short, in the conversation (so the model knows) and in the transcript.
INTERRUPTED = "[interrupted]"


def sessions_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where transcripts are kept (never a shared temp dir)."""
    return data_dir(environ) / "sessions"


def private_sessions_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`sessions_dir()`, created owner-only along with mylm's data dir above it."""
    private_dir(data_dir(environ))
    return private_dir(sessions_dir(environ))


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it owner-only (0700), whatever the umask or an older mode said."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.name == "posix" and (path.stat().st_mode & 0o777) != 0o700:
        os.chmod(path, 0o700)
    return path


def new_session_id(now: float | None = None) -> str:
    """A sortable, unique-enough id: `20250601-143012-4f3a9c` (UTC time, then 24 random bits)."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return f"{stamp:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    """An exclusive `flock` around one append: `O_APPEND` alone is atomic on local disks, not on NFS."""
    try:
        import fcntl
    except ImportError:  # Windows: appends by one process at a time are the best it offers
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Transcript:
    """An open transcript file that records are appended to; safe to share between processes."""

    def __init__(self, path: Path, fd: int, redactor: Redactor) -> None:
        self.path = path
        self.id = path.name.removesuffix(SUFFIX)
        self._fd: int | None = fd
        self._redactor = redactor

    @classmethod
    def create(
        cls, directory: Path, *, redactor: Redactor, header: Mapping[str, Any] | None = None
    ) -> Transcript:
        """Start a new session file in `directory` (created 0700) with a header record."""
        private_dir(directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        for _ in range(100):
            path = directory / (new_session_id() + SUFFIX)
            try:
                fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 collisions of 24 random bits in one second
            raise FileExistsError(f"cannot find a free session name in {directory}")
        transcript = cls(path, fd, redactor)
        transcript.append({"type": "session", "version": FORMAT_VERSION, "id": transcript.id, **(header or {})})
        return transcript

    @classmethod
    def open(cls, path: Path, *, redactor: Redactor) -> Transcript:
        """Open an existing session to append to it (resuming), tightening its mode to 0600 if needed."""
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)
        if os.name == "posix" and (os.fstat(fd).st_mode & 0o777) != 0o600:
            os.fchmod(fd, 0o600)
        return cls(path, fd, redactor)

    def append(self, record: Mapping[str, Any]) -> None:
        """Redact `record` and append it as one line, with one `write` call."""
        if self._fd is None:
            raise ValueError(f"transcript {self.path} is closed")
        data = {**record, "time": record.get("time") or _now()}
        line = json.dumps(self._redactor.redact_value(data), ensure_ascii=False) + "\n"
        # A lone surrogate (from undecodable bytes) becomes a JSON \\udXXX escape instead of crashing the writer.
        payload = line.encode("utf-8", errors="backslashreplace")
        with _locked(self._fd):
            written = os.write(self._fd, payload)
            while 0 < written < len(payload):
                # Only a full disk gets here; finish the line (still under the lock) rather than leave it torn.
                payload = payload[written:]
                written = os.write(self._fd, payload)

    def messages(self, messages: Iterable[Message]) -> None:
        """Append one `message` record per message."""
        for message in messages:
            self.append({"type": "message", "role": message.role, "content": message.content})

    def compacted(self, history: Sequence[Message]) -> None:
        """Record that the conversation was rewritten (summarised) to `history`."""
        self.append({"type": "compacted", "messages": [m.to_dict() for m in history]})

    def reset(self) -> None:
        """Record that the conversation was cleared (chat's `/reset`)."""
        self.append({"type": "reset"})

    def close(self) -> None:
        """Close the file; later appends fail."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Session:
    """A transcript read back: its header, the conversation it holds, and how many lines could not be read."""

    id: str
    path: Path
    header: Mapping[str, Any]
    history: tuple[Message, ...]
    records: tuple[Mapping[str, Any], ...]
    #: Lines that were not valid records (a crash mid-line on a filesystem without atomic appends).
    skipped: int = 0

    @property
    def title(self) -> str:
        """What the session was about: the title it was started with (the prompt, without piped context), else
        the first user message, on one line."""
        title = self.header.get("title")
        if isinstance(title, str) and title.strip():
            return " ".join(title.split())
        for record in self.records:
            if record.get("type") == "message" and record.get("role") == "user":
                return " ".join(str(record.get("content", "")).split())
        return ""


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every valid record in a transcript, and the number of lines that were not."""
    records: list[dict[str, Any]] = []
    skipped = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8", errors="replace"))
            except ValueError:
                skipped += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("type"), str):
                records.append(record)
            else:
                skipped += 1
    return records, skipped


def replay(records: Iterable[Mapping[str, Any]]) -> list[Message]:
    """The conversation the records describe, ready to pass as `history=`."""
    history: list[Message] = []
    #: Whether the last turn is known to have ended in an error or a timeout (as opposed to a crash).
    failed = False
    for record in records:
        kind = record.get("type")
        if kind == "run_end":
            failed = record.get("stop_reason") in ("error", "timeout")
        elif kind in ("message", "compacted", "reset"):
            failed = False
        if kind == "message" and record.get("role") in ("user", "assistant", "system"):
            history.append(Message(record["role"], str(record.get("content", ""))))
        elif kind == "compacted":
            history = [
                Message(m["role"], str(m.get("content", "")))
                for m in record.get("messages", [])
                if isinstance(m, dict) and m.get("role") in ("user", "assistant", "system")
            ]
        elif kind == "reset":
            history = []
    # A prompt that failed stays unanswered (requests join it with the next prompt); only a crash, which left
    # no record of how the turn ended, gets the marker.
    return history if failed else close_dangling(history, cut=False)


def close_dangling(history: list[Message], marker: str = INTERRUPTED, *, cut: bool = True) -> list[Message]:
    """Make a conversation that stopped part-way safe to continue: roles keep alternating, the cut is marked.

    With `cut`, the last assistant turn was cut short and gets `marker` appended. A user message left without a
    reply (a prompt whose run failed or crashed, or a tool result the model never saw) gets an assistant `marker`
    reply, so the next prompt does not follow a user message (strict chat templates refuse that).
    """
    if not history:
        return history
    last = history[-1]
    if cut and last.role == "assistant" and not last.content.rstrip().endswith(marker):
        history[-1] = Message("assistant", f"{last.content.rstrip()}\n{marker}")
    elif last.role == "user":
        history.append(Message("assistant", marker))
    return history


def load(path: Path) -> Session:
    """Read a transcript back into a `Session`."""
    records, skipped = read_records(path)
    header = next((r for r in records if r.get("type") == "session"), {})
    return Session(
        id=path.name.removesuffix(SUFFIX),
        path=path,
        header=header,
        history=tuple(replay(records)),
        records=tuple(records),
        skipped=skipped,
    )


def session_paths(directory: Path) -> list[Path]:
    """Every transcript in `directory`, most recently written first."""
    if not directory.is_dir():
        return []
    paths = [p for p in directory.iterdir() if p.name.endswith(SUFFIX) and p.is_file()]
    return sorted(paths, key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)


def find(directory: Path, key: str) -> Path | None:
    """The transcript whose id is `key`, or the only one whose id starts or ends with it; None if none or several."""
    key = key.strip().removesuffix(SUFFIX)
    if not key or "/" in key or os.sep in key:
        return None
    exact = directory / (key + SUFFIX)
    if exact.is_file():
        return exact
    matches = [p for p in session_paths(directory) if _matches(p.name.removesuffix(SUFFIX), key)]
    return matches[0] if len(matches) == 1 else None


def _matches(session_id: str, key: str) -> bool:
    return session_id.startswith(key) or session_id.endswith(key)


def latest(directory: Path, *, cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """The most recently written transcript (with `cwd`: of those started in that directory), or None."""
    paths = session_paths(directory)
    if cwd is None:
        return paths[0] if paths else None
    here = os.path.realpath(cwd)
    for path in paths:
        started = read_header(path).get("cwd")
        if isinstance(started, str) and os.path.realpath(started) == here:
            return path
    return None


def read_header(path: Path) -> dict[str, Any]:
    """A transcript's header record (its first line), or {} if it has none or cannot be read."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline()
        record = json.loads(first.decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("type") == "session" else {}


def iter_sessions(directory: Path) -> Iterator[Session]:
    """Every session, most recent first (unreadable files are skipped)."""
    for path in session_paths(directory):
        try:
            yield load(path)
        except OSError:
            continue
