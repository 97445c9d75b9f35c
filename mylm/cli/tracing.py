"""Tracing the CLI's runs: the telemetry from the settings (None without an endpoint), and one trace per run."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import click

if TYPE_CHECKING:
    from opentelemetry.trace import Link

    from ..agent import Agent
    from ..config import Settings
    from ..redact import Redactor
    from ..telemetry.tracing import BatchTrace, RunTrace, Telemetry


def otel_option(command: Any) -> Any:
    """`--otel URL`: export a trace of every run (as OTEL_EXPORTER_OTLP_ENDPOINT does)."""
    return click.option(
        "--otel", "otel_endpoint", metavar="URL",
        help="Export a trace of every run to this OTLP/HTTP endpoint [env: OTEL_EXPORTER_OTLP_ENDPOINT].",
    )(command)


def open_telemetry(settings: Settings, redactor: Redactor, endpoint: str | None) -> Telemetry | None:
    """The telemetry for this command, or None (nothing of OpenTelemetry imported) when no endpoint is set."""
    from ..telemetry import configure

    return configure(endpoint, redactor=redactor, capture_content=settings.otel_capture_content)


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
    sandbox: str | None, agent: Agent | None = None, links: Sequence[Link] = (),
) -> RunTrace:
    """Start the trace of one run; with `agent`, its permission hook is watched (approvals become events)."""
    trace = telemetry.run(command=command, prompt=prompt, model=settings.model, system=system_of(settings),
                          max_tokens=settings.max_tokens, workspace=workspace, sandbox=sandbox, links=links)
    if agent is not None:
        agent.permission = trace.permission(agent.permission)
    return trace


@contextmanager
def batch_trace(telemetry: Telemetry | None, tasks: int) -> Iterator[BatchTrace | None]:
    """The batch's span while the block runs (None without telemetry); each task's trace links to it."""
    if telemetry is None:
        yield None
        return
    with telemetry.batch(tasks=tasks) as traced:
        yield traced
