"""HTTP for every provider: a `requests` session whose every socket read honours the deadline and cancel."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ReadTimeoutError

from .._version import __version__
from ..core.cancel import CancelToken, remaining
from ..core.errors import (
    CancelledError,
    ConfigError,
    ConnectionBroke,
    EndpointUnreachableError,
    LLMError,
    LLMTimeoutError,
    StreamError,
)
from .failures import Place
from .watchdog import WATCHDOG

#: Caps against a hostile or broken endpoint (THREATS.md T7): total body, one line, one error body.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
_READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class HTTPCall:
    """One request a provider wants sent."""

    method: str
    url: str
    #: Kept out of `repr`: it carries the API key.
    headers: Mapping[str, str] = field(repr=False)
    body: bytes | None = field(default=None, repr=False)


class CallGuard:
    """Enforces one model call's deadline and cancel token on whichever socket the call is using.

    Socket timeouts bound each read, but a server that trickles a byte at a time (slowloris) would reset them
    forever; so a timer shuts the socket down at the deadline, and a cancel does the same from any thread.
    """

    def __init__(self, deadline: float | None, cancel: CancelToken | None, place: Place) -> None:
        self.deadline = deadline
        self.place = place
        self.reason: str | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._unregister: Callable[[], None] = lambda: None
        self._unschedule: Callable[[], None] = lambda: None
        if deadline is not None:
            self._unschedule = WATCHDOG.schedule(deadline, lambda: self.abort("deadline"))
        if cancel is not None:
            self._unregister = cancel.on_cancel(lambda: self.abort("cancelled"))
        self._sleeper = cancel

    def attach(self, sock: socket.socket | None) -> None:
        """The call now reads from `sock`; shut it at once if the call was already aborted."""
        with self._lock:
            self._sock = sock
            aborted = self.reason is not None
        if aborted and sock is not None:
            _shutdown(sock)

    def detach(self) -> None:
        """The call no longer owns a socket (it may go back to the pool for another call)."""
        with self._lock:
            self._sock = None

    @property
    def sock(self) -> socket.socket | None:
        """The socket the call is reading from, if connected."""
        return self._sock

    def abort(self, reason: str) -> None:
        """Stop the call: from a timer or another thread, unblocking any read in progress."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            sock = self._sock
        if sock is not None:
            _shutdown(sock)

    def remaining(self) -> float:
        """Seconds left before the deadline (infinite without one)."""
        return remaining(self.deadline)

    def check(self) -> None:
        """Raise the call's cancel or timeout error if it has been aborted or its deadline has passed."""
        if self.reason is None and self.remaining() <= 0:
            self.abort("deadline")
        if self.reason is not None:
            raise self.error()

    def error(self) -> LLMError | CancelledError:
        """The error that an abort stands for."""
        if self.reason == "cancelled":
            return CancelledError("cancelled while waiting for the model")
        return LLMTimeoutError(
            f"the run's time limit ran out while waiting for the {self.place.provider} endpoint "
            f"{self.place.url}"
        )

    def timeout(self, limit: float) -> float:
        """A socket timeout: `limit`, shortened to the time left (raises if none is left)."""
        self.check()
        return max(0.001, min(limit, self.remaining()))

    def sleep(self, seconds: float) -> None:
        """Wait before a retry, waking at once on cancel."""
        if self._sleeper is not None:
            self._sleeper.wait(seconds)
        else:
            time.sleep(seconds)
        self.check()

    def close(self) -> None:
        """Release the timer and the cancel registration."""
        self._unschedule()
        self._unregister()
        self.detach()


def _shutdown(sock: socket.socket) -> None:
    # The plain-socket shutdown wakes a blocked recv in another thread; for TLS it deliberately bypasses
    # SSLSocket.shutdown, which would tear down the SSL object under the reading thread.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


# The guard of the call being sent on this thread, so the connection classes below can hand it their socket
# while the request and its headers are in flight (before `requests` returns a response object).
_sending = threading.local()


def _attach_current(sock: Any) -> None:
    guard: CallGuard | None = getattr(_sending, "guard", None)
    if guard is not None and isinstance(sock, socket.socket):
        guard.attach(sock)


#: Linux only: without it, a kept connection is not kept (see `_quick_acks`).
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


