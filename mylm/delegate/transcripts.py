"""Delegated runs saved as sessions (as `mylm ask` saves its own), read back (`mylm://sessions/{id}`), and
continued: an A2A context or an ACP session is one saved session its runs are appended to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import SessionNotFoundError

if TYPE_CHECKING:
    from ..core.redact import Redactor
    from ..core.types import RunResult
    from ..sessions import Session, Transcript


@dataclass(frozen=True)
class RunSessions:
    """Saves each run's conversation; `header` adds what identifies the endpoint (never its credentials)."""

    redactor: Redactor
    header: Mapping[str, Any] = field(default_factory=dict)
    #: Where sessions go (None: the user's sessions directory, as for `ask`).
    directory: Path | None = None
    #: The `command` header of the sessions this front end saves; only those are read back.
    command: str = "mcp"

    def start(self, workspace: Path, title: str, **header: Any) -> str | None:
        """Start an empty session (its header only) that runs are appended to; its id, or None when it could
        not be written."""
        transcript = self._create(workspace, title, header)
        if transcript is None:
            return None
        transcript.close()
        return transcript.id

    def save(self, prompt: str, result: RunResult, workspace: Path, tool: str) -> str | None:
        """Write one run as a new session; its id, or None when it could not be written (the run is not lost
        for the client: the answer is returned either way)."""
        transcript = self._create(workspace, prompt, {"tool": tool})
        if transcript is None:
            return None
        with transcript:
            self._write(transcript, result, fresh=True)
        return transcript.id

    def append(self, session_id: str, result: RunResult) -> str | None:
        """Append a run to a session started before; its id, or None when it could not be written."""
        from ..sessions import Transcript

        try:
            transcript = Transcript.open(self.path(session_id), redactor=self.redactor)
        except (OSError, SessionNotFoundError):
            return None
        with transcript:
            self._write(transcript, result, fresh=False)
        return session_id

    def read(self, session_id: str) -> str:
        """The saved transcript (JSON lines, as written, already redacted) of a run of this front end."""
        return self.path(session_id).read_text(encoding="utf-8", errors="replace")

    def load(self, session_id: str) -> Session:
        """A session of this front end read back (its header and conversation)."""
        from ..sessions import load

        return load(self.path(session_id))

    def path(self, session_id: str) -> Path:
        """The file of a session this front end saved (SessionNotFoundError otherwise)."""
        from ..sessions import find, read_header, sessions_dir

        directory = self.directory or sessions_dir()
        path = find(directory, session_id)
        # An exact id only: a prefix match could hand out another run's transcript by accident.
        if path is None or path.name != f"{session_id}.jsonl" or read_header(path).get("command") != self.command:
            raise SessionNotFoundError(f"no session {session_id!r} saved by mylm {self.command}")
        return path

    def _create(self, workspace: Path, title: str, extra: Mapping[str, Any]) -> Transcript | None:
        from ..sessions import Transcript, private_sessions_dir

        header = {"command": self.command, **extra, "cwd": str(workspace), **self.header,
                  "title": " ".join(title.split())[:200]}
        try:
            return Transcript.create(self.directory or private_sessions_dir(), redactor=self.redactor, header=header)
        except OSError:
            return None

    def _write(self, transcript: Transcript, result: RunResult, *, fresh: bool) -> None:
        if result.compacted and not fresh:
            transcript.compacted(result.history)  # the session's earlier turns were summarised
        else:
            transcript.messages(result.history if result.compacted else result.history_delta)
        usage = result.usage
        transcript.append({
            "type": "run_end", "stop_reason": result.stop_reason.value,
            "iterations_used": result.iterations_used,
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
            "error": self.redactor.redact(str(result.error)) if result.error is not None else None,
        })
