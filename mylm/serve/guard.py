"""What keeps a local HTTP server of mylm's safe on a desktop, shared by `mylm serve` and `mylm mcp --port`.

A server on loopback is still reachable from every web page the user opens: a page can POST to
`http://127.0.0.1:8765` (blind CSRF, no answer needed to spend the model or inject a conversation), or rebind its
own name to 127.0.0.1 and read the answers (DNS rebinding). And any local process can hold connections open.
So, before anything else sees a request:

- **Host**: the `Host` header must name this machine (`localhost`, a loopback address) or a name the operator
  allowed; a rebound name (`evil.example`) is refused (421).
- **Origin**: a browser's request carries `Origin`; one that is not a loopback origin or an allowed one is
  refused (403), as is the opaque `null` origin of sandboxed frames and files.
- **Content type**: a request with a body (whatever its method) must say `application/json`. A page can send `text/plain`, form data
  or a body without a type across origins without a CORS preflight; it cannot send JSON that way (415).
- **Deadlines**: the request head must arrive within `head_timeout` seconds of the connection opening (or of
  the previous answer ending), the body within `body_timeout` of the head; a client trickling a byte every few
  seconds (slowloris) is dropped. uvicorn's own keep-alive timeout only covers an idle connection, not one that
  sends a byte now and then.
- **Connections per client**: at most `max_connections` open at once from one address; more are answered 429
  and closed, so one client cannot take every socket.

The first three are an ASGI middleware (`Guard`); the last two live in the HTTP protocol (`guarded_protocol`),
where the bytes arrive. Each failure is answered in the caller's error shape (`Refusal`). A server that also
takes a key (`mylm a2a`) wraps the same rules with the key check (`KeyedGuard`; `client_key` and `key_matches`
are what `mylm serve` compares its key with).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

logger = logging.getLogger("mylm.serve")

#: Host names that always mean this machine (besides every loopback address).
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})
#: Media types of a request body the servers accept.
JSON_TYPES = frozenset({"application/json"})


@dataclass(frozen=True)
class Guarding:
    """The rules (see the module's docstring); the defaults suit a server on loopback."""

    #: Host names (or addresses) accepted besides loopback ones; `*` accepts any (the check is off).
    hosts: tuple[str, ...] = ()
    #: Origins (`scheme://host[:port]`) accepted besides loopback ones; `*` accepts any.
    origins: tuple[str, ...] = ()
    #: Seconds a client has to send a request's head (request line and headers).
    head_timeout: float = 10.0
    #: Seconds a client has to send a request's body, once its head has arrived.
    body_timeout: float = 30.0
    #: Connections one client address may hold open at once.
    max_connections: int = 128


#: How a refusal is written: (path, status, message, kind) -> a JSON document in the API's own error shape.
Refusal = Callable[[str, int, str, str], Any]


def host_name(value: str) -> str:
    """The name in a `Host` header or an origin's authority, without its port, lower case (`[::1]` -> `::1`)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value


def is_loopback_name(name: str) -> bool:
    """Whether `name` (from `host_name`) always means this machine: `localhost` or a loopback address."""
    if name in LOOPBACK_NAMES:
        return True
    known = _LOOPBACK_SEEN.get(name)
    if known is None:
        try:
            known = ipaddress.ip_address(name.split("%")[0]).is_loopback
        except ValueError:
            known = False
        # Every request names its host (`127.0.0.1:8080`, mostly the same few): parsing it as an address each
        # time was a fiftieth of the event loop's CPU per request. Bounded: a client sends any name it likes.
        if len(_LOOPBACK_SEEN) >= 256:
            _LOOPBACK_SEEN.clear()
        _LOOPBACK_SEEN[name] = known
    return known


#: What `is_loopback_name` found for the names it was asked about lately.
_LOOPBACK_SEEN: dict[str, bool] = {}


def host_allowed(header: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a request's `Host` header names this machine or an allowed name (a missing one does not)."""
    if "*" in allowed:
        return True
    if not header:
        return False
    name = host_name(header)
    return is_loopback_name(name) or name in {host_name(a) for a in allowed}


def origin_allowed(origin: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a request's `Origin` is acceptable: absent (not a browser, or a same-origin GET), a loopback
    origin, or one the operator allowed."""
    if origin is None or "*" in allowed:
        return True
    origin = origin.strip().lower().rstrip("/")
    if origin in {a.strip().lower().rstrip("/") for a in allowed}:
        return True
    try:
        parts = urlsplit(origin)
        port = parts.port  # raises on a port that is not a number
    except ValueError:
        return False
    del port
    if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.username is not None:
        return False
    return is_loopback_name(host_name(parts.netloc))


def is_json(content_type: str | None) -> bool:
    """Whether a `Content-Type` header says JSON (parameters such as `charset` allowed)."""
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() in JSON_TYPES


def refusal(scope: dict[str, Any], guarding: Guarding) -> tuple[int, str, str] | None:
    """Why the request in `scope` is refused (status, message, kind), or None."""
    headers: dict[str, str] = {}
    for key, value in scope.get("headers") or ():
        name = key.decode("latin-1").lower()
        # A repeated Host or Origin is ambiguous (which one did the browser mean?): refused below.
        headers[name] = "\x00" if name in headers and name in ("host", "origin") else value.decode("latin-1")
    host = headers.get("host")
    if not host_allowed(host, guarding.hosts):
        message = (f"the Host header {(host or '(none)')[:100]!r} does not name this server; a web page may have "
                   "rebound its name to this machine (DNS rebinding). Connect as localhost or 127.0.0.1, or allow "
                   "the name with --allow-host")
        return 421, message, "misdirected_request"
    if not origin_allowed(headers.get("origin"), guarding.origins):
        message = (f"requests from the web origin {headers['origin'][:100]!r} are refused (a page the user opened "
                   "cannot use this server); allow it with --allow-origin")
        return 403, message, "permission_error"
    carries_body = headers.get("content-length", "0").strip() != "0" or "transfer-encoding" in headers
    if carries_body and not is_json(headers.get("content-type")):
        shown = headers.get("content-type") or "none"
        return (415, f"the request's Content-Type is {shown[:100]!r}; send the body as application/json",
                "unsupported_media_type")
    return None


class Guard:
    """ASGI middleware applying the Host, Origin and content-type rules before `app` sees a request."""

    def __init__(self, app: Any, guarding: Guarding, refused: Refusal) -> None:
        self.app = app
        self.guarding = guarding
        self.refused = refused
        #: Counts the connections per client for the protocol (None: each server process counts its own).
        self.connections: Connections | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = refusal(scope, self.guarding)
        if found is None:
            await self.app(scope, receive, send)
            return
        status, message, kind = found
        client = scope.get("client") or ("?", 0)
        logger.warning("Refused %s %s from %s: %s", scope.get("method"), scope.get("path"), client[0], message)
        body = json.dumps(self.refused(scope.get("path") or "/", status, message, kind)).encode("utf-8")
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def client_key(headers: dict[str, str] | Any) -> str:
    """The key a request sent: `x-api-key`, else `Authorization: Bearer KEY` ("" when none)."""
    sent = headers.get("x-api-key") or ""
    authorization = headers.get("authorization") or ""
    if not sent and authorization[:7].lower() == "bearer ":
        sent = authorization[7:].strip()
    return str(sent)


def key_matches(sent: str, key: str) -> bool:
    """Whether `sent` is `key` (compared in constant time)."""
    return bool(sent) and hmac.compare_digest(sent.encode("utf-8", "replace"), key.encode("utf-8"))


class KeyedGuard:
    """`Guard`'s rules, then the client key (when one is set) unless the path is public (an agent card).
    Refusals are JSON with one line."""

    def __init__(self, app: Any, *, hosts: tuple[str, ...] = (), key: str | None = None,
                 public: tuple[str, ...] = (), guarding: Guarding | None = None) -> None:
        self.app = app
        self.guarding = guarding or Guarding(hosts=hosts)
        self.key = key
        self.public = frozenset(public)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = refusal(scope, self.guarding)
        if found is None and self.key is not None and scope.get("path", "/") not in self.public:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
            sent = client_key(headers)
            if not key_matches(sent, self.key):
                why = "a wrong key was sent" if sent else "no key was sent"
                message = (f"invalid client key ({why}): send the server's key as `Authorization: Bearer KEY` "
                           "or `x-api-key`")
                found = (401, message, "authentication_error")
        if found is None:
            await self.app(scope, receive, send)
            return
        status, message, _ = found
        logger.warning("Refused %s %s: %s", scope.get("method"), scope.get("path"), message)
        body = json.dumps({"error": {"message": message, "status": status}}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def raw_answer(status: int, reason: str, document: Any) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection (for refusals before any request is parsed)."""
    body = json.dumps(document).encode("utf-8")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode("ascii") + body


class Connections(Protocol):
    """The connections each client address holds open: `take` one if the address holds fewer than `limit`."""

    def take(self, address: str, limit: int) -> bool: ...

    def give(self, address: str) -> None: ...


class LocalConnections:
    """The open connections of one server process, by client address."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def take(self, address: str, limit: int) -> bool:
        if self._open.get(address, 0) >= limit:
            return False
        self._open[address] = self._open.get(address, 0) + 1
        return True

    def give(self, address: str) -> None:
        left = self._open.get(address, 1) - 1
        if left > 0:
            self._open[address] = left
        else:
            self._open.pop(address, None)


#: The most bytes of a request line and headers: a client cannot make the server buffer more (beyond the one read
#: that carries them, as h11's own bound).
MAX_HEAD_BYTES = 64 * 1024


def guarded_protocol(guarding: Guarding, refused: Refusal, connections: Connections | None = None, *,
                     http: str = "h11", max_head: int = MAX_HEAD_BYTES) -> type:
    """uvicorn's HTTP protocol (`http`: "h11", or "httptools" where it is installed) with the head and body
    deadlines and the per-client connection limit (a class: uvicorn makes one per connection); its connection
    counts are shared by every connection of this class, and by other processes too when `connections` counts
    across them (`mylm serve --workers N`). The h11 protocol bounds the request head itself (uvicorn's
    `h11_max_incomplete_event_size`); on httptools, which gathers a header of any length, the class bounds it to
    `max_head` bytes (`_HeadBound`)."""
    counts: Connections = connections if connections is not None else LocalConnections()
    base = _guarded(guarding, refused, counts)
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class GuardedHttpTools(_head_bound(refused, max_head), base, HttpToolsProtocol):  # type: ignore[misc,valid-type]
            _in_body = False
            _head_timer: Any
            _body_timer: Any

            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                if self._in_body and self._body_timer is None and not self.transport.is_closing():
                    # The head has arrived and the body has not: from now on the body's deadline counts.
                    self._body_timer = self.loop.call_later(guarding.body_timeout, self._body_late)

            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                self._disarm()  # the head has arrived
                self._in_body = True

            def on_message_complete(self) -> None:
                self._in_body = False
                if self._body_timer is not None:
                    self._body_timer.cancel()
                    self._body_timer = None
                super().on_message_complete()

            def _awaiting_body(self) -> bool:
                return self._in_body

        return GuardedHttpTools
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedProtocol(base, H11Protocol):  # type: ignore[misc,valid-type]
        _head_timer: Any
        _body_timer: Any

        def handle_events(self) -> None:
            super().handle_events()
            if self._head_timer is not None and self.cycle is not None and not self.cycle.response_complete:
                # The head has arrived: from now on the body's deadline counts.
                self._head_timer.cancel()
                self._head_timer = None
                if self.conn.their_state is h11.SEND_BODY and self._body_timer is None:
                    self._body_timer = self.loop.call_later(guarding.body_timeout, self._body_late)

        def _awaiting_body(self) -> bool:
            return bool(self.conn.their_state is h11.SEND_BODY)

    return GuardedProtocol


def _guarded(guarding: Guarding, refused: Refusal, counts: Connections) -> type:
    """What both protocols' guarded classes share: the connection limit and the two deadlines (a mixin put
    before uvicorn's protocol class, which provides `loop`, `transport`, `client` and `cycle`)."""

    class Guarded:
        _head_timer: Any = None
        _body_timer: Any = None
        _counted: str | None = None
        loop: Any
        transport: Any
        client: Any
        cycle: Any

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)  # type: ignore[misc]
            address = str(self.client[0]) if self.client else "?"
            if not counts.take(address, guarding.max_connections):
                logger.warning("Refused a connection from %s: it holds %d already", address,
                               guarding.max_connections)
                transport.write(raw_answer(429, "Too Many Requests", refused(
                    "/", 429, f"this client already holds {guarding.max_connections} connections to the server; "
                              "close some or reuse them", "rate_limit_error")))
                transport.close()
                return
            self._counted = address
            self._arm_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._counted is not None:
                counts.give(self._counted)
                self._counted = None
            super().connection_lost(exc)  # type: ignore[misc]

        def on_response_complete(self) -> None:
            self._disarm()
            super().on_response_complete()  # type: ignore[misc]
            if not self.transport.is_closing():
                self._arm_head()  # the next request's head has its own deadline

        def _arm_head(self) -> None:
            self._head_timer = self.loop.call_later(guarding.head_timeout, self._head_late)

        def _disarm(self) -> None:
            for timer in (self._head_timer, self._body_timer):
                if timer is not None:
                    timer.cancel()
            self._head_timer = self._body_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return
            logger.warning("Dropped a connection from %s: no request head within %g s", self._counted,
                           guarding.head_timeout)
            self.transport.write(raw_answer(408, "Request Timeout", refused(
                "/", 408, f"the request head did not arrive within {guarding.head_timeout:g} s", "timeout")))
            self.transport.close()

        def _body_late(self) -> None:
            self._body_timer = None
            if self.transport.is_closing() or not self._awaiting_body():
                return
            # The application answers a late body itself where it reads with a deadline (`mylm serve`: a 408 in
            # the API's shape); this is the floor for one that does not.
            logger.warning("Dropped a connection from %s: its body did not arrive within %g s", self._counted,
                           guarding.body_timeout)
            self.transport.close()

        def _awaiting_body(self) -> bool:
            """Whether the request's head has come and its body has not: each protocol's class answers it from
            its own parser's state (h11's, httptools' callbacks); this mixin alone has no parser to ask."""
            raise NotImplementedError

    return Guarded


def _head_bound(refused: Refusal, max_head: int) -> type:
    """A mixin bounding each request head to `max_head` bytes for uvicorn's httptools protocol.

    httptools gathers a header name or value of any length before it calls back, so the bound is on the bytes
    fed to it: while a head is being read, no more than what is left of `max_head` is fed at once, and a head
    that has not ended within them is refused (431) and the connection closed. A head begins where the previous
    message ended; the bytes of a pipelined next head that came in the same read as the end of the previous
    message are not counted (at most one read more, as with h11, which holds a whole read before it looks)."""

    class HeadBound:
        #: Bytes the head being read may still take; None while a body is read.
        _head_left: int | None = max_head
        transport: Any

        def data_received(self, data: bytes) -> None:
            left = self._head_left
            if left is not None and len(data) > left:
                super().data_received(data[:left])  # type: ignore[misc]
                if self._head_left is not None and not self.transport.is_closing():
                    logger.warning("Refused a request head over %d bytes", max_head)
                    self.transport.write(raw_answer(431, "Request Header Fields Too Large", refused(
                        "/", 431, f"the request head is longer than {max_head} bytes",
                        "request_too_large")))
                    self.transport.close()
                    return
                if not self.transport.is_closing():
                    self.data_received(data[left:])
                return
            if left is not None:
                self._head_left = left - len(data)
            super().data_received(data)  # type: ignore[misc]

        def on_headers_complete(self) -> None:
            self._head_left = None
            super().on_headers_complete()  # type: ignore[misc]

        def on_message_complete(self) -> None:
            self._head_left = max_head
            super().on_message_complete()  # type: ignore[misc]

    return HeadBound
