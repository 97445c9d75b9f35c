"""Where spans go (the `otel` extra): OTLP/HTTP with its failures said once, or a file of OTLP JSON lines.

The SDK's OTLP exporter logs a long line for every retry of a collector it cannot reach (four lines for one
`mylm ask`), and its flush retries with backoff for up to its timeout, so a dead collector held a command's exit
for seconds after the answer. `Watched` wraps it: the first failure is one sentence to `report`, the SDK's own
lines go to mylm's debug log (`-vv`) instead of stderr, and once the command is closing a failure stops the
retries at once: a trace nobody can receive is not worth a wait.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_log = logging.getLogger("mylm.telemetry")
#: The loggers the SDK's OTLP/HTTP exporter writes its retries and failures to (names stable since 1.2x).
_SDK_LOGGERS = ("opentelemetry.exporter.otlp", "opentelemetry.sdk.trace.export", "opentelemetry.sdk._shared_internal")
#: The exporter whose export is running on this thread: the SDK logs from inside it, on the same thread.
_exporting = threading.local()
_installed = False
_install_lock = threading.Lock()


class _SdkLines(logging.Handler):
    """Takes the SDK exporter's log lines: each to mylm's debug log, and a failure to the exporter that met it."""

    def emit(self, record: logging.LogRecord) -> None:
        _log.debug("opentelemetry: %s", record.getMessage())
        watched = getattr(_exporting, "exporter", None)
        if watched is not None and record.levelno >= logging.WARNING:
            watched.failed_with(record.getMessage())


def quiet_sdk_logs() -> None:
    """Route the SDK exporter's own log lines through `_SdkLines` (once per process), never to stderr."""
    global _installed
    with _install_lock:
        if _installed:
            return
        handler = _SdkLines()
        for name in _SDK_LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.propagate = False
        _installed = True


class Watched(SpanExporter):
    """An exporter whose first failure is said once through `report`, and which gives up at once when closing."""

    def __init__(self, inner: SpanExporter, destination: str, report: Callable[[str], None]) -> None:
        self.inner = inner
        self.destination = destination
        self.report = report
        #: An export failed (the collector is down or refuses the traces): exit does not wait for it again.
        self.failed = False
        #: The command is ending: a failure now stops the exporter instead of retrying.
        self.closing = False
        self._closed = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        _exporting.exporter = self
        try:
            result = self.inner.export(spans)
        except Exception as error:  # noqa: BLE001 - a tracing failure must never reach the run
            self.failed_with(str(error))
            return SpanExportResult.FAILURE
        finally:
            _exporting.exporter = None
        if result is not SpanExportResult.SUCCESS:
            self.failed_with("")
        return result

    def failed_with(self, detail: str) -> None:
        """An export failed (or is about to retry): say so the first time; stop now if the command is ending."""
        with self._lock:
            first, self.failed = not self.failed, True
        if first:
            self.report(_sentence(self.destination, detail))
        if self.closing:
            self.shutdown()  # wakes the exporter from its backoff sleep: it gives up instead of retrying

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _sentence(destination: str, detail: str) -> str:
    """`cannot export traces to URL: nothing listens there (connection refused); ...`, from the SDK's line."""
    lowered = detail.lower()
    # The SDK says "Transient error REASON encountered while exporting ..., retrying in 1.09s." or "Failed to
    # export spans batch code: 404, reason: Not Found".
    status = re.search(r"code: (\d+), reason: (.*)", detail)
    reason = (f"{status[1]} {status[2]}" if status
              else detail.partition("Transient error ")[2].partition(" encountered while")[0] or detail)
    if "connection refused" in lowered:
        why = "nothing listens there (connection refused)"
    elif "connection" in lowered or "timed out" in lowered or "resolve" in lowered:
        why = "the collector is unreachable"
    elif reason:
        why = f"the collector answered {reason.strip().splitlines()[0][:200]}"
    else:
        why = "the export failed"
    return f"cannot export traces to {destination}: {why}; the run itself is unaffected (traces are dropped)"


class OTLPJsonFile(SpanExporter):
    """Appends each batch of spans to a file as one line of OTLP JSON (an `ExportTraceServiceRequest`, the
    format of the OpenTelemetry Collector's file exporter): a trace to read with `jq`, no backend needed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        # Traces may carry prompts (otel_capture_content): readable by the user only, as sessions are.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from google.protobuf.json_format import MessageToDict  # no stubs shipped
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        line = (json.dumps(_hex_ids(request), separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                return SpanExportResult.FAILURE
            os.write(self._fd, line)  # one write on an O_APPEND descriptor: a line is never torn by another
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


#: OTLP JSON writes trace and span ids as hex, where protobuf's JSON mapping of bytes is base64.
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: base64.b64decode(item).hex() if key in _ID_KEYS and isinstance(item, str) else _hex_ids(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value
