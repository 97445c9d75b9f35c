"""Loopback HTTP servers that speak each endpoint's wire format byte for byte, replaying scripted completions.

Usage (any test, any directory):

    from tests.providers.servers import OpenAIServer

    with OpenAIServer() as server:
        server.script(["I will look.\\n<tool_code>...</tool_code>", "The answer."])
        ... point mylm at server.base_url ...
        assert server.requests[0].body["messages"][0]["role"] == "system"

Each POST to a generation route consumes the next scripted reply; the server records every request. Replies are
`Completion`s (encoded in the server's wire format, honouring the request's stops as the real server does),
`HTTPError`s, `Raw` byte streams, or the hostile behaviours `Hang` and `Trickle`. When the script runs out the
server answers 500 "script exhausted", so a test that asks too often fails loudly. mylm's side question whether a
called tool fits the question (`mylm.agent.fit`) is answered like a model would, from `fits` (default: "Yes"), and
its question whether the task asks for one thing or several from `counts` (default: "Several"); both are kept in
`probes`, not `requests`: they are not turns of the script.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union
from urllib.parse import parse_qsl, urlsplit

from mylm.agent.fit import COUNTED, WORKED

#: What only the fit probe's requests hold: its first worked question.
_FIT_PROBE = json.dumps(WORKED[0].request)[1:-1]
_COUNT_PROBE = json.dumps(COUNTED[2][0])[1:-1]  # the first is a fit probe's worked question too
#: Delta sizes, in characters, cycled to cut a completion into small uneven pieces like a tokenizer would.
_PIECES = (1, 4, 2, 7, 3, 5)
#: What a server that ignores stops goes on generating after the completion (the classic fake observation).
FILLER = "\n<observation>\nmade-up output\n</observation>\nAnd more made-up text."


@dataclass(frozen=True)
class Completion:
    """What the model "generates"; the server encodes it in its wire format."""

    text: str
    reasoning: str = ""
    #: The finish value the server reports; None lets the server decide (`stop`, or its stop-sequence value).
    finish: str | None = None
    prompt_tokens: int = 17
    #: After the text, keep generating `FILLER` forever (until the client goes away): a model that runs on.
    endless: bool = False
    #: The error payload (the whole JSON object, e.g. `{"error": {...}}`) the server puts into the stream after the
    #: text, framed as that server frames it (the HTTP status stays 200).
    error_after: Mapping[str, Any] | None = None
    #: Native tool calls (`{"id", "name", "arguments"}`, arguments as JSON text) the OpenAI server streams after
    #: the text as `delta.tool_calls`: a header piece with id and name, then the arguments in small fragments.
    tool_calls: Sequence[Mapping[str, str]] = ()


@dataclass(frozen=True)
class HTTPError:
    """An HTTP error answer: a JSON body (mapping) or a text body (str), with optional headers."""

    status: int
    body: Mapping[str, Any] | str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    """Bytes exactly as given, each piece sent (and flushed) as one chunk."""

    pieces: Sequence[bytes]
    status: int = 200
    content_type: str = "text/event-stream"
    #: `end` finishes the body properly; `close` drops the connection mid-body; `hang` stays silent.
    then: str = "end"
    #: False sends no Content-Length and no chunking: the body ends when the connection closes.
    chunked: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Read the request and never answer (not even headers) until the client goes away."""


@dataclass(frozen=True)
class Trickle:
    """Send headers, then one byte of an SSE comment every `interval` seconds, forever (slowloris)."""

    interval: float = 0.02
    #: Trickle the status line and headers themselves, so the client never even gets a response object.
    in_headers: bool = False


Reply = Union[Completion, HTTPError, Raw, Hang, Trickle, str]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: Mapping[str, str]
    #: Header names are lower-case.
    headers: Mapping[str, str]
    #: The parsed JSON body, or None.
    body: Any
    raw: bytes


