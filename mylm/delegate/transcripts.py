"""Delegated runs saved as sessions (as `mylm ask` saves its own), and read back for `mylm://sessions/{id}`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..core.errors import SessionNotFoundError

if TYPE_CHECKING:
    from ..core.redact import Redactor
    from ..core.types import RunResult

#: The `command` header of a session saved by `mylm mcp`; only those are served as resources.
COMMAND = "mcp"


@dataclass(frozen=True)
class RunSessions:
    """Saves each run's conversation; `header` adds what identifies the endpoint (never its credentials)."""

    redactor: Redactor
    header: Mapping[str, Any] = field(default_factory=dict)
    #: Where sessions go (None: the user's sessions directory, as for `ask`).
    directory: Path | None = None

    def save(self, prompt: str, result: RunResult, workspace: Path, tool: str) -> str | None:
        """Write the run's transcript; its id, or None when it could not be written (the run is not lost for
        the client: the answer is returned either way)."""
        from ..sessions import Transcript, private_sessions_dir

        header = {"command": COMMAND, "tool": tool, "cwd": str(workspace), **self.header,
                  "title": " ".join(prompt.split())[:200]}
        try:
            transcript = Transcript.create(self.directory or private_sessions_dir(), redactor=self.redactor,
                                           header=header)
        except OSError:
            return None
        with transcript:
            transcript.messages(result.history if result.compacted else result.history_delta)
            usage = result.usage
            transcript.append({
                "type": "run_end", "stop_reason": result.stop_reason.value,
                "iterations_used": result.iterations_used,
                "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
                "error": self.redactor.redact(str(result.error)) if result.error is not None else None,
            })
        return transcript.id

    def read(self, session_id: str) -> str:
        """The saved transcript (JSON lines, as written, already redacted) of a run of `mylm mcp`."""
        from ..sessions import find, read_header, sessions_dir

        directory = self.directory or sessions_dir()
        path = find(directory, session_id)
        # An exact id only: a prefix match could hand out another run's transcript by accident.
        if path is None or path.name != f"{session_id}.jsonl" or read_header(path).get("command") != COMMAND:
            raise SessionNotFoundError(f"no session {session_id!r} saved by mylm mcp")
        return path.read_text(encoding="utf-8", errors="replace")
