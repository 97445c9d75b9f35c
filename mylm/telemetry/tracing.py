"""The OpenTelemetry side (the `otel` extra): a tracer provider exporting OTLP/HTTP, and a run's events as spans.

Span tree of one run (the GenAI semantic conventions where they have a name, `mylm.*` where they do not):

    invoke_agent mylm                 the run: command, model, workspace, stop reason, token totals
    ├── iteration 1                   one turn of the loop
    │   ├── chat MODEL                the model call: finish reason, tokens, time to first token
    │   └── execute_tool NAME         a tool call: outcome, duration, sandbox profile; an approval event
    └── iteration 2 ...               corrections are events on their iteration

Text the model or a tool produced (prompt, completion, arguments, output) is recorded only with
`capture_content`, and then redacted as transcripts are."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from .. import __version__
from ..core.types import (
    ApprovalEvent,
    CompactionEvent,
    ContinueEvent,
    ErrorEvent,
    Event,
    FinalResponseEvent,
    IterationStartEvent,
    ModelCallEvent,
    ReasoningEvent,
    RunResult,
    StepCompleteEvent,
    StepStartEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from .exporters import OTLPJsonFile, Watched, quiet_sdk_logs

if TYPE_CHECKING:
    from ..core.redact import Redactor

_log = logging.getLogger("mylm.telemetry")
#: How long exporting may hold up the end of a command (the exporter's own timeout bounds each request).
FLUSH_MILLIS = 5_000
#: The most text one content attribute carries (a tracing backend is not a transcript store).
CONTENT_CHARS = 8_000


def _ns(monotonic: float) -> int:
    """A `time.monotonic()` instant as wall-clock nanoseconds (spans are stamped after the fact)."""
    return time.time_ns() - int((time.monotonic() - monotonic) * 1e9)


@dataclass
class Telemetry:
    """One tracer provider for the process; `run` traces a run, `batch` a batch of them."""

    provider: TracerProvider
    redactor: Redactor
    capture_content: bool = False
    #: The exporter, watched: its first failure is said once, and a failing one is not waited for at exit.
    exporter: Watched | None = None

    @classmethod
    def create(
        cls, url: str | None, *, redactor: Redactor, capture_content: bool = False,
        report: Callable[[str], None] | None = None, file: Path | None = None,
    ) -> Telemetry:
        """Export to `url` (None: where the standard OTEL_EXPORTER_OTLP_* variables say), or with `file` append
        OTLP JSON lines to it. `report` is told, once, that exporting fails (default: mylm's log, a warning)."""
        # Only the service: no process detector, whose command line could carry --api-key.
        provider = TracerProvider(resource=Resource.create({"service.name": "mylm", "service.version": __version__}))
        if file is not None:
            inner: SpanExporter = OTLPJsonFile(file)
            destination = str(file)
        else:
            quiet_sdk_logs()
            inner = OTLPSpanExporter(endpoint=url) if url else OTLPSpanExporter()
            named = url or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
                "OTEL_EXPORTER_OTLP_ENDPOINT")
            destination = redactor.redact(named or "the OTLP endpoint")
        exporter = Watched(inner, destination, report or _log.warning)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, redactor, capture_content, exporter)

    @property
    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer("mylm", __version__)

    def run(
        self, *, command: str, prompt: str, model: str | None, system: str | None, max_tokens: int | None = None,
        workspace: str | None = None, sandbox: str | None = None, links: Sequence[Link] = (),
        attributes: Mapping[str, Any] | None = None, inherit: bool = False,
    ) -> RunTrace:
        """Start the trace of one run: a new trace (`links` tie it to a batch span), or with `inherit` a child of
        the current span (a server's request span, itself continuing its client's trace)."""
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "mylm", "mylm.command": command,
            **_model_attributes(model, system),
        }
        if workspace:
            attrs["mylm.workspace"] = workspace
        if sandbox:
            attrs["mylm.sandbox.backend"] = sandbox
        attrs.update(attributes or {})
        parent = None if inherit else trace.set_span_in_context(trace.INVALID_SPAN)
        span = self.tracer.start_span("invoke_agent mylm", context=parent, kind=SpanKind.INTERNAL, attributes=attrs,
                                      links=list(links))
        run = RunTrace(self, span, model, system, max_tokens)
        if self.capture_content:
            span.set_attribute("gen_ai.input.messages", run.content([{"role": "user", "content": prompt}]))
        return run

    @contextmanager
    def batch(self, *, tasks: int, attributes: Mapping[str, Any] | None = None) -> Iterator[BatchTrace]:
        """One span for a whole batch; each task's trace links to it (`BatchTrace.link`)."""
        span = self.tracer.start_span("batch mylm", context=trace.set_span_in_context(trace.INVALID_SPAN),
                                      attributes={"mylm.command": "batch", "mylm.batch.tasks": tasks,
                                                  **(attributes or {})})
        try:
            yield BatchTrace(span)
        finally:
            span.end()

    def install_global(self) -> None:
        """Make this the process's tracer provider, so libraries' own spans (the MCP SDK's request spans) are
        exported too and runs nest under them."""
        trace.set_tracer_provider(self.provider)

    def flush(self) -> None:
        """Export every finished span now (bounded by FLUSH_MILLIS)."""
        self.provider.force_flush(FLUSH_MILLIS)

    def shutdown(self) -> None:
        """Export what is left and stop the exporter; with a collector that failed, drop it at once instead (its
        retries would hold the caller's exit for seconds)."""
        exporter = self.exporter
        if exporter is not None:
            exporter.closing = True
        if exporter is None or not exporter.failed:
            self.flush()  # a failure during it stops the retries (the exporter is closing)
        if exporter is not None:
            exporter.shutdown()
        self.provider.shutdown()


