"""`mylm sessions list|show|path`: the saved conversations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from ..core.words import counted
from .common import handles_errors
from .record import complete_session, find_session

if TYPE_CHECKING:
    from ..core.types import Message


@click.group()
def sessions() -> None:
    """Saved conversations: every `ask` and `chat` is kept as a JSON Lines file.

    Resume one with `mylm ask --continue` (the most recent), `mylm ask --session ID` or
    `mylm chat --session ID`. Files are owner-only; API keys and secrets are redacted before writing.
    """


@sessions.command("list")
@click.option(
    "-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True, metavar="N",
    help="Show at most N sessions.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session per line.")
@handles_errors
def list_sessions(limit: int, as_json: bool) -> None:
    """List sessions, most recent first: ID, when, command, model, messages and the first prompt."""
    from ..sessions import iter_sessions, sessions_dir
    from .display import for_terminal, json_text

    shown = 0
    for session in iter_sessions(sessions_dir()):
        if shown >= limit:
            break
        shown += 1
        header = session.header
        if as_json:
            record = {"id": session.id, "path": str(session.path), "created": header.get("time"),
                      "command": header.get("command"), "model": header.get("profile") or header.get("model"),
                      "messages": len(session.history), "title": session.title}
            click.echo(json_text(record))
            continue
        when = str(header.get("time", ""))[:16].replace("T", " ")
        model = header.get("profile") or header.get("model") or "-"
        title = session.title if len(session.title) <= 60 else session.title[:59] + "…"
        messages = counted(len(session.history), "msg")
        line = f"{session.id}  {when}  {header.get('command', '?'):<4}  {model}  {messages:>8}  {title}"
        click.echo(for_terminal(line))
    if not shown and not as_json:
        click.echo("No saved sessions yet (`mylm ask` and `mylm chat` save them).", err=True)


@sessions.command("show")
@click.argument("session_id", metavar="ID", shell_complete=complete_session)
@click.option("--json", "as_json", is_flag=True, help="Print the transcript's records as they are stored.")
@handles_errors
def show(session_id: str, as_json: bool) -> None:
    """Print session ID's conversation (ID may be a unique prefix or suffix of it)."""
    from ..sessions import load, read_records
    from .display import for_terminal, json_text

    path = find_session(session_id)
    if as_json:
        for record in read_records(path)[0]:
            click.echo(json_text(record))
        return
    session = load(path)
    click.echo(for_terminal(conversation_markdown(session.history, title=f"Session {session.id}")), nl=False)


@sessions.command("path")
@handles_errors
def path() -> None:
    """Print the directory sessions are saved in."""
    from ..sessions import sessions_dir

    click.echo(str(sessions_dir()))


def conversation_markdown(messages: Iterable[Message], *, title: str = "Conversation") -> str:
    """A conversation as Markdown: one section per message, tool calls and observations as they were sent."""
    parts = [f"# {title}\n"]
    for message in messages:
        parts.append(f"\n## {message.role}\n\n{message.content.rstrip()}\n")
    return "".join(parts)
