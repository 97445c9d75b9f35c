"""Asking the user before a tool changes things: from the terminal itself, so it works when stdin is a pipe."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from ..redact import Redactor
    from ..tools.base import Tool
    from ..types import Permission, ToolCall


class Terminal:
    """The user's terminal, opened directly so approvals work even when stdin is a pipe."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def ask(self, question: str) -> str:
        """Show `question` and return the line typed (EOF counts as an empty answer)."""
        self._stream.write(question)
        self._stream.flush()
        return self._stream.readline().strip()


def open_terminal() -> Terminal | None:
    """The controlling terminal, or None when there is none (pipes, CI, a detached process)."""
    import io
    import os

    try:
        fd = os.open("/dev/tty", os.O_RDWR | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    # open("/dev/tty", "r+") fails: a read-write buffered file must be seekable, and a terminal is not.
    pair = io.BufferedRWPair(io.FileIO(fd, "r", closefd=False), io.FileIO(fd, "w", closefd=True))
    stream = io.TextIOWrapper(pair, encoding="utf-8", errors="replace", write_through=True)  # type: ignore[type-var]
    return Terminal(stream)


class Approver:
    """The CLI's permission hook: reads run freely; anything else asks the user, or is refused without a terminal."""

    def __init__(
        self,
        *,
        yes: bool,
        terminal_factory: Callable[[], Terminal | None],
        err: IO[str],
        color: bool,
        redactor: Redactor | None = None,
        scope: str = "this run",
    ) -> None:
        self.yes = yes
        self._terminal_factory = terminal_factory
        self._terminal: Terminal | None = None
        self._opened = False
        self._always: set[str] = set()
        self._err = err
        self._color = color
        self._redactor = redactor
        self._scope = scope

    def __call__(self, call: ToolCall, tool: Tool) -> Permission:
        from ..types import Permission

        if tool.risk == "read" or self.yes or tool.name in self._always:
            return Permission.allow()
        terminal = self._open()
        if terminal is None:
            click.echo(
                f"mylm: refused {call.name}: there is no terminal to ask for approval (use --yes to allow tools)",
                err=True,
            )
            return Permission.deny(
                "the user cannot be asked for approval in this session, so the call was refused. "
                "Answer with what you know, or say which command you would need to run."
            )
        return self._ask(terminal, call)

    def _open(self) -> Terminal | None:
        if not self._opened:
            self._terminal, self._opened = self._terminal_factory(), True
        return self._terminal

    def _ask(self, terminal: Terminal, call: ToolCall) -> Permission:
        from ..display import for_terminal, quote_for_terminal
        from ..types import Permission

        redact = self._redactor.redact_value if self._redactor is not None else (lambda value: value)
        # Quoted on one line: a carriage return or escape hiding part of a command shows as \x0d, \x1b.
        lines = [f"mylm wants to run {for_terminal(call.name)}:"]
        lines += [f"  {for_terminal(key)} = {quote_for_terminal(redact(value))}" for key, value in call.arguments.items()]
        self._err.flush()
        answer = terminal.ask("\n".join(lines) + f"\nAllow? [y]es / [n]o / [a]lways {call.name} {self._scope}: ")
        choice = answer.lower()[:1]
        if choice == "y":
            return Permission.allow()
        if choice == "a":
            self._always.add(call.name)
            return Permission.allow()
        reason = terminal.ask("Reason to give the model (optional): ")
        return Permission.deny(f"the user declined it{': ' + reason if reason else ''}")