def _quick_acks(sock: Any) -> None:
    """ACK the answer's packets at once, on a connection that has carried a request before.

    Once a connection has carried a request and an answer, Linux holds back ACKs (up to 40 ms) hoping to send
    them with the client's next data. A server that leaves Nagle on (Python's http.server, llama.cpp's) then
    holds each small write of its answer until the previous one is ACKed: every SSE event waits ~40 ms. A
    fresh connection starts out ACKing at once, which is why each call used to get a new one. TCP_QUICKACK
    leaves that mode; the client sends nothing more until the answer has ended, so it does not come back.
    """
    if _QUICKACK is not None and isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


#: A connection idle longer than this is not reused: servers close idle ones after a few seconds (llama.cpp's
#: and uvicorn's after 5 s), and one closed just as a request goes out would fail that request.
_KEEP_IDLE = 2.0


class _Guarded:
    """Hands the socket to the call being sent, and keeps a kept connection's next answer quick to ACK."""

    sock: Any
    #: When the connection went back to the pool (set by the pool, see `_Keeping`).
    idle_since: float | None = None

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _attach_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:  # a kept-alive connection: no connect() this time
            _attach_current(self.sock)
        super().request(*args, **kwargs)  # type: ignore[misc]
        _quick_acks(self.sock)


class _Keeping:
    """A pool that closes a connection idle too long before handing it out: closed there, urllib3 connects it
    afresh, through a proxy's CONNECT tunnel too (closing it later, inside the request, would skip the
    tunnel and talk TLS to the proxy itself)."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        since = getattr(conn, "idle_since", None)
        if since is not None:
            conn.idle_since = None
            if time.monotonic() - since > _KEEP_IDLE:
                conn.close()
        return conn

    def _put_conn(self, conn: Any) -> None:
        if isinstance(conn, _Guarded):
            conn.idle_since = time.monotonic()
        super()._put_conn(conn)  # type: ignore[misc]


class _GuardedHTTPConnection(_Guarded, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_Guarded, HTTPSConnection):
    pass


class _HTTPPool(_Keeping, urllib3.HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _HTTPSPool(_Keeping, urllib3.HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class _GuardedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        if hasattr(manager, "pool_classes_by_scheme") and not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        return manager


def _no_auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
    return request


class _Session(requests.Session):
    """A session that looks up the proxy and CA-bundle variables once per host, not on every request: requests
    reads the whole environment each time (~3 ms a request on a busy machine). A process's proxy settings do
    not change while it runs."""

    def __init__(self) -> None:
        super().__init__()
        self._environment: dict[tuple[Any, ...], Any] = {}
        self._prepared: dict[tuple[Any, ...], requests.PreparedRequest] = {}

    def prepare_with_body(self, method: str, url: str, headers: Mapping[str, str], body: bytes
                          ) -> requests.PreparedRequest:
        """What `prepare_request` makes of a request with `body`: prepared once per method, URL and headers,
        then copied with the body set, since preparing one afresh (the session's headers, cookies and hooks
        merged in, the URL parsed and each header checked) cost ~0.1 ms a request and only the body changes
        from one model call to the next. While the session holds a cookie (a server set one) every request
        is prepared afresh: its Cookie header is chosen per request. (This session's own headers, auth and
        hooks are never changed after `new_session`.)"""
        if self.cookies:
            return self.prepare_request(requests.Request(method, url, headers=headers, data=body))
        key = (method, url, tuple(headers.items()))
        kept = self._prepared.get(key)
        if kept is None:
            kept = self.prepare_request(requests.Request(method, url, headers=headers, data=body))
            if len(self._prepared) >= 8:
                self._prepared.clear()
            self._prepared[key] = kept
        prepared = kept.copy()
        prepared.prepare_body(body, None)
        return prepared

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
        if proxies or cert or verify not in (None, True):
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        key = (*urlsplit(str(url))[:2], stream, verify)
        if key not in self._environment:
            self._environment[key] = super().merge_environment_settings(url, proxies, stream, verify, cert)
        found = self._environment[key]
        return {**found, "proxies": dict(found["proxies"])}


def new_session(pool_maxsize: int = 4) -> requests.Session:
    """A session with guarded connections, no automatic retries and no `.netrc` credentials; it keeps up to
    `pool_maxsize` idle connections per server for reuse."""
    session = _Session()
    adapter = _GuardedAdapter(pool_maxsize=pool_maxsize, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    # A session-level auth keeps requests from reading ~/.netrc, which would replace our Authorization header.
    session.auth = _no_auth
    return session


BASE_HEADERS: Mapping[str, str] = {
    "User-Agent": f"mylm/{__version__}",
    # Compressed bodies are refused by default (a gzip bomb is cheap to send); urllib3 still caps decoding.
    "Accept-Encoding": "identity",
}


class Response(Protocol):
    """An answer whose headers are in and whose body is read through `raw.read1` (requests', or `lean`'s)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def raw(self) -> Any: ...

    def close(self) -> None: ...


