"""The ACP face of the delegate (`mylm acp`) on the `agent-client-protocol` SDK: an editor (Zed, a JetBrains IDE,
a Neovim or Emacs plugin) drives mylm's agent over stdio.

Each session is a workspace (the `cwd` the editor names) and a saved session its prompts are appended to.
`session/prompt` is one delegated run: the model's text and reasoning stream as message and thought chunks,
every call is a `tool_call` (its kind, locations and, for a write or an edit, a diff) followed by
`tool_call_update`s with its status and output. The approval policy's questions are `session/request_permission`
(allow once, allow always for this session, reject); `session/cancel` stops the run and its command. When the
editor advertises `fs` and `terminal`, the file tools and commands go through it (`mylm.delegate.editor`).

Imported only by `mylm acp` (the SDK is the optional `acp` extra)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Agent, RequestError, run_agent
from acp.helpers import (
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    tool_terminal_ref,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ToolCallLocation,
    ToolCallUpdate,
    ToolKind,
)
from acp.schema import StopReason as AcpStopReason

from .. import __version__
from ..approval import Answer
from ..core.errors import MylmError
from ..core.types import (
    ApprovalEvent,
    Event,
    Message,
    ReasoningEvent,
    StepCompleteEvent,
    StopReason,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from ..tools.paths import Workspace
from .core import Question, RunSetup
from .editor import EditorAccess
from .service import DelegateService

logger = logging.getLogger("mylm.acp")

#: The kind of each builtin tool, as an editor groups and draws calls.
KINDS: dict[str, ToolKind] = {"read_file": "read", "list_dir": "read", "write_file": "edit", "edit_file": "edit",
         "execute_command": "execute", "search_memory": "search", "search_files": "search", "read_output": "read"}
#: How a run's end reads to the editor (an error or a timeout ends the turn; its line is said as a message).
STOPS: dict[StopReason, AcpStopReason] = {
    StopReason.MAX_TOKENS: "max_tokens", StopReason.MAX_ITERATIONS: "max_turn_requests",
    StopReason.CANCELLED: "cancelled"}
OPTIONS = (PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
           PermissionOption(option_id="allow_always", name="Allow always (this session)", kind="allow_always"),
           PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"))


@dataclass
class SessionState:
    """One editor session: its workspace, its saved session, its conversation, its "always" tools, its run."""

    id: str
    cwd: Path
    saved: str | None
    history: tuple[Message, ...] = ()
    always: set[str] = field(default_factory=set)
    running: asyncio.Task[Any] | None = None
    turn: int = 0
    #: The editor-visible id of the call being run (tool calls are numbered per prompt).
    current: str | None = None


class DelegateAgent:
    """The ACP agent: sessions of delegated runs of `service`."""

    def __init__(self, service: DelegateService) -> None:
        self.service = service
        self.sessions: dict[str, SessionState] = {}
        self.client: Any = None
        self.capabilities: Any = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> InitializeResponse:
        self.capabilities = client_capabilities
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=self.service.sessions is not None,
                                                 prompt_capabilities=PromptCapabilities(embedded_context=True)),
            agent_info=Implementation(name="mylm", title="mylm", version=__version__),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        workspace = self._workspace(cwd)
        saved = None
        if self.service.sessions is not None:
            saved = await asyncio.to_thread(self.service.sessions.start, workspace, "acp session")
        state = SessionState(saved or uuid.uuid4().hex, workspace, saved)
        self.sessions[state.id] = state
        return NewSessionResponse(session_id=state.id)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           **kwargs: Any) -> LoadSessionResponse:
        workspace = self._workspace(cwd)
        if self.service.sessions is None:
            raise RequestError.invalid_params({"details": "this agent does not save sessions (--no-save)"})
        try:
            saved = await asyncio.to_thread(self.service.sessions.load, session_id)
        except MylmError as error:
            raise RequestError.resource_not_found(session_id) from error
        state = SessionState(session_id, workspace, session_id, history=saved.history)
        self.sessions[session_id] = state
        for message in saved.history:  # the conversation replayed, as the protocol asks, before the answer
            text = self.service.redactor.redact(message.content)
            update = update_user_message_text(text) if message.role == "user" else update_agent_message_text(text)
            await self.client.session_update(session_id=session_id, update=update)
        return LoadSessionResponse()

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> None:
        return None

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        state = self.sessions.get(session_id)
        if state is not None and state.running is not None:
            state.running.cancel()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        state = self._session(session_id)
        if state.running is not None and not state.running.done():
            raise RequestError.invalid_request({"details": "a prompt is already running in this session"})
        try:
            request = self.service.request(_prompt_text(prompt), workspace=str(state.cwd), client_roots=None)
        except MylmError as error:
            raise RequestError.invalid_params({"details": self.service.redactor.redact(str(error))}) from None
        state.turn += 1
        setup = RunSetup(ask=lambda q: self._ask(state, q), always=state.always, history=state.history,
                         tools=self._editor_tools(state), confined_commands=not self._can("terminal"))
        run = asyncio.create_task(self.service.execute(request, "acp", setup, lambda e: self._relay(state, e),
                                                       session=state.saved))
        state.running = run
        await asyncio.wait([run])  # not `await run`: the run's cancellation is not this request's
        state.running = None
        if run.cancelled():
            return PromptResponse(stop_reason="cancelled")
        try:
            finished = run.result()
        except MylmError as error:
            raise RequestError.internal_error({"details": self.service.redactor.redact(str(error))}) from None
        state.history = finished.result.history
        reason = finished.result.stop_reason
        if reason in (StopReason.ERROR, StopReason.TIMEOUT):
            line = f"\n\n[mylm: the run ended ({reason.value}): {finished.report.error or 'no answer'}]"
            await self.client.session_update(session_id=state.id, update=update_agent_message_text(line))
        return PromptResponse(stop_reason=STOPS.get(reason, "end_turn"))

    # ------------------------------------------------------------------------------------- the run's events

    async def _relay(self, state: SessionState, event: Event) -> None:
        """Each event as the editor's session update."""
        redact = self.service.redactor.redact
        update: Any = None
        if isinstance(event, TextEvent) and event.text:
            update = update_agent_message_text(event.text)
        elif isinstance(event, ReasoningEvent) and event.text:
            update = update_agent_thought_text(event.text)
        elif isinstance(event, ToolCallEvent):
            state.current = f"{state.turn}-{event.call.id}"
            arguments = dict(event.call.arguments)
            update = start_tool_call(
                state.current, _title(event.call.name, arguments), kind=KINDS.get(event.call.name, "other"),
                status="pending", locations=self._locations(state, arguments),
                content=self._diff(state, event.call.name, arguments), raw_input=json.loads(redact(json.dumps(
                    arguments, ensure_ascii=False, default=str))))
        elif isinstance(event, ApprovalEvent) and state.current is not None:
            update = (update_tool_call(state.current, status="in_progress") if event.allowed else
                      update_tool_call(state.current, status="failed",
                                       content=[tool_content(text_block(redact(event.reason)))]))
        elif isinstance(event, ToolResultEvent) and state.current is not None:
            update = update_tool_call(state.current, status="failed" if event.is_error else "completed",
                                      content=[tool_content(text_block(redact(event.output)))],
                                      raw_output={"output": redact(event.output), "seconds": round(event.duration, 3)})
        elif isinstance(event, StepCompleteEvent) and event.status == "interrupted" and state.current is not None:
            update = update_tool_call(state.current, status="failed")
        if update is not None:
            await self.client.session_update(session_id=state.id, update=update)

    async def _ask(self, state: SessionState, question: Question) -> Answer:
        """The policy's question as `session/request_permission`; the editor's choice is the answer."""
        call, decision = question.call, question.decision
        options = [o for o in OPTIONS if decision.rememberable or o.kind != "allow_always"]
        details = f"\n{decision.details}" if decision.details else ""
        tool_call = ToolCallUpdate(
            tool_call_id=state.current or call.id, title=decision.summary, kind=KINDS.get(call.name, "other"),
            status="pending", content=[tool_content(text_block(f"{decision.reason}{details}"))])
        response = await self.client.request_permission(session_id=state.id, tool_call=tool_call, options=options)
        chosen = getattr(response.outcome, "option_id", None)
        if chosen == "allow_always":
            return Answer("always")
        if chosen == "allow_once":
            return Answer("yes")
        return Answer("no", "" if chosen == "reject_once" else "the editor withdrew the question")

    # ------------------------------------------------------------------------------------------- helpers

    def _editor_tools(self, state: SessionState) -> Any:
        fs = getattr(self.capabilities, "fs", None)
        access = EditorAccess(
            self.client, state.id, asyncio.get_running_loop(), read=bool(getattr(fs, "read_text_file", False)),
            write=bool(getattr(fs, "write_text_file", False)), terminal=self._can("terminal"),
            current_call=lambda: state.current, show_terminal=lambda call, terminal: self.client.session_update(
                session_id=state.id, update=update_tool_call(call, content=[tool_terminal_ref(terminal)])))
        if not (access.read or access.write or access.terminal):
            return None
        return lambda tools: access.swap(tools, Workspace(state.cwd))

    def _can(self, capability: str) -> bool:
        return bool(getattr(self.capabilities, capability, False))

    def _workspace(self, cwd: str) -> Path:
        if not os.path.isabs(cwd):
            raise RequestError.invalid_params({"details": f"cwd must be an absolute path, not {cwd!r}"})
        try:
            return self.service.bounds.workspace(cwd, None)
        except MylmError as error:
            raise RequestError.invalid_params({"details": str(error)}) from None

    def _session(self, session_id: str) -> SessionState:
        state = self.sessions.get(session_id)
        if state is None:
            raise RequestError.resource_not_found(session_id)
        return state

    def _locations(self, state: SessionState, arguments: dict[str, Any]) -> list[ToolCallLocation] | None:
        path = arguments.get("path")
        if not isinstance(path, str):
            return None
        line = arguments.get("offset") if isinstance(arguments.get("offset"), int) else None
        return [ToolCallLocation(path=str(state.cwd / path) if not os.path.isabs(path) else path, line=line)]

    def _diff(self, state: SessionState, name: str, arguments: dict[str, Any]) -> list[Any] | None:
        """A write's diff against the file as it is on disk (the editor may hold a newer buffer: it shows its
        own), an edit's as the replaced piece."""
        path = arguments.get("path")
        if not isinstance(path, str):
            return None
        absolute = str(state.cwd / path) if not os.path.isabs(path) else path
        if name == "write_file":
            try:
                old: str | None = Workspace(state.cwd).root.joinpath(Workspace(state.cwd).resolve(path)).read_text(
                    encoding="utf-8", errors="replace")
            except (OSError, MylmError):
                old = None
            return [tool_diff_content(absolute, str(arguments.get("content", "")), old)]
        if name == "edit_file":
            return [tool_diff_content(absolute, str(arguments.get("new", "")), str(arguments.get("old", "")))]
        return None


def _title(name: str, arguments: dict[str, Any]) -> str:
    """A call's one-line title."""
    if name == "execute_command":
        return f"Run `{' '.join(str(arguments.get('command', '')).split())[:120]}`"
    if "path" in arguments:
        verb = {"read_file": "Read", "write_file": "Write", "edit_file": "Edit", "list_dir": "List",
                "search_files": "Search"}.get(name, name)
        return f"{verb} {arguments['path']}"
    return name


def _prompt_text(blocks: list[Any]) -> str:
    """The prompt's text: its text blocks, and the text of resources the editor embedded (a file, a selection)."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is not None:
                parts.append(f"Context from {resource.uri}:\n{text}")
        elif kind == "resource_link":
            parts.append(f"(see {block.uri})")
    return "\n\n".join(parts)


async def serve(service: DelegateService) -> None:
    """Speak ACP on this process's stdin and stdout until the editor closes them."""
    # The SDK's `Agent` Protocol lists every method of the protocol; its router answers method-not-found for those
    # an agent leaves out (session lists, config options, forks...), so this one implements only what it serves.
    await run_agent(cast(Agent, DelegateAgent(service)))
