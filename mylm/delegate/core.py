"""The delegate core every front end shares (`mylm mcp`, `mylm a2a`, `mylm acp`): a run's workspace held, its
approval hook, the bridge from that hook (called in the run's worker thread) to a front end that asks someone
over its protocol, and the cancel token that stops the run and its command.

A front end never builds a permission hook or a cancel path of its own: it hands `DelegateService.execute` a
`RunSetup` (who answers the policy's questions, the session's "always" set, tools to swap in), and turns the
run's events into its own notifications. A fix to confinement, cancellation or redaction lands here once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import stat
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.cancel import CancelToken
from ..core.errors import CancelledError, WorkspaceRefusedError
from ..core.types import Message, Permission, ToolCall

if TYPE_CHECKING:
    from ..agent.config import PermissionHook
    from ..approval import Answer, ApprovalPolicy, Decision
    from ..tools.base import Tool


@dataclass(frozen=True)
class Question:
    """A call the approval policy would ask a person about, as a front end shows it."""

    call: ToolCall
    decision: Decision


#: Asks someone over the front end's protocol and returns their answer (cancelled when the run is). An `async def`:
#: its coroutine is handed to the loop with `asyncio.run_coroutine_threadsafe`, which takes nothing else.
Ask = Callable[[Question], Coroutine[Any, Any, "Answer"]]
#: Swaps tools for a run (an editor's file and terminal access stand in for mylm's own).
ToolSwap = Callable[[list["Tool"]], list["Tool"]]


@dataclass(frozen=True)
class RunSetup:
    """What a front end adds to a run. The defaults are `mylm mcp`'s: nobody to ask (the policy's questions
    become refusals the model reads), mylm's own tools, a fresh conversation."""

    #: Who answers the policy's questions (None: nobody, so they are refused).
    ask: Ask | None = None
    #: The tools approved "always" (a session's: it outlives one run).
    always: set[str] = field(default_factory=set)
    #: Replaces the workspace tools (None: mylm's own).
    tools: ToolSwap | None = None
    #: Whether the commands run by mylm's sandbox (False: they run elsewhere, e.g. an editor's terminal, so
    #: the policy asks before every one: nothing holds a "read" to reading).
    confined_commands: bool = True
    #: The conversation the run continues.
    history: Sequence[Message] = ()


@dataclass(frozen=True)
class HeldWorkspace:
    """A workspace resolved once and held open: a directory descriptor, and the identity (device, inode) of
    the directory the request was checked against. Every call is refused once the path no longer names that
    directory (another task swapped it for a link), so a run never follows a swapped workspace out."""

    path: Path
    fd: int
    device: int
    inode: int

    @classmethod
    def open(cls, path: Path) -> HeldWorkspace:
        """Hold `path` (already checked by `Bounds`); WorkspaceRefusedError if it cannot be opened."""
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))
        except OSError as error:
            raise WorkspaceRefusedError(f"workspace {str(path)!r} cannot be opened: {error.strerror}") from None
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode):  # pragma: no cover - O_DIRECTORY refuses it first
            os.close(fd)
            raise WorkspaceRefusedError(f"workspace {str(path)!r} is not a directory")
        return cls(path, fd, info.st_dev, info.st_ino)

    def unchanged(self) -> bool:
        """Whether the path still names the held directory (without following a link put in its place)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == (self.device, self.inode)

    def close(self) -> None:
        """Release the descriptor."""
        try:
            os.close(self.fd)
        except OSError:
            pass


@dataclass
class RunHooks:
    """One run's seams, made by the service and handed to the agent factory: the permission hook (from the
    approval policy the factory builds) and the tools (after the front end's swap)."""

    setup: RunSetup
    workspace: HeldWorkspace | None
    cancel: CancelToken
    loop: asyncio.AbstractEventLoop

    def permission(self, policy: ApprovalPolicy) -> PermissionHook:
        """The run's hook: the approval policy, asking through the front end (or refusing when nobody can be
        asked), behind the check that the workspace is still the directory that was checked."""
        from dataclasses import replace

        from ..approval import Approver

        if not self.setup.confined_commands:
            policy = replace(policy, command_sandbox=False)
        approver = Approver(policy, self._prompt if self.setup.ask is not None else None, self.setup.always)
        held = self.workspace

        def hook(call: ToolCall, tool: Tool) -> Permission:
            if held is not None and not held.unchanged():
                return Permission.deny(
                    f"the workspace {held.path} was replaced while this run worked in it (it no longer names the "
                    "directory the run was given), so no call runs; stop and report this"
                )
            return approver(call, tool)

        return hook

    def tools(self, tools: list[Tool]) -> list[Tool]:
        """The run's tools, after the front end's swap."""
        return self.setup.tools(tools) if self.setup.tools is not None else tools

    def _prompt(self, call: ToolCall, decision: Decision) -> Answer:
        """Called by the Approver in the run's worker thread: ask on the event loop, wait for the answer, and
        give up at once when the run is cancelled (the question is withdrawn, the run stops)."""
        assert self.setup.ask is not None
        future = asyncio.run_coroutine_threadsafe(self.setup.ask(Question(call, decision)), self.loop)
        unregister = self.cancel.on_cancel(future.cancel)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise CancelledError("cancelled while waiting for an approval") from None
        finally:
            unregister()

