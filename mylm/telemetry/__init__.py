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
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from ..core.redact import Redactor
    from .tracing import Telemetry

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
    environ: Mapping[str, str] | None = None,
) -> Telemetry | None:
    """The process's telemetry, or None (and no OpenTelemetry import) when no endpoint is set.

    `explicit` is a base URL as `OTEL_EXPORTER_OTLP_ENDPOINT` is (`/v1/traces` is added) or the full traces URL.
    Raises ConfigError when an endpoint is set but the `otel` extra is not installed."""
    if not endpoint_set(explicit, environ):
        return None
    try:
        from .tracing import Telemetry
    except ImportError as error:
        raise ConfigError(
            f"an OpenTelemetry endpoint is set, but the exporter is not installed ({error.name}): "
            "pip install 'mylm[otel]'"
        ) from None
    return Telemetry.create(traces_url(explicit) if explicit else None, redactor=redactor,
                            capture_content=capture_content)


def traces_url(base: str) -> str:
    """The OTLP/HTTP traces URL for a base URL (`http://host:4318` -> `http://host:4318/v1/traces`)."""
    url = base.strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--otel {base!r}: give an http:// or https:// URL of an OTLP/HTTP receiver")
    return url if url.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"


__all__ = ["ENDPOINT_VARIABLES", "configure", "endpoint_set", "traces_url"]
