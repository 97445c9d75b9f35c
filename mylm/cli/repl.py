"""The chat loop: read a line, answer it or run a /command; Ctrl-C stops a reply, twice leaves."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..core.words import counted
from .common import EXIT_INTERRUPTED, EXIT_OK, from_outside

if TYPE_CHECKING:
    from ..agent.loop import Agent
    from ..core.redact import Redactor
    from ..core.types import Message
    from .display import EventPrinter, JsonPrinter
    from .record import Recorder
    from .tracing import Tracer

HELP = """\
Type a message and press Enter. Lines starting with / are commands (start with // to send a literal /):
  /help          this help
  /reset         forget the conversation so far (the session file keeps it)
  /tools         the tools the model can use
  /save [FILE]   write the conversation to FILE as Markdown; without FILE, say where the session is saved
  /exit          leave (so does Ctrl-D)
Ctrl-C stops the reply or tool in progress and keeps what was said; Ctrl-C again (or Ctrl-D) leaves."""


@dataclass
class ChatState:
    """One chat: the agent, the conversation so far and where it is saved."""

    agent: Agent
    recorder: Recorder
    redactor: Redactor
    history: tuple[Message, ...]
    printer_factory: Callable[[], EventPrinter | JsonPrinter]
    #: Traces each prompt's run (None: no telemetry endpoint).
    tracer: Tracer | None = None
    #: Ctrl-C presses in a row with nothing typed in between; the second one leaves.
    interrupts: int = 0
    done: bool = False
    #: Added to a timeout's error line: how to raise the limit (`common.timeout_hint`).
    timeout_hint: str = ""


def repl(state: ChatState, *, prompt: str) -> int:
    """Read lines and answer them until Ctrl-D, /exit or a second Ctrl-C; return the exit code."""
    from .runner import terminated

    while not state.done:
        try:
            line = from_outside(input(prompt), "the input")
        except EOFError:
            if prompt:
                click.echo("", err=True)
            return EXIT_OK
        except KeyboardInterrupt:
            if terminated() or (not _typed_text() and _interrupted_again(state)):
                click.echo("", err=True)
                return EXIT_INTERRUPTED
            continue
        if not line.strip():
            continue
        state.interrupts = 0
        if line.startswith("/") and not line.startswith("//"):
            _command(state, line)
            continue
        _answer(state, line[1:] if line.startswith("//") else line)
        if terminated():
            return EXIT_INTERRUPTED
    return EXIT_OK


def _interrupted_again(state: ChatState) -> bool:
    state.interrupts += 1
    if state.interrupts >= 2:
        return True
    click.echo("\n(Ctrl-C again or Ctrl-D to leave)", err=True)
    return False


def _typed_text() -> bool:
    """Whether Ctrl-C cut a line the user had started typing (then it only clears the line, as in a shell)."""
    readline = sys.modules.get("readline")
    if readline is None:
        return False
    try:
        return bool(readline.get_line_buffer())
    except Exception:  # noqa: BLE001 - a readline without get_line_buffer (libedit builds)
        return False


def _answer(state: ChatState, text: str) -> None:
    from ..core.types import StopReason
    from .display import for_terminal
    from .tracing import run_traced

    printer = state.printer_factory()
    state.recorder.prompt(text)
    exchange = run_traced(state.tracer, state.agent, text, state.history, printer.handle, finish=printer.finish)
    state.recorder.exchange(exchange)
    state.history = exchange.history
    if exchange.output_error is not None:
        from .root import OutputError

        saved = "the conversation is saved: `mylm chat --continue` resumes it" if state.recorder.id else ""
        raise OutputError(exchange.output_error, saved=saved)
    result = exchange.result
    if result.stop_reason is StopReason.CANCELLED:
        # The first Ctrl-C stopped the reply; one more at the prompt leaves.
        state.interrupts = 1
        click.echo("Stopped; what was said so far is kept. (Ctrl-C again or Ctrl-D to leave)", err=True)
    elif result.stop_reason is StopReason.REPEATED_CALL:
        click.echo(f"mylm: stopped: {for_terminal(state.redactor.redact(str(result.error)))}", err=True)
    elif result.error is not None:
        hint = f"; {state.timeout_hint}" if result.stop_reason is StopReason.TIMEOUT and state.timeout_hint else ""
        click.echo(f"mylm: error: {for_terminal(state.redactor.redact(str(result.error)))}{hint}", err=True)
    elif result.stop_reason is StopReason.MAX_ITERATIONS:
        used = counted(result.iterations_used, "iteration")
        click.echo(f"mylm: stopped after {used} (--max-iterations)", err=True)


def _command(state: ChatState, line: str) -> None:
    name, _, argument = line.strip().partition(" ")
    name = name.lower()
    if name in ("/exit", "/quit"):
        state.done = True
    elif name in ("/help", "/?"):
        click.echo(HELP, err=True)
    elif name == "/reset":
        state.history = ()
        state.recorder.reset()
        click.echo("The conversation was cleared; the model starts afresh.", err=True)
    elif name == "/tools":
        from .display import for_terminal

        for tool in state.agent.tools:
            click.echo(f"  {tool.name:<18} [{tool.risk}] {for_terminal(tool.description)}", err=True)
    elif name == "/save":
        _save(state, argument.strip())
    else:
        click.echo(f"unknown command {name}; /help lists them", err=True)


def _save(state: ChatState, target: str) -> None:
    from .sessions import conversation_markdown

    if not target:
        if state.recorder.transcript is None:
            click.echo("This conversation is not being saved (--no-save); /save FILE writes it out.", err=True)
        else:
            transcript = state.recorder.transcript
            click.echo(f"Saved as session {transcript.id} ({transcript.path}); "
                       f"`mylm chat --session {transcript.id}` resumes it.", err=True)
        return
    path = os.path.expanduser(target)
    text = state.redactor.redact(conversation_markdown(state.history))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        click.echo(f"{target} already exists; choose another name.", err=True)
        return
    except OSError as error:
        click.echo(f"cannot write {target}: {error.strerror}", err=True)
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    click.echo(f"Wrote {counted(len(state.history), 'message')} to {target}.", err=True)


def enable_line_editing(redactor: Redactor) -> None:
    """Arrow keys, Ctrl-R and a history kept between chats (owner-only, in mylm's data dir)."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input still works
        return
    from ..core.paths import data_dir
    from ..sessions import private_dir

    try:
        path = private_dir(data_dir()) / "chat_history"
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        readline.read_history_file(path)
    except OSError:
        return
    readline.set_history_length(1000)
    import atexit

    atexit.register(_save_history, readline, str(path), redactor)


def _save_history(readline: Any, path: str, redactor: Redactor) -> None:
    # Typed lines can hold a pasted key: the history file is redacted like every other sink.
    for index in range(readline.get_current_history_length()):
        item = readline.get_history_item(index + 1)
        if item and redactor.redact(item) != item:
            readline.replace_history_item(index, redactor.redact(item))
    try:
        readline.write_history_file(path)
    except OSError:
        pass
