"""`mylm memory list|forget|path`: the notes the model saved with `remember`, and deleting them."""

from __future__ import annotations

from pathlib import Path

import click

from .common import handles_errors


@click.group()
def memory() -> None:
    """The notes the model saved with `remember`; `search_memory` shows them to later sessions.

    A note can carry text an attacker planted (a file or web page the model read), and it comes
    back in every later session: list them now and then, and forget what you did not mean to keep.
    The store is `[tools] memory_path` in the config file, or memory.db in the user data dir.
    """


def _store_path() -> Path:
    from ..config import load_settings
    from ..tools import ToolSettings
    from ..tools.memory import default_memory_path

    section = dict(load_settings().extra.get("tools", {}) or {})
    return ToolSettings.from_config(section).memory_path or default_memory_path()


@memory.command("list")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=100, show_default=True, metavar="N",
              help="Show at most N notes.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per note per line.")
@handles_errors
def list_notes(limit: int, as_json: bool) -> None:
    """List the notes, newest first: id, when and by which tool it was saved, where, and its text."""
    from ..tools import MemoryStore
    from .display import for_terminal, json_text

    path = _store_path()
    # Listing must not create the store: a missing file simply has no notes.
    notes = MemoryStore(path).notes(limit) if path.is_file() else []
    for note in notes:
        if as_json:
            click.echo(json_text({"id": note.id, "text": note.text, "created": note.created, "source": note.source,
                                  "session": note.session, "workspace": note.workspace}))
        else:
            click.echo(for_terminal(f"[{note.provenance()}]\n{note.text}\n"))
    if not notes and not as_json:
        click.echo(f"No notes in memory ({path}).", err=True)


@memory.command("forget")
@click.argument("note_id", metavar="ID", type=click.IntRange(min=1))
@handles_errors
def forget(note_id: int) -> None:
    """Delete note ID (the number `mylm memory list` shows)."""
    from ..tools import MemoryStore

    path = _store_path()
    if not (path.is_file() and MemoryStore(path).forget(note_id)):
        raise click.UsageError(f"there is no note {note_id} (`mylm memory list` shows them)")
    click.echo(f"Forgot note {note_id}.", err=True)


@memory.command("path")
@handles_errors
def path() -> None:
    """Print the memory store's file."""
    click.echo(str(_store_path()))
