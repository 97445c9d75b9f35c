"""The delegate's behaviour, apart from any protocol: check a request, run it, save it, report it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.cancel import CancelToken
from ..core.decoding import clean_text
from ..core.errors import ConfigError
from ..telemetry.observer import RunObserver
from .core import HeldWorkspace, RunHooks, RunSetup
from .runs import (
    AgentFactory,
    Progress,
    ProgressSteps,
    RunReport,
    RunRequest,
    ToolLog,
    drive,
    report,
)
from .workspace import Bounds

if TYPE_CHECKING:
    from ..core.redact import Redactor
    from ..core.types import Event, RunResult
    from .transcripts import RunSessions

#: Builds the observer (telemetry) of one run, given the request and the tool that started it.
ObserverFactory = Callable[[RunRequest, str], RunObserver]
#: Turns each of a run's events into a front end's notifications.
Relay = Callable[["Event"], Awaitable[None]]


@dataclass(frozen=True)
class Finished:
    """How a run ended: the report a client reads, and the result (its conversation, to continue it)."""

    report: RunReport
    result: RunResult


@dataclass(frozen=True)
class DelegateService:
    """Runs delegated tasks: each in its own agent, confined to a checked workspace, within the server's limits
    (a client may lower `max_iterations` and `timeout`, never raise them)."""

    agents: AgentFactory
    bounds: Bounds
    redactor: Redactor
    max_iterations: int
    timeout: float
    sessions: RunSessions | None = None
    #: Whether the server runs what the approval policy would ask about (`--yes`).
    yes: bool = False
    observe: ObserverFactory | None = None

    def request(
        self, prompt: str, *, workspace: str | None, client_roots: Sequence[str] | None,
        max_iterations: int | None = None, timeout: float | None = None,
    ) -> RunRequest:
        """A `run_task` request, checked: a ConfigError or WorkspaceRefusedError says what is wrong."""
        text = clean_text(prompt)[0].strip()
        if not text:
            raise ConfigError("the prompt is empty: say what the task is")
        if max_iterations is not None and not 1 <= max_iterations <= self.max_iterations:
            raise ConfigError(f"max_iterations must be between 1 and {self.max_iterations} (the server's limit)")
        if timeout is not None and not 0 < timeout <= self.timeout:
            raise ConfigError(f"timeout must be more than 0 and at most {self.timeout:g} s (the server's limit)")
        directory = self.bounds.workspace(workspace, client_roots)
        return RunRequest(text, directory, max_iterations, timeout)

    def question(self, question: str) -> RunRequest:
        """An `ask` request: the question, no tools, in the server's directory."""
        text = clean_text(question)[0].strip()
        if not text:
            raise ConfigError("the question is empty")
        return RunRequest(text, self.bounds.default, tools=False)

    async def run(self, request: RunRequest, tool: str, progress: Progress | None = None) -> RunReport:
        """Run `request` to its end (or until the awaiting task is cancelled) and report it (`mylm mcp`'s form:
        nobody asked, progress notifications)."""
        relay = ProgressSteps(progress) if progress is not None else None
        return (await self.execute(request, tool, RunSetup(), relay)).report

    async def execute(
        self, request: RunRequest, tool: str, setup: RunSetup, relay: Relay | None = None,
        *, session: str | None = None,
    ) -> Finished:
        """Run `request` with a front end's `setup`, passing each event to `relay`; the run is saved (appended to
        `session` when given, else a new one). Cancelling the awaiting task stops the run at once: its model
        stream closed, its command's process group killed and reaped, the partial run saved."""
        import asyncio

        import anyio

        held = HeldWorkspace.open(request.workspace) if request.tools else None
        try:
            hooks = RunHooks(setup, held, CancelToken(), asyncio.get_running_loop())
            # Off the event loop: building an agent compiles its grammar and probes the sandbox.
            agent = await anyio.to_thread.run_sync(self.agents, request, hooks)
            log = ToolLog(self.redactor)
            observer = self.observe(request, tool) if self.observe is not None else None

            def on_event(event: Event) -> None:
                log(event)
                if observer is not None:
                    observer(event)

            saved: list[str | None] = []
            ended: list[RunResult] = []

            def on_end(result: RunResult | None) -> None:
                # Also after a cancel: the partial run is traced and saved, like Ctrl-C in `mylm ask`.
                if observer is not None:
                    observer.end(result)
                if result is not None:
                    ended.append(result)
                    saved.append(self._save(request, result, tool, session))

            result = await drive(agent, request.prompt, on_event=on_event, on_end=on_end, relay=relay,
                                 history=setup.history, cancel=hooks.cancel)
        finally:
            if held is not None:
                held.close()
        outcome = report(result, log, session=saved[0] if saved else None,
                         workspace=request.workspace if request.tools else None, redactor=self.redactor)
        return Finished(outcome, result)

    def _save(self, request: RunRequest, result: RunResult, tool: str, session: str | None) -> str | None:
        if self.sessions is None:
            return None
        if session is not None:
            return self.sessions.append(session, result)
        return self.sessions.save(request.prompt, result, request.workspace, tool)

    def transcript(self, session_id: str) -> str:
        """A saved run's transcript (SessionNotFoundError if this server kind saved none by that id)."""
        from ..core.errors import SessionNotFoundError

        if self.sessions is None:
            raise SessionNotFoundError("this server does not save sessions (--no-save)")
        return self.sessions.read(session_id)
