"""A loopback OTLP/HTTP receiver that decodes what it is sent with the real protobuf (`opentelemetry-proto`)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Span:
    """One exported span, decoded: ids as hex, attributes and events as plain values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str, dict[str, Any]]]
    status: int
    start: int
    end: int
    resource: dict[str, Any] = field(default_factory=dict)
    #: The protobuf's SpanKind: 1 internal, 2 server, 3 client.
    kind: int = 0


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


class OTLPReceiver:
    """`POST /v1/traces` on 127.0.0.1; keeps every raw body (to search for secrets) and the decoded spans."""

    def __init__(self, *, status: int = 200) -> None:
        """`status`: what every export is answered (503: a collector that is up but cannot take traces)."""
        self.bodies: list[bytes] = []
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                    ExportTraceServiceResponse,
                )

                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    with receiver._changed:
                        receiver.paths.append(self.path)
                        receiver._changed.notify_all()
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                with receiver._changed:
                    receiver.paths.append(self.path)
                    receiver.bodies.append(body)
                    receiver.spans.extend(_decode(request))
                    receiver._changed.notify_all()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait_for(self, name: str, timeout: float = 60.0) -> list[Span]:
        """Every span received once one named `name` has arrived (a bound, not a delay)."""
        with self._changed:
            self._changed.wait_for(lambda: any(s.name == name for s in self.spans), timeout)
            return list(self.spans)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _decode(request: Any) -> list[Span]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append(Span(
                    name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(), attributes=_attributes(span.attributes),
                    events=[(e.name, _attributes(e.attributes)) for e in span.events],
                    links=[(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                           for link in span.links],
                    status=span.status.code, start=span.start_time_unix_nano, end=span.end_time_unix_nano,
                    resource=resource, kind=span.kind,
                ))
    return spans
