"""Saving `ask` and `chat` conversations as sessions, and finding the one to resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.words import counted
from .common import warn

if TYPE_CHECKING:
    from ..config import Settings
    from ..core.redact import Redactor
    from ..sessions import Session, Transcript
    from .runner import Exchange


def resume_option(command: Any) -> Any:
    """`--continue` and `--session ID`, and `--no-save`."""
    command = click.option("--no-save", is_flag=True, help="Do not save this conversation as a session.")(command)
    command = click.option(
        "--session", "session_id", metavar="ID", shell_complete=complete_session,
        help="Resume saved session ID (a unique prefix or suffix will do; see `mylm sessions list`).",
    )(command)
    return click.option(
        "-c", "--continue", "continue_last", is_flag=True,
        help="Resume the most recent session started in this directory (else the most recent one, with a warning).",
    )(command)


def complete_session(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..sessions import session_paths, sessions_dir

    ids = [p.name.removesuffix(".jsonl") for p in session_paths(sessions_dir())]
    return [CompletionItem(i) for i in ids if i.startswith(incomplete) or i.endswith(incomplete)]


def find_session(key: str) -> Path:
    """The transcript for a session id (or a unique prefix or suffix of one); a usage error if there is none."""
    from ..sessions import find, session_paths, sessions_dir

    directory = sessions_dir()
    path = find(directory, key)
    if path is None:
        several = [p for p in session_paths(directory) if key and key in p.name]
        hint = "it matches several; give more of it" if len(several) > 1 else "see `mylm sessions list`"
        raise click.UsageError(f"no session {key!r} ({hint})")
    return path


def session_to_resume(continue_last: bool, session_id: str | None) -> Session | None:
    """The session `--continue` or `--session` names, read back, or None for a new conversation."""
    from ..sessions import latest, load, sessions_dir

    if continue_last and session_id:
        raise click.UsageError("--continue and --session cannot be used together")
    if session_id:
        path = find_session(session_id)
    elif continue_last:
        # The tools act on the current directory, so a session begun here is the one the user means.
        found = latest(sessions_dir(), cwd=os.getcwd()) or latest(sessions_dir())
        if found is None:
            raise click.UsageError("there is no saved session to continue")
        path = found
    else:
        return None
    session = load(path)
    if session.skipped:
        warn(f"session {session.id}: skipped {counted(session.skipped, 'unreadable line')}")
    started = session.header.get("cwd")
    if isinstance(started, str) and os.path.realpath(started) != os.path.realpath(os.getcwd()):
        warn(
            f"resuming session {session.id}, which was started in {started}; its tools now act on {os.getcwd()} "
            "(`mylm sessions list` shows the others)"
        )
    return session


def inherit_model(options: dict[str, Any], resume: Session | None) -> dict[str, Any]:
    """Unless flags name another, a resumed session keeps talking to the endpoint, provider, model and chat format
    (or the profile) it was made with."""
    if resume is None:
        return options
    from .endpoint import resumed_options

    return resumed_options(options, resume.header)


class Recorder:
    """Writes a conversation to its session transcript; a failure to save warns once and never stops the chat."""

    def __init__(self, transcript: Transcript | None) -> None:
        self.transcript = transcript

    @property
    def id(self) -> str | None:
        """The session id, or None when nothing is being saved."""
        return self.transcript.id if self.transcript is not None else None

    @classmethod
    def start(
        cls,
        *,
        command: str,
        settings: Settings,
        redactor: Redactor,
        resume: Session | None,
        save: bool,
        title: str | None = None,
    ) -> Recorder:
        """Open the resumed session for appending, or create a new one (unless `save` is off)."""
        if not save:
            return cls(None)
        from ..sessions import Transcript, private_sessions_dir
        from .endpoint import HEADER_KEY, endpoint_in_use

        try:
            if resume is not None:
                return cls(Transcript.open(resume.path, redactor=redactor))
            # The endpoint really in use (the in-process model, not the Ollama URL that was not used), with
            # the URL's user, password and query never saved.
            in_use = endpoint_in_use(settings)
            header = {
                "command": command,
                "cwd": os.getcwd(),
                "model": in_use.model,
                "profile": settings.profile,
                "base_url": in_use.base_url or None,
                "provider": in_use.provider,
                HEADER_KEY: in_use.header(),
                **({"title": " ".join(title.split())[:200]} if title else {}),
            }
            return cls(Transcript.create(private_sessions_dir(), redactor=redactor, header=header))
        except OSError as error:
            warn(f"this conversation will not be saved: {error}")
            return cls(None)

    def prompt(self, text: str) -> None:
        """Record the user's prompt before the run starts, so even a crash keeps the question."""
        from ..core.types import Message

        self._write(lambda t: t.messages([Message("user", text)]))

    def exchange(self, exchange: Exchange) -> None:
        """Record what the exchange added after the prompt (or the rewritten conversation), then how it ended."""
        result = exchange.result

        def write(transcript: Transcript) -> None:
            if result.compacted:
                transcript.compacted(exchange.history)
            else:
                transcript.messages(exchange.added[1:])
            transcript.append({
                "type": "run_end",
                "stop_reason": result.stop_reason.value,
                "iterations_used": result.iterations_used,
                "usage": result.reported_usage(),
                "error": str(result.error) if result.error is not None else None,
            })

        self._write(write)

    def reset(self) -> None:
        """Record that the conversation was cleared."""
        self._write(lambda t: t.reset())

    def close(self) -> None:
        """Close the transcript."""
        if self.transcript is not None:
            self.transcript.close()

    def _write(self, action: Any) -> None:
        if self.transcript is None:
            return
        try:
            action(self.transcript)
        except OSError as error:
            warn(f"could not save to session {self.transcript.id}, saving stops here: {error}")
            self.transcript.close()
            self.transcript = None

