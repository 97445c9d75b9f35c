"""Asking the user before a tool changes things: from the terminal itself, so it works when stdin is a pipe."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..approval import ApprovalPolicy, Decision
    from ..core.redact import Redactor
    from ..core.types import Permission, ToolCall
    from ..sandbox import Sandbox
    from ..tools.base import Tool


class Terminal:
    """The user's terminal, opened directly so approvals work even when stdin is a pipe."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def ask(self, question: str) -> str:
        """Show `question` and return the line typed (EOF counts as an empty answer)."""
        self._stream.write(question)
        self._stream.flush()
        try:
            return self._stream.readline().strip()
        except KeyboardInterrupt:
            # The terminal echoed ^C on the question's line; what mylm says next belongs on its own line.
            self._stream.write("\n")
            self._stream.flush()
            raise


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
    """The CLI's permission hook: the approval policy decides, and what it would ask, the user answers here.

    The question is read from the terminal itself, so it works when stdin is a pipe; with no terminal, what
    would ask is refused, and both the user (on stderr) and the model (in the observation) are told why.
    """

    def __init__(
        self,
        *,
        policy: ApprovalPolicy,
        terminal_factory: Callable[[], Terminal | None],
        err: IO[str],
        color: bool,
        redactor: Redactor | None = None,
        scope: str = "this run",
        sandbox: Sandbox | None = None,
    ) -> None:
        self.policy = policy
        self._sandbox = sandbox
        self._terminal_factory = terminal_factory
        self._terminal: Terminal | None = None
        self._opened = False
        self._always: set[str] = set()
        self._err = err
        self._color = color
        self._redactor = redactor
        self._scope = scope

    def __call__(self, call: ToolCall, tool: Tool) -> Permission:
        from ..approval import NO_TERMINAL, decide
        from ..core.cancel import hook_deadline
        from ..core.types import Permission
        from .display import for_terminal

        always = frozenset(self._always)
        decision = decide(call, tool, self.policy, always=always, deadline=hook_deadline.get())
        if decision.action == "allow":
            # Read-only when the policy read it as a read (the sandbox holds it there); else workspace-write.
            return Permission.allow(decision.grant)
        if decision.action == "deny":
            click.echo(f"mylm: refused {for_terminal(call.name)}: {for_terminal(decision.reason)}", err=True)
            return Permission.deny(f"refused by the approval policy: {decision.reason}")
        terminal = self._open()
        if terminal is None:
            click.echo(
                f"mylm: refused {for_terminal(call.name)}: it needs approval ({for_terminal(decision.reason)}) "
                "and there is no terminal to ask (use --yes to allow tools)",
                err=True,
            )
            return Permission.deny(NO_TERMINAL.format(reason=decision.reason))
        return self._ask(terminal, call, tool, decision)

    def _open(self) -> Terminal | None:
        if not self._opened:
            self._terminal, self._opened = self._terminal_factory(), True
        return self._terminal

    def _ask(self, terminal: Terminal, call: ToolCall, tool: Tool, decision: Decision) -> Permission:
        from ..core.types import Permission
        from .display import for_terminal

        # Only exact known secret values are hidden here: a credential-shaped pattern (`TOKEN=...`) can swallow the
        # rest of a command, and the user must see exactly what will run (control characters made visible too).
        redact = self._redactor.redact_known if self._redactor is not None else (lambda text: text)
        summary, details = redact(decision.summary), redact(decision.details)
        lines = [f"mylm wants to {for_terminal(summary)}"]
        if details and details not in summary:
            lines += ["  " + line for line in for_terminal(details).splitlines()]
        if (summary, details) != (decision.summary, decision.details):
            lines.append("  (a secret value of yours is shown as [REDACTED]; the real value is what will be used)")
        lines.append(f"  ({for_terminal(decision.reason)})")
        if self._sandbox is not None and call.name == "execute_command":
            # What it can do once approved: the user's "yes" gives the command write access, nothing more.
            access = self._sandbox.access("workspace-write", self.policy.workspace)
            lines.append(f"  ({for_terminal(access)})")
        always = f" / [a]lways {call.name} {self._scope}" if decision.rememberable else ""
        self._err.flush()
        answer = terminal.ask("\n".join(lines) + f"\nAllow? [y]es / [n]o{always}: ")
        choice = answer.lower()[:1]
        if choice == "y":
            return Permission.allow()
        if choice == "a" and decision.rememberable:
            self._always.add(tool.name)
            return Permission.allow()
        reason = terminal.ask("Reason to give the model (optional): ")
        return Permission.deny(f"the user declined it{': ' + reason if reason else ''}")
