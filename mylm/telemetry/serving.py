"""Traces of `mylm serve`'s requests (the `otel` extra), drawn as the runs of `tracing.py` are:

    POST /v1/chat/completions        SERVER span: route, method, status; the client's trace continued from its
    │                                `traceparent` header; `mylm.correction` events, one per correction sent
    ├── chat MODEL                   CLIENT span per upstream model call: gen_ai.system, gen_ai.request.model,
    └── chat MODEL                   token usage, finish reason, time to first chunk (a correction is a new call)

The client's messages and the answer it got (on the server span), and each call's visible text (on its span), are
recorded only with `capture_content`, redacted as sessions are.
No header is recorded (they carry the client's key).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..core.types import ErrorEvent, Event, ModelCallEvent, ReasoningEvent, TextEvent
from .tracing import Telemetry, content, correction_event, model_call_span

#: W3C Trace Context only: a client's `baggage` header is not turned into anything here.
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass
class ServeTracer:
    """Traces each request of one `mylm serve` (its upstream's model and provider name every call span)."""

    telemetry: Telemetry
    model: str | None
    system: str | None

    def request(
        self, *, method: str, route: str, path: str, headers: Mapping[str, str], scheme: str = "http",
        server: tuple[str, int] | None = None, client: str | None = None,
    ) -> RequestTrace:
        """Start the SERVER span of one HTTP request; a `traceparent` header makes it part of the client's trace."""
        attrs: dict[str, Any] = {
            "http.request.method": method, "http.route": route, "url.path": path, "url.scheme": scheme,
        }
        if server is not None:
            attrs["server.address"], attrs["server.port"] = server
        if client:
            attrs["client.address"] = client
        agent = headers.get("user-agent")
        if agent:
            attrs["user_agent.original"] = agent[:200]
        context = _PROPAGATOR.extract({k.lower(): v for k, v in headers.items() if k.lower() == "traceparent"})
        span = self.telemetry.tracer.start_span(f"{method} {route}", context=context, kind=SpanKind.SERVER,
                                                attributes=attrs)
        return RequestTrace(self, span)

    def shutdown(self) -> None:
        """Export what is left and stop the exporter."""
        self.telemetry.shutdown()


@dataclass
class RequestTrace:
    """One request's span; call it with the core's events (from its worker thread), then `end` with the status."""

    tracer: ServeTracer
    span: Span
    max_tokens: int | None = None
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _calls: int = 0
    _corrections: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ended: bool = False

    def request(self, *, api: str, model: str, stream: bool, tools: int, max_tokens: int | None,
                messages: Sequence[Mapping[str, Any]]) -> None:
        """What the client asked for, once its body is read: the API, the model name it sent, streaming, the
        tools offered; its messages with content capture."""
        self.max_tokens = max_tokens
        attrs: dict[str, Any] = {"mylm.serve.api": api, "mylm.serve.client_model": model,
                                 "mylm.serve.stream": stream, "mylm.serve.tools": tools}
        if self.tracer.telemetry.capture_content:
            attrs["gen_ai.input.messages"] = content(self.tracer.telemetry, list(messages))
        self.span.set_attributes(attrs)

    def __call__(self, event: Event) -> None:
        with self._lock:
            if self._ended:
                return
            telemetry = self.tracer.telemetry
            if isinstance(event, ModelCallEvent):
                self._calls += 1
                model_call_span(telemetry, self.span, event, model=self.tracer.model, system=self.tracer.system,
                                max_tokens=self.max_tokens, text=self._text, reasoning=self._reasoning,
                                attributes={"mylm.attempt": self._calls})
            elif isinstance(event, TextEvent):
                if telemetry.capture_content:
                    self._text.append(event.text)
            elif isinstance(event, ReasoningEvent):
                if telemetry.capture_content:
                    self._reasoning.append(event.text)
            elif isinstance(event, ErrorEvent) and not event.fatal:
                self._corrections += 1
                correction_event(telemetry, self.span, event)

    def answered(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """The answer the client got: its text and the native calls it was given, with content capture."""
        with self._lock:
            if not self._ended and self.tracer.telemetry.capture_content:
                self.span.set_attribute("gen_ai.output.messages", content(self.tracer.telemetry, list(messages)))

    def end(self, status: int, error: str | None = None) -> None:
        """Close the span with the HTTP status sent, and `error` (the error's type) if the request failed, also
        when the failure came after a streamed answer's 200."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            self.span.set_attributes({"http.response.status_code": status, "mylm.model_calls": self._calls,
                                      "mylm.corrections": self._corrections})
            if error is not None:
                self.span.set_attribute("error.type", error)
            # The HTTP conventions: a server span is an error for a 5xx (or a failure after a 200), not for the
            # client's 4xx, nor for a client that went away.
            if status >= 500 or (error not in (None, "cancelled") and status < 400):
                self.span.set_status(Status(StatusCode.ERROR))
            self.span.end()


__all__ = ["RequestTrace", "ServeTracer"]

