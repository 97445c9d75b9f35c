"""The results file: one JSON line per finished task, written whole, so a kill never leaves half a record."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..core.errors import ResultsFileError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; only annotations use it

    from ..core.redact import Redactor

#: When lines reach the disk: after every line (a power cut loses nothing written), only when the file is
#: closed, or whenever the OS decides. A killed process loses nothing in any mode: the kernel has the lines.
FsyncPolicy = Literal["line", "close", "never"]


def _line(record: Mapping[str, Any]) -> bytes:
    # ensure_ascii keeps each line pure ASCII: a reader never meets a multi-byte character cut by a torn tail.
    return (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


class ResultsFile:
    """Appends result lines; knows the ids already there so a rerun skips them.

    Every line goes out in one `write()` on a descriptor opened with `O_APPEND`: the kernel puts it at the end
    of the file in one piece, so a process killed between lines leaves only whole lines, and the threads of
    one batch never interleave. A line cut short by a crash mid-write (a full disk, a power cut without
    fsync) is dropped when the file is opened again, and its task runs again.
    """

    def __init__(self, path: Path, *, fsync: FsyncPolicy = "line", redactor: Redactor | None = None) -> None:
        self.path = path
        self.fsync = fsync
        #: Every line is redacted with it before it is written (an endpoint error's URL password, a token in
        #: an answer), all but the task's id, by which a rerun finds it.
        self.redactor = redactor
        self._lock = threading.Lock()
        self.done: dict[str, dict[str, Any]] = {}
        #: Bytes of a torn last line that were cut off when the file was opened (0 when it was whole).
        self.dropped_bytes = 0
        self._fd = self._open()

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as error:
            reason = error.strerror or error
            raise ResultsFileError(f"cannot open the results file {self.path}: {reason}") from None
        try:
            self._read_existing(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _read_existing(self, fd: int) -> None:
        chunks: list[bytes] = []
        while True:
            data = os.pread(fd, 1 << 20, sum(len(c) for c in chunks))
            if not data:
                break
            chunks.append(data)
        content = b"".join(chunks)
        whole = content.rfind(b"\n") + 1
        if whole < len(content):
            # A torn last line (killed mid-write): cut it off so the next line starts on a line of its own.
            os.ftruncate(fd, whole)
            self.dropped_bytes = len(content) - whole
        for number, raw in enumerate(content[:whole].splitlines(), 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                raise ResultsFileError(
                    f"{self.path} line {number} is not a result line (not JSON); is -o the right file?"
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ResultsFileError(f"{self.path} line {number} is not a result line (no \"id\")")
            self.done[record["id"]] = record

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one result line in a single `write()` (and fsync it, by policy), redacted."""
        if self.redactor is not None:
            record = {k: v if k == "id" else self.redactor.redact_value(v) for k, v in record.items()}
        data = _line(record)
        with self._lock:
            written = os.write(self._fd, data)
            if written != len(data):
                # Regular files take a whole write unless the disk is full; say so rather than tear lines.
                raise ResultsFileError(f"could not write a whole line to {self.path} (disk full?)")
            if self.fsync == "line":
                os.fsync(self._fd)
            self.done[str(record["id"])] = dict(record)

    def close(self) -> None:
        """Flush (by policy) and close."""
        with self._lock:
            if self._fd < 0:
                return
            if self.fsync != "never":
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