def cut_at_stops(text: str, stops: Sequence[str], mode: str) -> tuple[str, str | None]:
    """Apply a server's stop handling: `exclude` (most servers), `include` (TGI) or `ignore`."""
    if mode == "ignore" or not stops:
        return text, None
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        return text, None
    at, stop = min(hits)
    return (text[:at] if mode == "exclude" else text[: at + len(stop)]), stop


def pieces(text: str) -> list[str]:
    """Cut `text` into small uneven pieces."""
    out, i, k = [], 0, 0
    while i < len(text):
        size = _PIECES[k % len(_PIECES)]
        out.append(text[i : i + size])
        i, k = i + size, k + 1
    return out


def sse(obj: Any, *, event: str | None = None, crlf: bool = False) -> bytes:
    """One SSE event carrying `obj` as compact JSON (or a literal string such as `[DONE]`)."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    text = f"{head}data: {data}\n\n"
    return (text.replace("\n", "\r\n") if crlf else text).encode("utf-8")


class LoopbackServer:
    """A scripted HTTP server on 127.0.0.1 with an OS-chosen port; subclasses encode one wire format."""

    #: The base URL's path (`/v1` for OpenAI-compatible servers).
    base_path = ""
    content_type = "text/event-stream"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        stop_mode: str = "exclude",
        delay: float = 0.001,
        models: Sequence[str] = ("test-model",),
        fits: bool | Sequence[bool] = True,
        counts: Sequence[str] = ("Several",),
    ) -> None:
        self.stop_mode = stop_mode
        self.fits = [fits] if isinstance(fits, bool) else list(fits) or [True]
        self.counts = list(counts) or ["Several"]
        self.probes: list[RecordedRequest] = []
        self.delay = delay
        self.models = list(models)
        self.requests: list[RecordedRequest] = []
        #: Set when the server saw a client go away while it was still sending (or waiting to send).
        self.disconnected = threading.Event()
        self.stopping = threading.Event()
        #: Exceptions raised inside request handlers (other than a client going away mid-stream).
        self.errors: list[BaseException | None] = []
        self._script: list[Reply] = list(replies)
        self._lock = threading.Condition()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------------------------ test-facing API

    @property
    def port(self) -> int:
        """The port the OS chose."""
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        """`http://127.0.0.1:PORT`, no path."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The URL to configure mylm with (`http://127.0.0.1:PORT/v1` for OpenAI-compatible servers)."""
        return self.root_url + self.base_path

    def script(self, replies: Iterable[Reply]) -> LoopbackServer:
        """Append replies (a str is a `Completion` of that text); returns the server."""
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def remaining(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        """Block until `count` requests have arrived (or `timeout` passes); returns whether they did."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self.requests) >= count, timeout)

    def close(self) -> None:
        """Stop serving; handlers still streaming notice and end."""
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ for subclasses

    def is_generation(self, method: str, path: str) -> bool:
        """Whether this request consumes a scripted reply."""
        raise NotImplementedError

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        """The completion encoded as this wire format's pieces, each to be flushed on its own."""
        raise NotImplementedError

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        """Answer a request that is not a generation (model lists and the like): (status, JSON body)."""
        return 404, {"error": f"no route {request.method} {request.path}"}

    def stops_of(self, body: Any) -> list[str]:
        """The stop strings in a request body, as this server reads them."""
        return []

    def rejection(self, request: RecordedRequest) -> HTTPError | None:
        """An error to answer instead of streaming (a server that rejects a field); does not use the script."""
        return None

    def visible(self, completion: Completion, request: RecordedRequest) -> tuple[str, str | None]:
        """The text the server streams after its stop handling, and the stop that fired."""
        return cut_at_stops(completion.text, self.stops_of(request.body), self.stop_mode)

    # ----------------------------------------------------------------------------------------- internals

    def _record(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            body = json.dumps(request.body)
            if self.is_generation(request.method, request.path) and _COUNT_PROBE in body:
                self.probes.append(request)
                counted = sum(_COUNT_PROBE in json.dumps(p.body) for p in self.probes)
                return Completion(self.counts[min(counted, len(self.counts)) - 1])
            if self.is_generation(request.method, request.path) and _FIT_PROBE in body:
                self.probes.append(request)
                asked = sum(_FIT_PROBE in json.dumps(p.body) for p in self.probes)
                return Completion("Yes" if self.fits[min(asked, len(self.fits)) - 1] else "No")
            self.requests.append(request)
            self._lock.notify_all()
            if not self.is_generation(request.method, request.path):
                return None
            rejected = self.rejection(request)
            if rejected is not None:
                return rejected
            if not self._script:
                return HTTPError(500, {"error": {"message": "script exhausted", "type": "server_error"}})
            return self._script.pop(0)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, owner: LoopbackServer) -> None:
        self.owner = owner
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Kept for tests to inspect instead of printed: a client vanishing mid-request is routine here.
        import sys

        self.owner.errors.append(sys.exc_info()[1])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(self.path)
        request = RecordedRequest(
            method=self.command,
            path=parts.path,
            query=dict(parse_qsl(parts.query)),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
        )
        reply = owner._record(request)
        try:
            if reply is None:
                status, document = owner.other(request)
                self._send_error(HTTPError(status, document))
            elif isinstance(reply, str):
                self._stream(owner.events(Completion(reply), request), owner.content_type)
            elif isinstance(reply, Completion):
                self._stream(owner.events(reply, request), owner.content_type)
            elif isinstance(reply, HTTPError):
                self._send_error(reply)
            elif isinstance(reply, Raw):
                self._stream(
                    iter(reply.pieces),
                    reply.content_type,
                    status=reply.status,
                    then=reply.then,
                    chunked=reply.chunked,
                    headers=reply.headers,
                )
            elif isinstance(reply, Hang):
                self._wait_for_client_exit()
            elif isinstance(reply, Trickle) and reply.in_headers:
                self.close_connection = True
                for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"x" * 100000:
                    if owner.stopping.wait(reply.interval):
                        return
                    self.wfile.write(bytes([byte]))
            elif isinstance(reply, Trickle):
                self._stream(_trickle(), owner.content_type, delay=reply.interval)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            owner.disconnected.set()
            self.close_connection = True

    def _send_error(self, reply: HTTPError) -> None:
        if isinstance(reply.body, str):
            data, kind = reply.body.encode("utf-8"), "text/plain; charset=utf-8"
        else:
            data, kind = json.dumps(reply.body).encode("utf-8"), "application/json"
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self,
        chunks: Iterator[bytes],
        kind: str,
        *,
        status: int = 200,
        then: str = "end",
        chunked: bool = True,
        delay: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        owner = self.server.owner
        pause = owner.delay if delay is None else delay
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Cache-Control", "no-cache")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        # A server with no delay ends its answer at once: the last piece goes out with the chunked body's end in
        # one write, so a client that stops reading at the last event finds the whole body there (the keep-alive
        # tests; written apart, a loaded machine could run the client between the two writes).
        hold = not pause and chunked and then == "end"
        last = b""
        for piece in chunks:
            if owner.stopping.is_set():
                self.close_connection = True
                return
            framed = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
            if hold:
                if last:
                    self.wfile.write(last)
                    self.wfile.flush()
                last = framed
                continue
            self.wfile.write(framed)
            self.wfile.flush()
            if pause:
                owner.stopping.wait(pause)
        if hold:
            self.wfile.write(last + b"0\r\n\r\n")
            self.wfile.flush()
            return
        if then == "hang":
            self._wait_for_client_exit()
        elif then == "close" or not chunked:
            self.close_connection = True
        else:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _wait_for_client_exit(self) -> None:
        """Stay silent until the client closes its end (recorded as a disconnect) or the server stops."""
        owner = self.server.owner
        sock: socket.socket = self.connection
        self.close_connection = True
        while not owner.stopping.is_set():
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        owner.disconnected.set()
                        return
                except OSError:
                    owner.disconnected.set()
                    return


def _trickle() -> Iterator[bytes]:
    # A comment line, one byte at a time, forever: valid SSE that never carries data.
    while True:
        yield from (bytes([b]) for b in b": still thinking\n\n")


def now() -> int:
    """A fixed-looking creation time (the value does not matter to clients)."""
    return int(time.time())


# ---------------------------------------------------------------------------------------------- OpenAI


class OpenAIServer(LoopbackServer):
    """OpenAI `POST /v1/chat/completions` and `/v1/completions` (SSE), and `GET /v1/models`.

    Knobs: `stop_mode` (`exclude` like OpenAI, `include` like TGI, `ignore`, or `reject`: a 400 blaming `stop`,
    as o3 does); `done` (send `data: [DONE]`); `pings` (SSE comment lines, as llama.cpp sends); `crlf` (CRLF
    line ends); `usage` (the final usage chunk when the request asks for it).
    """

    base_path = "/v1"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        done: bool = True,
        pings: bool = True,
        crlf: bool = False,
        usage: bool = True,
        **kwargs: Any,
    ) -> None:
        self.done, self.pings, self.crlf, self.usage = done, pings, crlf, usage
        super().__init__(replies, **kwargs)

    def is_generation(self, method: str, path: str) -> bool:
        return method == "POST" and path in ("/v1/chat/completions", "/v1/completions")

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.path == "/v1/models":
            data = [
                {"id": m, "object": "model", "created": 1700000000, "owned_by": "mylm-tests"}
                for m in self.models
            ]
            return 200, {"object": "list", "data": data}
        return 404, {
            "error": {
                "message": f"Unknown request URL: {request.method} {request.path}",
                "type": "invalid_request_error",
                "param": None,
                "code": "unknown_url",
            }
        }

    def stops_of(self, body: Any) -> list[str]:
        stop = (body or {}).get("stop") or []
        return [stop] if isinstance(stop, str) else list(stop)

    def rejection(self, request: RecordedRequest) -> HTTPError | None:
        if self.stop_mode == "reject" and "stop" in (request.body or {}):
            return HTTPError(
                400,
                {
                    "error": {
                        "message": "Unsupported parameter: 'stop' is not supported with this model.",
                        "type": "invalid_request_error",
                        "param": "stop",
                        "code": "unsupported_parameter",
                    }
                },
            )
        return None

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        body = request.body or {}
        chat = request.path.endswith("/chat/completions")
        text, hit = self.visible(completion, request)
        head = {
            "id": "chatcmpl-test" if chat else "cmpl-test",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1700000000,
            "model": body.get("model", "test-model"),
            "system_fingerprint": "fp_test",
        }

        def chunk(delta: Mapping[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            choice: dict[str, Any] = {"index": 0}
            if chat:
                choice["delta"] = dict(delta)
            else:
                choice["text"] = delta.get("content", "")
            choice.update({"logprobs": None, "finish_reason": finish, **extra})
            return sse({**head, "choices": [choice], "usage": None}, crlf=self.crlf)

        count = 0
        if chat:
            yield chunk({"role": "assistant", "content": "", "refusal": None})
        if self.pings:
            yield b": ping\n\n"
        for piece in pieces(completion.reasoning):
            yield chunk({"reasoning_content": piece})
        for piece in pieces(text):
            count += 1
            yield chunk({"content": piece})
            if count == 3:
                yield chunk({})  # an empty delta, as servers send around role and tool switches
        if completion.endless:
            while True:
                for piece in pieces(FILLER):
                    yield chunk({"content": piece})
        for index, native in enumerate(completion.tool_calls if chat else ()):
            header = {"index": index, "id": native["id"], "type": "function",
                      "function": {"name": native["name"], "arguments": ""}}
            yield chunk({"tool_calls": [header]})
            for piece in pieces(native["arguments"]):
                count += 1
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        if completion.error_after is not None:
            yield sse(dict(completion.error_after), crlf=self.crlf)
            return
        yield chunk({}, completion.finish or ("tool_calls" if completion.tool_calls and chat else "stop"))
        if self.usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": count,
                "total_tokens": completion.prompt_tokens + count,
            }
            yield sse({**head, "choices": [], "usage": usage}, crlf=self.crlf)
        if self.done:
            yield sse("[DONE]", crlf=self.crlf)
