"""OpenTelemetry traces of runs, built by watching a run's events (never by threading spans through the loop).

Nothing of OpenTelemetry is imported unless an endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or an explicit URL such as `--otel`): `configure` returns None then, and
callers skip tracing. With one, `configure` gives a `Telemetry` (the `otel` extra):

    telemetry = configure("http://127.0.0.1:4318", redactor=redactor, capture_content=False)
    trace = telemetry.run(command="ask", prompt=prompt, model="qwen3", system="openai")
    stream = agent.stream(prompt)
    for event in stream:
        trace(event)
    trace.end(stream.result)
    telemetry.shutdown()                                     # exports what is left

`telemetry.batch(...)` opens one span that each task's trace links to. `mylm serve` traces each HTTP request
with `serving.ServeTracer(telemetry, ...)`: a server span, and under it the same model-call spans and correction
events a run has.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._version import install_command
from ..core.errors import ConfigError

if TYPE_CHECKING:
    from ..core.redact import Redactor
    from .tracing import Telemetry

#: `--otel file:PATH`: OTLP JSON lines in a file instead of a receiver.
FILE_PREFIX = "file:"
#: The standard variables that turn exporting on (the OTLP exporter reads them, and its headers, itself).
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def endpoint_set(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces are to be exported: an explicit URL, or a standard endpoint variable (and the SDK not
    turned off with OTEL_SDK_DISABLED=true)."""
    env = os.environ if environ is None else environ
    if explicit:
        return True
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def configure(
    explicit: str | None = None, *, redactor: Redactor, capture_content: bool = False,
    environ: Mapping[str, str] | None = None, report: Callable[[str], None] | None = None,
) -> Telemetry | None:
    """The process's telemetry, or None (and no OpenTelemetry import) when no endpoint is set.

    `explicit` is a base URL as `OTEL_EXPORTER_OTLP_ENDPOINT` is (`/v1/traces` is added), the full traces URL, or
    `file:PATH` to append OTLP JSON lines to a file (a trace to read without any backend). `report` is told once
    when exporting fails (default: a warning in mylm's log). Raises ConfigError when an endpoint is set but the
    `otel` extra is not installed."""
    if not endpoint_set(explicit, environ):
        return None
    file = trace_file(explicit) if explicit else None
    url = traces_url(explicit) if explicit and file is None else None
    try:
        from .tracing import Telemetry
    except ImportError as error:
        raise ConfigError(
            f"an OpenTelemetry endpoint is set, but the exporter is not installed ({error.name}): "
            f"{install_command('otel')}"
        ) from None
    return Telemetry.create(url, redactor=redactor, capture_content=capture_content, report=report, file=file)


def trace_file(explicit: str) -> Path | None:
    """The file of `file:PATH` (`~` expanded; its directory must exist), or None for a URL."""
    if not explicit.startswith(FILE_PREFIX):
        return None
    path = Path(explicit[len(FILE_PREFIX):]).expanduser()
    if not path.name or path.is_dir():
        raise ConfigError(f"--otel {explicit!r}: give a file to write OTLP JSON lines to, e.g. file:trace.jsonl")
    if not path.parent.is_dir():
        raise ConfigError(f"--otel {explicit!r}: the directory {path.parent} does not exist")
    return path


def traces_url(base: str) -> str:
    """The OTLP/HTTP traces URL for a base URL (`http://host:4318` -> `http://host:4318/v1/traces`)."""
    url = base.strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--otel {base!r}: give an http:// or https:// URL of an OTLP/HTTP receiver, or "
                          "file:PATH to write the traces to a file")
    return url if url.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"


__all__ = ["ENDPOINT_VARIABLES", "FILE_PREFIX", "configure", "endpoint_set", "trace_file", "traces_url"]