class Sender(Protocol):
    """A session other than requests' that sends calls itself (`lean.LeanSession`)."""

    def send_call(self, call: HTTPCall, guard: CallGuard, *, connect_timeout: float,
                  read_timeout: float) -> Response: ...

    def close(self) -> None: ...


#: What providers send through.
Session = requests.Session | Sender


def send(
    session: Session,
    call: HTTPCall,
    guard: CallGuard,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> Response:
    """Send `call` and return the response once its headers are in (any status); the body is not read yet."""
    own = getattr(session, "send_call", None)
    if own is not None:
        answer: Response = own(call, guard, connect_timeout=connect_timeout, read_timeout=read_timeout)
        return answer
    plain = cast(requests.Session, session)  # a Sender always has `send_call`
    timeout = (guard.timeout(connect_timeout), guard.timeout(read_timeout))
    _sending.guard = guard
    headers = {**BASE_HEADERS, **call.headers}
    try:
        if isinstance(plain, _Session) and isinstance(call.body, bytes) and call.body:
            # What `session.request` does, with the request prepared from the last one like it.
            prepared = plain.prepare_with_body(call.method.upper(), call.url, headers, call.body)
            settings = plain.merge_environment_settings(prepared.url, {}, True, None, None)
            return plain.send(prepared, timeout=timeout, allow_redirects=False, **settings)
        return plain.request(
            call.method,
            call.url,
            data=call.body,
            headers=headers,
            stream=True,
            timeout=timeout,
            allow_redirects=False,
        )
    except requests.exceptions.RequestException as exc:
        # Blame the run's deadline only when the limit that fired was the one the deadline shortened.
        fired = timeout[0] if isinstance(exc, requests.exceptions.ConnectTimeout) else timeout[1]
        configured = connect_timeout if isinstance(exc, requests.exceptions.ConnectTimeout) else read_timeout
        if isinstance(exc, requests.exceptions.Timeout) and fired < configured:
            guard.abort("deadline")
        guard.check()
        raise _request_error(exc, guard.place, connect_timeout, read_timeout) from None
    finally:
        _sending.guard = None


def _request_error(exc: Exception, place: Place, connect_timeout: float, read_timeout: float) -> LLMError:
    configure = "start the server, or point mylm at it with --base-url or MYLM_BASE_URL"
    where = f"the {place.provider} endpoint at {place.url}"
    if isinstance(
        exc,
        (
            requests.exceptions.InvalidURL,
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema,
        ),
    ):
        raise ConfigError(f"invalid endpoint URL {place.url}; set --base-url or MYLM_BASE_URL")
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return EndpointUnreachableError(
            f"cannot reach {where}: no answer within {connect_timeout:g} s; {configure}"
        )
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return LLMTimeoutError(f"{where} sent no response within {read_timeout:g} s (the read timeout)")
    if isinstance(exc, requests.exceptions.SSLError):
        error = EndpointUnreachableError(
            f"cannot reach {where}: TLS failed ({root_cause(exc)}); {configure}"
        )
        error.retryable = False  # a certificate problem does not fix itself
        return error
    return unreachable(exc, place)


def unreachable(exc: BaseException, place: Place) -> EndpointUnreachableError:
    """The error for a connection that failed (or broke before an answer) with `exc`."""
    configure = "start the server, or point mylm at it with --base-url or MYLM_BASE_URL"
    where = f"the {place.provider} endpoint at {place.url}"
    cause = root_cause(exc)
    error = EndpointUnreachableError(f"cannot reach {where}: {cause}; {configure}")
    if cause == "connection refused" and _is_loopback(place.url):
        error.retryable = False  # nothing listens on this machine's port, and waiting will not start it
    return error


def _is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def root_cause(exc: BaseException) -> str:
    """The innermost cause, as a short phrase (`connection refused`, a DNS failure, ...)."""
    seen: set[int] = set()
    inner: BaseException = exc
    while id(inner) not in seen:
        seen.add(id(inner))
        nxt = getattr(inner, "reason", None) or inner.__cause__ or inner.__context__
        if not isinstance(nxt, BaseException):
            break
        inner = nxt
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused"
    if isinstance(inner, socket.gaierror):
        return f"host name not found ({inner.strerror or inner})"
    if isinstance(inner, ConnectionResetError):
        return "the connection was reset"
    text = str(inner)
    # urllib3 puts the connection object's repr first; what follows the colon is the readable part.
    return text.split(">: ", 1)[-1][:200] or type(inner).__name__


def iter_body(
    response: Response, guard: CallGuard, *, idle: float, limit: int = MAX_RESPONSE_BYTES
) -> Iterator[bytes]:
    """The response body as it arrives, each read bounded by the idle timeout and the deadline."""
    raw = response.raw
    total = 0
    while True:
        sock = guard.sock
        wait = guard.timeout(idle)
        if sock is not None:
            try:
                sock.settimeout(wait)
            except OSError:
                pass
        try:
            # read1 returns whatever has arrived (one chunk's worth at most); decoding is capped too.
            data = raw.read1(_READ_SIZE, decode_content=True)
        except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException) as exc:
            # socket, urllib3 and http.client each raise their own types; anything else is a bug, not the network.
            if _is_timeout(exc) and wait < idle:
                guard.abort("deadline")
            guard.check()
            raise _read_error(exc, guard.place, idle) from None
        guard.check()
        if not data:
            return
        total += len(data)
        if total > limit:
            error = StreamError(
                f"the {guard.place.provider} endpoint {guard.place.url} sent more than "
                f"{limit // 1024 // 1024} MiB; "
                "stopped reading"
            )
            error.retryable = False
            raise error
        yield data


