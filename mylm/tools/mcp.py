"""Tools from Model Context Protocol servers over stdio, via the official `mcp` SDK (extra `mylm[mcp]`).

The SDK is asynchronous and mylm's tools are not, so the servers live on one background event-loop thread
owned by `McpServers`; each tool call is submitted to it and waited for with the run's deadline and cancel
token. The SDK is imported only when a server is started, so `import mylm.tools` stays cheap.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import re
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from .._version import install_command
from ..core.cancel import remaining
from ..core.errors import CancelledError, ConfigError, ToolError
from ..core.redact import redact
from .base import Risk, Tool, ToolContext

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")
_KEYS = {"command", "args", "env", "cwd", "risk", "timeout", "startup_timeout"}
_CONTEXT = "_mylm_context"
_MAX_DESCRIPTION = 2000
#: How long a server that did not start may take to be stopped (the SDK waits 2 s after closing its stdin,
#: then kills the process tree).
_ABANDON_WAIT = 5.0


@dataclass(frozen=True)
class McpServerConfig:
    """One `[mcp.servers.NAME]` table: how to start the server and how far to trust its tools."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    #: Added to the SDK's minimal environment (HOME, PATH, USER, ...); mylm's own keys are never passed.
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    #: The risk of every tool of this server; "execute" (ask before each call) unless the user says less.
    risk: Risk = "execute"
    #: Seconds one call may take (also bounded by the run's deadline).
    timeout: float = 60.0
    startup_timeout: float = 30.0


def parse_mcp_config(section: Mapping[str, Any]) -> list[McpServerConfig]:
    """Read the config file's `[mcp]` table (`[mcp.servers.NAME]` sub-tables); mistakes are `ConfigError`s."""
    servers = section.get("servers", {})
    if not isinstance(servers, Mapping):
        raise ConfigError("[mcp.servers] must be a table of servers, e.g. [mcp.servers.time]")
    configs = []
    for name, table in servers.items():
        where = f"[mcp.servers.{name}]"
        if not _NAME.match(str(name)):
            raise ConfigError(f"{where}: a server name may only use letters, digits, '_' and '-'")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table")
        unknown = sorted(set(table) - _KEYS)
        if unknown:
            known = ", ".join(sorted(_KEYS))
            raise ConfigError(f"{where} has unknown key(s) {', '.join(unknown)}; known: {known}")
        command = table.get("command")
        args = table.get("args", [])
        env = table.get("env", {})
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"{where} needs command = \"program to run\"")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{where} args must be a list of strings")
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in [*env, *env.values()]):
            raise ConfigError(f"{where} env must be a table of strings")
        risk = table.get("risk", "execute")
        if risk not in ("read", "write", "execute"):
            raise ConfigError(f"{where} risk must be \"read\", \"write\" or \"execute\"")
        numbers = {}
        for key, default in (("timeout", 60.0), ("startup_timeout", 30.0)):
            value = table.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where} {key} must be a positive number of seconds")
            numbers[key] = float(value)
        cwd = table.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigError(f"{where} cwd must be a string")
        configs.append(McpServerConfig(str(name), command, tuple(args), dict(env), cwd, risk, **numbers))
    return configs


class _Server:
    """One running server: its session, its tools, and the event that ends it."""

    def __init__(self, config: McpServerConfig, errlog: TextIO) -> None:
        self.config = config
        self.errlog = errlog
        self.session: Any = None
        self.tools: list[Any] = []
        # Bound to the loop on first use (Python 3.10+), so it can be made here, on the caller's thread.
        self.stop = asyncio.Event()
        self.failure: str = ""
        #: The task that owns the server (set when it starts), cancelled if the server does not start in time.
        self.task: asyncio.Task[None] | None = None

    def stderr_tail(self) -> str:
        try:
            self.errlog.flush()
            self.errlog.seek(0)
            text = self.errlog.read()[-1500:].strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends with: {text}" if text else ""


