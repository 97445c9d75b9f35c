"""Tracing the CLI's runs: the telemetry from the settings (None without an endpoint), and one trace per run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from opentelemetry.trace import Link

    from ..agent.loop import Agent
    from ..config import Settings
    from ..core.redact import Redactor
    from ..core.types import Event, Message
    from ..telemetry.tracing import BatchTrace, RunTrace, Telemetry
    from .runner import Exchange


def otel_option(command: Any) -> Any:
    """`--otel URL`: export a trace of every run (as OTEL_EXPORTER_OTLP_ENDPOINT does)."""
    return click.option(
        "--otel", "otel_endpoint", metavar="URL|file:PATH",
        help="Export a trace of every run to this OTLP/HTTP endpoint, or append it to a file as OTLP JSON lines "
             "[env: OTEL_EXPORTER_OTLP_ENDPOINT].",
    )(command)


def open_telemetry(settings: Settings, redactor: Redactor, endpoint: str | None) -> Telemetry | None:
    """The telemetry for this command, or None (nothing of OpenTelemetry imported) when no endpoint is set. A
    collector that cannot be reached is one warning, once."""
    from ..telemetry import configure
    from .common import warn

    return configure(endpoint, redactor=redactor, capture_content=settings.otel_capture_content, report=warn)


def system_of(settings: Settings) -> str:
    """The `gen_ai.system` of the configured endpoint: its provider, named or inferred from the URL."""
    if settings.provider:
        return "llama_cpp" if settings.provider == "local" else settings.provider
    try:
        from ..providers.registry import infer_provider

        return infer_provider(settings.base_url)
    except Exception:  # noqa: BLE001 - a label for traces must never stop a run
        return "unknown"


def trace_run(
    telemetry: Telemetry, settings: Settings, *, command: str, prompt: str, workspace: str | None,
    sandbox: str | None, links: Sequence[Link] = (), inherit: bool = False,
) -> RunTrace:
    """Start the trace of one run with the endpoint's model and system."""
    return telemetry.run(command=command, prompt=prompt, model=settings.model, system=system_of(settings),
                         max_tokens=settings.max_tokens, workspace=workspace, sandbox=sandbox, links=links,
                         inherit=inherit)


@contextmanager
def batch_trace(telemetry: Telemetry | None, tasks: int) -> Iterator[BatchTrace | None]:
    """The batch's span while the block runs (None without telemetry); each task's trace links to it."""
    if telemetry is None:
        yield None
        return
    with telemetry.batch(tasks=tasks) as traced:
        yield traced


@dataclass(frozen=True)
class Tracer:
    """Traces each exchange of `ask` or `chat` (one trace per prompt), then exports what is left at `close`."""

    telemetry: Telemetry
    settings: Settings
    command: str
    workspace: str
    sandbox: str | None

    def exchange(
        self, agent: Agent, prompt: str, history: tuple[Message, ...], handle: Callable[[Event], None], *,
        finish: Callable[[], None] | None = None,
    ) -> Exchange:
        """`run_exchange`, traced: the trace sees each event before `handle`."""
        from .runner import run_exchange

        trace = trace_run(self.telemetry, self.settings, command=self.command, prompt=prompt,
                          workspace=self.workspace, sandbox=self.sandbox)

        def both(event: Event) -> None:
            trace(event)
            handle(event)

        ended: list[Exchange] = []
        try:
            ended.append(run_exchange(agent, prompt, history, both, finish=finish))
            return ended[0]
        finally:
            trace.end(ended[0].result if ended else None)

    def close(self) -> None:
        self.telemetry.shutdown()


def make_tracer(settings: Settings, redactor: Redactor, endpoint: str | None, command: str) -> Tracer | None:
    """The tracer of an `ask` or `chat` in the current directory, or None when no endpoint is set."""
    import os

    from .runner import command_sandbox

    telemetry = open_telemetry(settings, redactor, endpoint)
    if telemetry is None:
        return None
    return Tracer(telemetry, settings, command, os.getcwd(), command_sandbox(settings).backend)


def run_traced(
    tracer: Tracer | None, agent: Agent, prompt: str, history: tuple[Message, ...], handle: Callable[[Event], None],
    *, finish: Callable[[], None] | None = None,
) -> Exchange:
    """One exchange (`run_exchange`), traced when there is a tracer."""
    from .runner import run_exchange

    if tracer is None:
        return run_exchange(agent, prompt, history, handle, finish=finish)
    return tracer.exchange(agent, prompt, history, handle, finish=finish)
