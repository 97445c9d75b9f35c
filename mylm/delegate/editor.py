"""The editor's file and terminal access standing in for mylm's own (`mylm acp`, when the client advertises the
`fs` and `terminal` capabilities): `read_file` sees the editor's buffers, unsaved text included, `write_file`
and `edit_file` write through it (the editor shows and can undo the change), and `execute_command` runs in the
editor's terminal.

The tools keep their names, descriptions and schemas, so the model sees no difference, and every call is still
judged by the approval policy first; paths are confined to the session's workspace as mylm's own tools confine
them (`..`, absolute paths elsewhere and links out are refused). Commands in the editor's terminal are not in
mylm's sandbox, so the policy asks before each one (`RunSetup.confined_commands` is False)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..core.errors import CancelledError, ToolError
from ..core.redact import redact
from ..core.words import counted
from ..tools.base import Tool, ToolContext
from ..tools.paths import Workspace

T = TypeVar("T")
#: The most output a command's terminal keeps for mylm (the editor shows all of it).
OUTPUT_LIMIT = 256 * 1024


@dataclass(frozen=True)
class EditorAccess:
    """What the client lets the agent use, and how to reach it: `client` is the ACP connection's client side
    (`read_text_file`, `write_text_file`, `create_terminal`, ...), called on `loop` from the run's thread."""

    client: Any
    session_id: str
    loop: asyncio.AbstractEventLoop
    read: bool = False
    write: bool = False
    terminal: bool = False
    #: The id of the call being run (for the terminal shown in its tool call), set by the relay.
    current_call: Callable[[], str | None] = lambda: None
    #: Shows a terminal in the call's tool call (the relay sends the update).
    show_terminal: Callable[[str, str], Awaitable[None]] | None = None

    def swap(self, tools: list[Tool], workspace: Workspace) -> list[Tool]:
        """`tools` with the editor's versions of those the client allows."""
        mine = {
            "read_file": self._read_file(workspace) if self.read else None,
            "write_file": self._write_file(workspace) if self.write else None,
            "edit_file": self._edit_file(workspace) if self.read and self.write else None,
            "execute_command": self._execute(workspace) if self.terminal else None,
        }
        return [replace(tool, function=function, context_param="context") if (function := mine.get(tool.name)) else tool
                for tool in tools]

    # ------------------------------------------------------------------------------------------ the tools

    def _read_file(self, ws: Workspace) -> Callable[..., str]:
        def read_file(path: str, offset: int = 1, limit: int = 2000, context: ToolContext | None = None) -> str:
            absolute, rel = _inside(ws, path)
            response = self._call(self.client.read_text_file(session_id=self.session_id, path=absolute,
                                                             line=offset, limit=limit), context)
            text = response.content
            if not text:
                return f"[{rel} is empty]" if offset == 1 else f"[{rel}: nothing at line {offset}]"
            lines = text.splitlines()
            return "\n".join([f"[{rel}: lines {offset}-{offset + len(lines) - 1} (as open in the editor)]",
                              redact(text.rstrip("\n"))])

        return read_file

    def _write_file(self, ws: Workspace) -> Callable[..., str]:
        def write_file(path: str, content: str, context: ToolContext | None = None) -> str:
            absolute, rel = _inside(ws, path)
            self._call(self.client.write_text_file(session_id=self.session_id, path=absolute, content=content),
                       context)
            size = len(content.encode("utf-8", "surrogatepass"))
            lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
            return f"Wrote {counted(size, 'byte')} ({counted(lines, 'line')}) to {rel} (through the editor)."

        return write_file

    def _edit_file(self, ws: Workspace) -> Callable[..., str]:
        def edit_file(path: str, old: str, new: str, context: ToolContext | None = None) -> str:
            absolute, rel = _inside(ws, path)
            text = self._call(self.client.read_text_file(session_id=self.session_id, path=absolute), context).content
            found = text.count(old) if old else 0
            if found != 1:
                where = "does not occur" if found == 0 else f"occurs {found} times"
                raise ToolError(f"`old` {where} in {rel}; copy one exact, unique piece of the file (read it first)")
            self._call(self.client.write_text_file(session_id=self.session_id, path=absolute,
                                                   content=text.replace(old, new, 1)), context)
            return f"Edited {rel} (through the editor): replaced {counted(old.count(chr(10)) + 1, 'line')}."

        return edit_file

    def _execute(self, ws: Workspace) -> Callable[..., str]:
        def execute_command(command: str, timeout: float = 120.0, context: ToolContext | None = None) -> str:
            limit = (context or ToolContext()).time_left(min(max(float(timeout), 0.1), 120.0))
            if limit <= 0:
                raise ToolError("no time is left in this run to execute a command")
            return self._call(self._run_in_terminal(command, str(ws.root), limit), context)

        return execute_command

    async def _run_in_terminal(self, command: str, cwd: str, limit: float) -> str:
        created = await self.client.create_terminal(session_id=self.session_id, command="/bin/sh",
                                                    args=["-c", command], cwd=cwd, output_byte_limit=OUTPUT_LIMIT)
        terminal = created.terminal_id
        call_id = self.current_call()
        stopped = ""
        try:
            if self.show_terminal is not None and call_id is not None:
                await self.show_terminal(call_id, terminal)
            try:
                status = await asyncio.wait_for(
                    self.client.wait_for_terminal_exit(session_id=self.session_id, terminal_id=terminal), limit)
                code, signal = status.exit_code, status.signal
            except asyncio.TimeoutError:
                stopped = f"timed out after {limit:.3g} s and was killed"
                await self.client.kill_terminal(session_id=self.session_id, terminal_id=terminal)
                code, signal = None, None
            output = await self.client.terminal_output(session_id=self.session_id, terminal_id=terminal)
        except asyncio.CancelledError:
            # The run was cancelled: the command must not outlive it.
            await asyncio.shield(self.client.kill_terminal(session_id=self.session_id, terminal_id=terminal))
            raise
        finally:
            await asyncio.shield(self.client.release_terminal(session_id=self.session_id, terminal_id=terminal))
        head = f"exit code {code}" if code is not None else (f"killed by {signal}" if signal else "no exit code")
        cut = "\n[output cut: the terminal kept its last part only]" if output.truncated else ""
        text = f"{head}{' (' + stopped + ')' if stopped else ''}\n{redact(output.output)}{cut}"
        if stopped:
            raise ToolError(text)
        return text

    def _call(self, coroutine: Coroutine[Any, Any, T], context: ToolContext | None) -> T:
        """Run a request to the editor from the run's thread; cancelling the run withdraws it."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        cancel = context.cancel if context is not None else None
        unregister = cancel.on_cancel(future.cancel) if cancel is not None else (lambda: None)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise CancelledError("cancelled") from None
        except ToolError:
            raise
        except Exception as error:  # noqa: BLE001 - the editor refused: the model reads why, in one line
            raise ToolError(f"the editor refused: {_said(error)}") from None
        finally:
            unregister()


def _inside(ws: Workspace, path: str) -> tuple[str, str]:
    """The absolute path the editor is asked for, and the workspace-relative one shown: confined as mylm's own
    tools confine it (EscapeError, a ToolError, when it leads out)."""
    rel = ws.relative(path)
    resolved = ws.resolve(path)  # a link inside that leads out is refused here
    return str(ws.root / resolved), rel


def _said(error: Exception) -> str:
    data = getattr(error, "data", None)
    message = str(error) or type(error).__name__
    if isinstance(data, dict) and data.get("details"):
        message = f"{message} ({data['details']})"
    return " ".join(message.split())[:300]