class _SdkNotes(logging.Handler):
    """Keeps the MCP SDK's log records as short lines (a server printing non-JSON makes it log a traceback,
    which Python's last-resort handler would print on mylm's terminal); failures quote the last few."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.notes: collections.deque[str] = collections.deque(maxlen=3)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            lines = [line.strip() for line in str(record.exc_info[1]).splitlines() if line.strip()]
            text += f" ({(lines[1] if len(lines) > 1 else lines[0] if lines else '')[:200]})"
        self.notes.append(text)

    def tail(self) -> str:
        return f"; the MCP SDK said: {' | '.join(self.notes)}" if self.notes else ""


class McpServers:
    """The configured MCP servers and their tools; a context manager that stops the servers on exit."""

    def __init__(self, configs: Sequence[McpServerConfig]) -> None:
        self.configs = list(configs)
        self.tools: list[Tool] = []
        #: Server name → why it could not start (empty when all started).
        self.errors: dict[str, str] = {}
        self._servers: list[_Server] = []
        self._owners: list[concurrent.futures.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._notes = _SdkNotes()

    def __enter__(self) -> McpServers:  # noqa: PYI034 - Python 3.10 has no typing.Self
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, *, deadline: float | None = None) -> list[Tool]:
        """Start every server, list its tools, and return them; a server that fails is noted in `errors`.
        Each server gets its `startup_timeout`, cut to what is left before `deadline` (the run's); one that
        does not answer in time is stopped, its process tree killed, before this returns.

        Idempotent: `open_mcp_servers()` starts them, and entering the result as a context manager must not
        start a second set."""
        if not self.configs or self._loop is not None:
            return self.tools
        try:
            import mcp  # noqa: F401 - only to say clearly what is missing
        except ImportError:
            raise ConfigError(
                f"MCP servers are configured, but the MCP SDK is not installed: {install_command('mcp')}"
            ) from None
        logging.getLogger("mcp").addHandler(self._notes)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mylm-mcp", daemon=True)
        self._thread.start()
        pending = []
        for config in self.configs:
            # The server's stderr goes to a private file, not mylm's terminal; its tail explains failures.
            errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            server = _Server(config, errlog)
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            owner = asyncio.run_coroutine_threadsafe(self._serve(server, ready), self._loop)
            self._servers.append(server)
            self._owners.append(owner)
            pending.append((server, ready))
        for server, ready in pending:
            limit = max(min(server.config.startup_timeout, remaining(deadline)), 0.0)
            try:
                ready.result(timeout=limit)
            except concurrent.futures.TimeoutError:
                cut = " (the run's time limit)" if limit < server.config.startup_timeout else ""
                self.errors[server.config.name] = (
                    f"did not start within {limit:.3g} s{cut}{server.stderr_tail()}{self._notes.tail()}"
                )
                self._abandon(server)
                continue
            except Exception as error:  # noqa: BLE001 - any start failure is reported per server
                problem = f"{_message(error)}{server.stderr_tail()}{self._notes.tail()}"
                self.errors[server.config.name] = problem
                continue
            self.tools.extend(self._wrap(server, s) for s in server.tools if _TOOL_NAME.match(s.name))
        return self.tools

    async def _serve(self, server: _Server, ready: concurrent.futures.Future[None]) -> None:
        """Own one server for its whole life: the SDK's context managers must enter and exit in one task."""
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        server.task = asyncio.current_task()
        config = server.config
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env) or None, cwd=config.cwd
        )
        try:
            async with stdio_client(params, errlog=server.errlog) as (read, write), ClientSession(
                read, write
            ) as session:
                await session.initialize()
                server.tools = await _list_tools(session)
                server.session = session
                ready.set_result(None)
                await server.stop.wait()
        except Exception as error:  # noqa: BLE001 - reported to whoever waits, then the task ends
            server.failure = _message(error)
            if not ready.done():
                ready.set_exception(error)
        finally:
            server.session = None
            if not ready.done():
                ready.set_exception(RuntimeError("the server was stopped while starting"))

    def _wrap(self, server: _Server, spec: Any) -> Tool:
        config = server.config
        schema = _field(spec, "input_schema", "inputSchema") or {"type": "object", "properties": {}}
        about = (spec.description or spec.name).strip()[:_MAX_DESCRIPTION]

        def call(_mylm_context: ToolContext | None = None, **arguments: Any) -> str:
            return self._call(server, spec.name, arguments, _mylm_context or ToolContext())

        return Tool(
            name=f"{config.name}.{spec.name}",
            description=f"{about} (from the MCP server '{config.name}')",
            parameters=dict(schema),
            function=call,
            risk=config.risk,
            context_param=_CONTEXT,
        )

    def _call(self, server: _Server, name: str, arguments: dict[str, Any], context: ToolContext) -> str:
        label = f"MCP server '{server.config.name}'"
        session = server.session
        if session is None or self._loop is None:
            why = server.failure or "it was stopped"
            raise ToolError(f"{label} is not running ({why}{server.stderr_tail()})")
        limit = context.time_left(server.config.timeout)
        if limit <= 0:
            raise ToolError("no time is left in this run to call a tool")
        future = asyncio.run_coroutine_threadsafe(session.call_tool(name, arguments), self._loop)
        def abort() -> None:
            future.cancel()

        unregister = context.cancel.on_cancel(abort) if context.cancel is not None else (lambda: None)
        try:
            result = future.result(timeout=limit)
        except concurrent.futures.CancelledError:
            raise CancelledError(f"cancelled while waiting for {label}") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolError(f"{label} did not answer within {limit:g} s") from None
        except Exception as error:  # noqa: BLE001 - protocol errors, a dead server: tell the model
            raise ToolError(redact(f"{label} failed: {_message(error)}{server.stderr_tail()}")) from None
        finally:
            unregister()
        # An MCP server's answer is tool output like any other: it reaches the model only redacted.
        text, is_error = render_result(result)
        text = redact(text)
        if is_error:
            raise ToolError(text or f"{label} reported an error without a message")
        return text

    def _abandon(self, server: _Server) -> None:
        """Cancel a server's task while it is still starting (stuck in `initialize`, say) and wait while the
        SDK closes its stdin and kills its process tree, so that nothing of it outlives the start."""
        if self._loop is None:
            return

        async def settle() -> None:
            task = server.task
            if task is not None and not task.done():
                task.cancel()  # the SDK's clean-up runs in its `finally`, shielded from the cancellation
                await asyncio.wait([task], timeout=_ABANDON_WAIT)

        try:
            asyncio.run_coroutine_threadsafe(settle(), self._loop).result(timeout=_ABANDON_WAIT + 1)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            pass

    def _stop(self, server: _Server) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(server.stop.set)

    def close(self) -> None:
        """Stop every server (the SDK closes stdin, then terminates and kills its process tree)."""
        if self._loop is None:
            return
        for server in self._servers:
            self._stop(server)
        for owner in self._owners:
            try:
                owner.result(timeout=10)
            except Exception:  # noqa: BLE001 - a server that stopped badly is not the caller's problem
                owner.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()
        for server in self._servers:
            server.errlog.close()
        logging.getLogger("mcp").removeHandler(self._notes)
        self._loop = None