#: At most this much of an answer's unread rest is read to keep its connection (cheaper than a new one).
_KEEP_BYTES = 64 * 1024


def release(response: Response, guard: CallGuard) -> None:
    """Let go of a response whose reading is over (finished, or closed early once a call was complete).

    When the rest of the body is already here (the server finished its turn, only its tail is unread), it is
    read so that the connection goes back to the pool: the agent's next call then skips a new TCP (and TLS)
    handshake, and the server a new connection. A body still streaming (a server ignoring stops) is cut off at
    once: waiting even 2 ms for a tail cost every early-closed turn those 2 ms, and a model's next token is
    further away than that. Only where the client can turn delayed ACKs off for the next answer (`_quick_acks` says
    why that matters): elsewhere every call has a connection of its own.
    """
    sock = guard.sock
    if not _QUICKACK or sock is None or guard.reason is not None:
        response.close()
        return
    raw = response.raw
    # Never an error out of the clean-up. A tail not all there (http.client may even fail with TypeError on a
    # non-blocking read): the connection is closed below.
    with contextlib.suppress(Exception):
        previous = sock.gettimeout()
        sock.settimeout(0.0)  # only what has arrived: a model still generating is not waited for
        try:
            kept = 0
            while kept <= _KEEP_BYTES:
                data = raw.read1(_READ_SIZE, decode_content=True)
                if not data:
                    raw.release_conn()
                    return
                kept += len(data)
        finally:
            sock.settimeout(previous)
    response.close()


def read_all(response: Response, guard: CallGuard, *, idle: float, limit: int) -> bytes:
    """The whole (small) body: an error answer or a JSON document; stops quietly at `limit`."""
    parts: list[bytes] = []
    size = 0
    # A body that breaks off still says what it managed to say.
    with contextlib.suppress(StreamError):
        for data in iter_body(response, guard, idle=idle, limit=limit + _READ_SIZE):
            parts.append(data)
            size += len(data)
            if size >= limit:
                break
    return b"".join(parts)[:limit]


def _is_timeout(exc: Exception) -> bool:
    return isinstance(exc, (ReadTimeoutError, socket.timeout, requests.exceptions.Timeout))


def _read_error(exc: Exception, place: Place, idle: float) -> LLMError:
    if _is_timeout(exc):
        return LLMTimeoutError(
            f"the {place.provider} endpoint {place.url} went silent for {idle:g} s "
            "in the middle of its answer "
            "(the read timeout)"
        )
    return ConnectionBroke(
        f"the connection to the {place.provider} endpoint {place.url} broke: {root_cause(exc)}"
    )