@dataclass(frozen=True)
class BatchTrace:
    """The batch's span; `link` is what each task's `Telemetry.run(links=...)` takes."""

    span: Span

    def link(self, task_id: str) -> Link:
        return Link(self.span.get_span_context(), {"mylm.task.id": task_id})


@dataclass
class RunTrace:
    """Turns one run's events into spans; call it with each event, then `end` with the result."""

    telemetry: Telemetry
    span: Span
    model: str | None
    system: str | None
    max_tokens: int | None
    _iteration: Span | None = None
    _tools: dict[str, Span] = field(default_factory=dict)
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _number: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ended: bool = False

    # -------------------------------------------------------------------------------------- events

    def __call__(self, event: Event) -> None:
        with self._lock:
            if not self._ended:
                self._observe(event)

    def _observe(self, event: Event) -> None:
        if isinstance(event, IterationStartEvent):
            self._end_iteration()
            self._number = event.iteration
            self._iteration = self._child(f"iteration {event.iteration}", self.span, {
                "mylm.iteration": event.iteration, "mylm.max_iterations": event.max_iterations})
        elif isinstance(event, TextEvent):
            self._text.append(event.text)
        elif isinstance(event, ReasoningEvent):
            self._reasoning.append(event.text)
        elif isinstance(event, ModelCallEvent):
            self._model_call(event)
        elif isinstance(event, StepStartEvent):
            self._tools[event.step_id] = self._child(f"execute_tool {event.tool_name}", self._parent(), {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool_name,
                "gen_ai.tool.call.id": event.step_id})
        elif isinstance(event, ToolCallEvent):
            if self.telemetry.capture_content and event.call.id in self._tools:
                self._tools[event.call.id].set_attribute(
                    "gen_ai.tool.call.arguments", self.content(dict(event.call.arguments)))
        elif isinstance(event, ApprovalEvent):
            self._approval(event)
        elif isinstance(event, ToolResultEvent):
            self._tool_result(event)
        elif isinstance(event, StepCompleteEvent):
            span = self._tools.pop(event.step_id, None)
            if span is not None:
                span.set_attribute("mylm.tool.status", event.status)
                if event.status != "completed":
                    span.set_attribute("error.type", event.status)
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
        elif isinstance(event, ErrorEvent):
            self._error(event)
        elif isinstance(event, CompactionEvent):
            self.span.add_event("mylm.compaction", {
                "mylm.messages_before": event.messages_before, "mylm.messages_after": event.messages_after,
                "mylm.tokens_before": event.tokens_before, "mylm.tokens_after": event.tokens_after})
        elif isinstance(event, ContinueEvent):
            self._parent().add_event("mylm.continue")
        elif isinstance(event, FinalResponseEvent) and self.telemetry.capture_content:
            self.span.set_attribute("gen_ai.output.messages",
                                    self.content([{"role": "assistant", "content": event.text}]))

    def _model_call(self, event: ModelCallEvent) -> None:
        model_call_span(self.telemetry, self._parent(), event, model=self.model, system=self.system,
                        max_tokens=self.max_tokens, text=self._text, reasoning=self._reasoning,
                        attributes={"mylm.iteration": self._number})

    def _approval(self, event: ApprovalEvent) -> None:
        """The verdict as an `mylm.approval` event on the tool's span, and the grant the sandbox enforces as
        its `mylm.sandbox.profile`; the refusal's words only with content capture."""
        span = self._tools.get(event.call_id)
        if span is None:
            return
        attrs: dict[str, Any] = {"mylm.approval.decision": "allow" if event.allowed else "deny"}
        if event.grant is not None:
            attrs["mylm.approval.grant"] = event.grant
            span.set_attribute("mylm.sandbox.profile", event.grant)
        if not event.allowed and self.telemetry.capture_content:
            attrs["mylm.approval.reason"] = self.telemetry.redactor.redact(event.reason)[:CONTENT_CHARS]
        span.add_event("mylm.approval", attrs)

    def _tool_result(self, event: ToolResultEvent) -> None:
        span = self._tools.get(event.call_id)
        if span is None:
            return
        span.set_attribute("mylm.tool.duration", round(event.duration, 6))
        span.set_attribute("mylm.tool.outcome", "error" if event.is_error else "ok")
        if self.telemetry.capture_content:
            span.set_attribute("gen_ai.tool.call.result", self.content(event.output))

    def _error(self, event: ErrorEvent) -> None:
        if event.fatal:
            self.span.set_attribute("error.type", event.kind)
            self.span.set_status(Status(StatusCode.ERROR, self.telemetry.redactor.redact(event.message)[:500]))
            return
        correction_event(self.telemetry, self._parent(), event)

    # ------------------------------------------------------------------------------------------ end

    def end(self, result: RunResult | None) -> None:
        """Close every open span with how the run ended (None: it did not end in time after a cancel)."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            for span in self._tools.values():
                span.set_status(Status(StatusCode.ERROR, "the run ended during the call"))
                span.end()
            self._tools.clear()
            self._end_iteration()
            if result is not None:
                self.span.set_attributes({
                    "mylm.stop_reason": result.stop_reason.value, "mylm.iterations": result.iterations_used,
                    "mylm.model_calls": result.model_calls,
                    "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": result.usage.completion_tokens,
                })
                if not result.ok and result.error is not None:
                    self.span.set_attribute("error.type", type(result.error).__name__)
                    self.span.set_status(Status(StatusCode.ERROR,
                                                self.telemetry.redactor.redact(str(result.error))[:500]))
            else:
                self.span.set_attribute("mylm.stop_reason", "cancelled")
            self.span.end()
        # Exported now rather than at the processor's next tick, without holding up the caller (an event loop).
        threading.Thread(target=self.telemetry.flush, name="mylm-otel-flush", daemon=True).start()

    # -------------------------------------------------------------------------------------- helpers

    def content(self, value: Any) -> str:
        """`value` as redacted JSON text for a content attribute, cut to CONTENT_CHARS."""
        return content(self.telemetry, value)

    def _parent(self) -> Span:
        return self._iteration or self.span

    def _child(self, name: str, parent: Span, attributes: Mapping[str, Any]) -> Span:
        return self.telemetry.tracer.start_span(name, context=trace.set_span_in_context(parent),
                                                attributes=dict(attributes))

    def _end_iteration(self) -> None:
        if self._iteration is not None:
            self._iteration.end()
            self._iteration = None


def model_call_span(
    telemetry: Telemetry, parent: Span, event: ModelCallEvent, *, model: str | None, system: str | None,
    max_tokens: int | None, text: list[str], reasoning: list[str], attributes: Mapping[str, Any],
) -> None:
    """The span of one finished model call under `parent` (stamped after the fact from the event's timings); the
    reply's `text` and `reasoning` (cleared here) become its output content with content capture."""
    end = time.time_ns()
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat", **_model_attributes(model, system),
        "gen_ai.response.finish_reasons": [event.finish_reason.value], **attributes,
    }
    if max_tokens:
        attrs["gen_ai.request.max_tokens"] = max_tokens
    if event.usage is not None:
        attrs["gen_ai.usage.input_tokens"] = event.usage.prompt_tokens
        attrs["gen_ai.usage.output_tokens"] = event.usage.completion_tokens
    if event.time_to_first_token is not None:
        attrs["gen_ai.response.time_to_first_chunk"] = round(event.time_to_first_token, 6)
    if telemetry.capture_content:
        output = [{"role": "assistant", "content": "".join(text)}]
        if reasoning:
            output[0]["reasoning"] = "".join(reasoning)
        attrs["gen_ai.output.messages"] = content(telemetry, output)
    text.clear()
    reasoning.clear()
    name = f"chat {model}" if model else "chat"
    span = telemetry.tracer.start_span(name, context=trace.set_span_in_context(parent), kind=SpanKind.CLIENT,
                                       attributes=attrs, start_time=end - int(event.duration * 1e9))
    span.end(end_time=end)


def correction_event(telemetry: Telemetry, span: Span, event: ErrorEvent) -> None:
    """A correction the model is sent (format, invalid arguments, a retry) as an event on `span`: the kind
    always, the words (which may quote the model) only with content capture."""
    attrs: dict[str, Any] = {"mylm.correction.kind": event.kind}
    if telemetry.capture_content:
        attrs["mylm.correction.message"] = telemetry.redactor.redact(event.message)[:CONTENT_CHARS]
    span.add_event("mylm.correction", attrs)


def content(telemetry: Telemetry, value: Any) -> str:
    """`value` as redacted JSON text for a content attribute, cut to CONTENT_CHARS."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return telemetry.redactor.redact(text)[:CONTENT_CHARS]


def _model_attributes(model: str | None, system: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if system:
        attrs["gen_ai.system"] = system
        attrs["gen_ai.provider.name"] = system
    if model:
        attrs["gen_ai.request.model"] = model
    return attrs