async def _list_tools(session: Any) -> list[Any]:
    result = await session.list_tools()
    tools = list(result.tools)
    cursor = _field(result, "next_cursor", "nextCursor")
    for _ in range(50):  # a server that pages forever must not hang the start
        if not cursor:
            break
        try:
            from mcp.types import PaginatedRequestParams

            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        except (ImportError, TypeError):  # SDK 1.x takes the cursor directly
            result = await session.list_tools(cursor=cursor)
        tools.extend(result.tools)
        cursor = _field(result, "next_cursor", "nextCursor")
    return tools


def _field(obj: Any, *names: str) -> Any:
    """The first attribute present (SDK 2.x uses snake_case, 1.x camelCase)."""
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _message(error: BaseException) -> str:
    # anyio task groups wrap failures in exception groups (a builtin from Python 3.11 on).
    nested = getattr(error, "exceptions", None)
    if isinstance(nested, (list, tuple)) and nested:
        return "; ".join(_message(e) for e in nested)
    return str(error) or type(error).__name__


def render_result(result: Any) -> tuple[str, bool]:
    """The text of a `tools/call` result (other content described, not dumped) and whether it is an error."""
    parts: list[str] = []
    for item in _field(result, "content") or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            size = len(getattr(item, "data", "") or "") * 3 // 4
            mime = _field(item, "mime_type", "mimeType") or "unknown type"
            parts.append(f"[{kind} content ({mime}, about {size:,} bytes): not shown]")
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[binary resource {resource.uri}: not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {item.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content: not shown]")
    structured = _field(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=2, default=str))
    return "\n".join(parts), bool(_field(result, "is_error", "isError"))


def open_mcp_servers(
    section: Mapping[str, Any], *, strict: bool = True, deadline: float | None = None
) -> McpServers:
    """Parse the `[mcp]` config table and start its servers (within `deadline`, the run's); with `strict`, a
    server that fails is a `ConfigError` (naming it and quoting its stderr) after the others are stopped."""
    servers = McpServers(parse_mcp_config(section))
    servers.start(deadline=deadline)
    if strict and servers.errors:
        servers.close()
        problems = "; ".join(f"'{name}' {why}" for name, why in servers.errors.items())
        raise ConfigError(f"MCP server could not start: {problems}")
    return servers
