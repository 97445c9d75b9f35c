"""One delegated run: build the agent, drive it off the event loop, report progress, stop it on cancel."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.types import (
    Event,
    IterationStartEvent,
    Message,
    RunResult,
    StepCompleteEvent,
    StepStartEvent,
    StopReason,
    ToolCallEvent,
    ToolResultEvent,
)

if TYPE_CHECKING:
    from ..agent.loop import Agent
    from ..core.cancel import CancelToken
    from ..core.redact import Redactor
    from .core import RunHooks

#: After a cancel, how long the run may take to stop its command and reap it before the handler gives up
#: waiting (a bound: a cooperative run stops in milliseconds).
CANCEL_WAIT = 15.0
#: How much of a tool call's arguments the log shows.
ARGUMENTS_SHOWN = 160


@dataclass(frozen=True)
class RunRequest:
    """What a client asked for, checked: the prompt, the workspace, the limits, and whether tools are given."""

    prompt: str
    workspace: Path
    max_iterations: int | None = None
    timeout: float | None = None
    tools: bool = True


class AgentFactory(Protocol):
    """Builds the agent for one run (the CLI composes it exactly as for `mylm ask`), its permission hook and
    tools through the run's `hooks` (None: a check build at start, nothing runs)."""

    def __call__(self, request: RunRequest, hooks: RunHooks | None = None) -> Agent: ...


#: Reports progress to the client: (progress, total, message).
Progress = Callable[[float, "float | None", str], Awaitable[None]]


@dataclass(frozen=True)
class ToolLogEntry:
    """One tool call as the calling agent sees it: what was called, how it ended, how long it took."""

    name: str
    arguments: str
    status: str
    duration: float

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready data."""
        return {"tool": self.name, "arguments": self.arguments, "status": self.status,
                "seconds": round(self.duration, 3)}


@dataclass(frozen=True)
class RunReport:
    """What `run_task` and `ask` return: the answer, why the run ended, and what it did."""

    answer: str
    stop_reason: str
    iterations: int
    tool_calls: tuple[ToolLogEntry, ...] = ()
    session: str | None = None
    workspace: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (the tool result's structured content)."""
        data: dict[str, Any] = {
            "answer": self.answer, "stop_reason": self.stop_reason, "iterations": self.iterations,
            "tool_calls": [entry.to_dict() for entry in self.tool_calls],
        }
        for name in ("session", "workspace", "error"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data


@dataclass
class ToolLog:
    """Collects the short log of tool calls from a run's events (arguments redacted and shortened)."""

    redactor: Redactor | None = None
    entries: list[ToolLogEntry] = field(default_factory=list)
    _arguments: dict[str, tuple[str, str]] = field(default_factory=dict)
    _durations: dict[str, float] = field(default_factory=dict)

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolCallEvent):
            text = json.dumps(dict(event.call.arguments), ensure_ascii=False, default=str)
            if self.redactor is not None:
                text = self.redactor.redact(text)
            if len(text) > ARGUMENTS_SHOWN:
                text = text[: ARGUMENTS_SHOWN - 1] + "…"
            self._arguments[event.call.id] = (event.call.name, text)
        elif isinstance(event, ToolResultEvent):
            self._durations[event.call_id] = event.duration
        elif isinstance(event, StepCompleteEvent):
            name, arguments = self._arguments.pop(event.step_id, ("?", ""))
            self.entries.append(ToolLogEntry(name, arguments, event.status, self._durations.pop(event.step_id, 0.0)))


@dataclass
class ProgressSteps:
    """Turns events into progress notifications that only ever increase: `iteration n/max` at each model
    turn, then the tool being run (each a step closer to the next iteration, never reaching it)."""

    progress: Progress
    _iteration: int = 0
    _total: int = 0
    _step: int = 0

    async def __call__(self, event: Event) -> None:
        if isinstance(event, IterationStartEvent):
            self._iteration, self._total, self._step = event.iteration, event.max_iterations, 0
            await self.progress(float(event.iteration - 1), float(event.max_iterations),
                                f"iteration {event.iteration}/{event.max_iterations}")
        elif isinstance(event, StepStartEvent):
            self._step += 1
            value = self._iteration - 1 + (1 - 0.5 ** self._step)
            await self.progress(value, float(self._total) or None,
                                f"iteration {self._iteration}/{self._total}: running {event.tool_name}")


async def drive(
    agent: Agent,
    prompt: str,
    *,
    on_event: Callable[[Event], None],
    on_end: Callable[[RunResult | None], None],
    relay: Callable[[Event], Awaitable[None]] | None = None,
    history: Sequence[Message] = (),
    cancel: CancelToken | None = None,
) -> RunResult:
    """Run `agent` on `prompt` (after `history`) in a worker thread, passing each event to `on_event` (and the
    front end's `relay`), and the result to `on_end` however the run ends.

    When the awaiting task is cancelled (the client cancelled the request), the run is cancelled at once: its
    model stream is closed and its command's process group killed; the handler waits (shielded, up to
    `CANCEL_WAIT` s) until the run has stopped and reaped it, hands the cancelled result to `on_end` (None if
    it did not stop in time), then the cancellation goes on."""
    import anyio

    events = agent.astream(prompt, history=history, cancel=cancel)
    try:
        async for event in events:
            on_event(event)
            if relay is not None:
                await relay(event)
    except anyio.get_cancelled_exc_class():
        events.cancel()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CANCEL_WAIT):
                async for event in events:
                    on_event(event)
            on_end(events.result)
        raise
    assert events.result is not None
    on_end(events.result)
    return events.result


def report(result: RunResult, log: ToolLog, *, session: str | None, workspace: Path | None,
           redactor: Redactor | None) -> RunReport:
    """The report of a finished run."""
    error = None
    if result.error is not None and result.stop_reason is not StopReason.FINAL_ANSWER:
        error = redactor.redact(str(result.error)) if redactor is not None else str(result.error)
    return RunReport(
        answer=result.final_text, stop_reason=result.stop_reason.value, iterations=result.iterations_used,
        tool_calls=tuple(log.entries), session=session, workspace=str(workspace) if workspace else None,
        error=error,
    )
