"""A lean HTTP/1.1 client for `mylm serve`'s upstream calls: keep-alive connections of its own, and the answer's
head and body (Content-Length, chunked, or up to the close) read straight off the socket.

Why: `mylm serve` makes every request's upstream calls (two for a tool call: the turn and the fit probe) from
its own CPU budget. Through requests, urllib3 and http.client one call cost about 0.4 ms of CPU on the bench's
loopback upstream (`scripts/bench_serve.py`), most of it preparing the request (URL, cookies, environment,
hooks) and parsing the answer's headers with the `email` package; this client does what those calls need in a
few dozen lines. Only plain `http://` upstreams that no proxy variable covers take this path (a local llama.cpp
or vLLM, where the server's own cost shows); TLS and proxies go through requests as before. The agent's model
calls take the same path (`HTTPProvider`'s default session): the client's ~0.4 ms a call was a tenth of the
time between two steps of a run.

Whatever requests would treat differently goes through requests: a URL or header it would quote, reject or
rewrite, and every call after an answer that set a cookie (the cookie is put in requests' jar by its own
policy, so the next requests carry it as before).

The guard's rules are kept: every read is bounded by the idle timeout and the deadline, the guard holds the
socket so a cancel or the deadline shuts it, a kept connection idle too long or closed by the server is not
reused, and its answers are ACKed at once (`transport._quick_acks`).
"""

from __future__ import annotations

import contextlib
import http.client
import re
import select
import socket
import threading
import time
import weakref
import zlib
from collections import deque
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

from ..core.errors import EndpointUnreachableError, LLMTimeoutError
from . import transport
from .transport import (
    BASE_HEADERS,
    CallGuard,
    HTTPCall,
    Response,
    _quick_acks,
    new_session,
    send,
    unreachable,
)

#: The most bytes of an answer's status line and headers (http.client's line limit), and of one chunk-size line.
MAX_HEAD_BYTES = 64 * 1024
#: The most decoded bytes one read hands out of a compressed body (the rest waits for the next read).
_MAX_INFLATE = 1024 * 1024
_RECV = 64 * 1024


class Headers(dict[str, str]):
    """An answer's headers by lower-case name, looked up in any case (as requests' are); a repeated header's
    values are joined with commas."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class _Connection:
    """One socket to a server, with what has been read from it and not consumed yet."""

    def __init__(self, sock: socket.socket, key: tuple[str, int]) -> None:
        self.sock = sock
        self.key = key
        self.buffer = bytearray()
        #: When it went back to the pool; None while it is in use or before its first answer.
        self.idle_since: float | None = None

    def fill(self) -> bool:
        """Read what the socket has (blocking up to its timeout) into the buffer; False at the end of the stream."""
        data = self.sock.recv(_RECV)
        self.buffer += data
        return bool(data)

    def take(self, size: int) -> bytes:
        """Up to `size` buffered bytes (none if none are buffered)."""
        data = bytes(self.buffer[:size])
        del self.buffer[:size]  # cheap: a bytearray drops its front without moving the rest
        return data

    def line(self, block: bool) -> bytes | None:
        """The next CRLF-ended line without its CRLF; None if it is not all here and `block` is false.
        Raises IncompleteRead if the stream ends first, LineTooLong past MAX_HEAD_BYTES."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                found = self.take(end + 1)
                return found.rstrip(b"\r\n")
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("chunk size")
            if not block:
                return None
            if not self.fill():
                raise http.client.IncompleteRead(bytes(self.buffer))

    def dropped(self) -> bool:
        """Whether the server closed the kept connection (or sent something unasked) while it was idle."""
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0)) or bool(self.buffer)
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class LeanResponse:
    """An answer whose head has been read; its body is read with `read1` (as urllib3's `raw`)."""

    def __init__(self, session: LeanSession, conn: _Connection, guard: CallGuard, status: int, version: int,
                 headers: Headers, method: str) -> None:
        self.status_code = status
        self.headers = headers
        self._session = session
        self._conn: _Connection | None = conn
        self._guard = guard
        connection = headers.get("connection", "").lower()
        self._keep = "close" not in connection and (version >= 11 or "keep-alive" in connection)
        self._length: int | None = None
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        #: Where a chunked body is: a size line next, a chunk's data (`_chunk_left` bytes of it), the CRLF
        #: after it, or the trailers after the last chunk.
        self._state = "size"
        self._chunk_left = 0
        self._done = False
        #: The answer's Set-Cookie values (the session keeps them).
        self.cookies: list[str] = []
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._done = True
        elif not self._chunked:
            declared = headers.get("content-length")
            if declared is not None:
                try:
                    self._length = int(declared.split(",")[0].strip())
                except ValueError:
                    raise http.client.HTTPException(f"invalid Content-Length {declared!r}") from None
                self._done = self._length <= 0
            else:
                self._keep = False  # the body ends when the server closes the connection
        encoding = headers.get("content-encoding", "").strip().lower()
        # Asked for identity; a server that compresses anyway is decoded as urllib3 did (gzip and deflate).
        self._inflate: Any = None
        if encoding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._inflate = _Deflate()

    @property
    def raw(self) -> LeanResponse:
        """The body's reader (this object): `transport.iter_body` and `release` read it as urllib3's."""
        return self

    def read1(self, amt: int = _RECV, decode_content: bool = True) -> bytes:
        """What has arrived of the body (waiting for some if nothing has), at most `amt` bytes of it before
        decoding; b"" at its end. Raises IncompleteRead if the server closes the connection before the end."""
        inflate = self._inflate if decode_content else None
        while True:
            if inflate is not None and inflate.unconsumed_tail:
                out: bytes = inflate.decompress(inflate.unconsumed_tail, _MAX_INFLATE)
                if out:
                    return out
            data = self._read(amt)
            if inflate is None:
                return data
            if not data:
                return bytes(inflate.flush())
            out = inflate.decompress(data, _MAX_INFLATE)
            if out:
                return out

    def _read(self, amt: int) -> bytes:
        conn = self._conn
        if self._done or conn is None:
            return b""
        if self._chunked:
            return self._read_chunks(conn, amt)
        if self._length is None:  # up to the close
            if not conn.buffer and not conn.fill():
                self._done = True
                return b""
            return conn.take(amt)
        if not conn.buffer:
            data = conn.sock.recv(min(amt, self._length, _RECV))
            if not data:
                raise http.client.IncompleteRead(b"", self._length)
        else:
            data = conn.take(min(amt, self._length))
        self._length -= len(data)
        self._done = self._length == 0
        return data

    def _read_chunks(self, conn: _Connection, amt: int) -> bytes:
        """The data of the chunks that have arrived, up to `amt` bytes: waits only for the first (a server that
        writes an event per chunk brings many per read, and each would cost a pass through the decoder)."""
        parts: list[bytes] = []
        size = 0
        block = True
        while size < amt and not self._done:
            if self._state == "data":
                if not conn.buffer:
                    if not block:
                        break
                    if not conn.fill():
                        raise http.client.IncompleteRead(b"".join(parts), self._chunk_left)
                data = conn.take(min(amt - size, self._chunk_left))
                parts.append(data)
                size += len(data)
                self._chunk_left -= len(data)
                if self._chunk_left == 0:
                    self._state = "crlf"
                block = False
                continue
            line = conn.line(block)
            if line is None:
                break
            if self._state == "crlf":
                if line:
                    raise http.client.HTTPException("a chunk did not end where its size said")
                self._state = "size"
            elif self._state == "size":
                try:
                    self._chunk_left = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise http.client.HTTPException(f"invalid chunk size line {line[:40]!r}") from None
                if self._chunk_left < 0:
                    raise http.client.HTTPException(f"invalid chunk size line {line[:40]!r}")
                self._state = "data" if self._chunk_left else "trailers"
            elif not line:  # the empty line after the last chunk's trailers (ignored)
                self._done = True
        return b"".join(parts)

    def release_conn(self) -> None:
        """Hand the connection back for another call if the body was read to its end and the server keeps it
        open; otherwise close it. The guard lets go of it first: a later abort must not shut another call's."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._guard.detach()
        if self._done and self._keep:
            self._session._put(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Done with the answer: its connection is kept if the body was read to its end, else closed."""
        self.release_conn()


class _Deflate:
    """`deflate` as servers send it: zlib-wrapped as the standard says, or raw as some send it."""

    def __init__(self) -> None:
        self._inner: Any = None
        self._first = b""

    @property
    def unconsumed_tail(self) -> bytes:
        return bytes(self._inner.unconsumed_tail) if self._inner is not None else b""

    def decompress(self, data: bytes, limit: int) -> bytes:
        if self._inner is None:
            self._first += data
            inner = zlib.decompressobj()
            try:
                out = inner.decompress(self._first, limit)
            except zlib.error:
                inner = zlib.decompressobj(-zlib.MAX_WBITS)
                out = inner.decompress(self._first, limit)
            self._inner, self._first = inner, b""
            return bytes(out)
        return bytes(self._inner.decompress(data, limit))

    def flush(self) -> bytes:
        return bytes(self._inner.flush()) if self._inner is not None else b""


class LeanSession:
    """Sends calls to plain-HTTP servers itself, keeping up to `pool_maxsize` idle connections per server;
    calls to any other URL go through a requests session (`transport.new_session`)."""

    def __init__(self, pool_maxsize: int = 4) -> None:
        self.pool_maxsize = pool_maxsize
        self._idle: dict[tuple[str, int], deque[_Connection]] = {}
        self._lock = threading.Lock()
        #: Per scheme and host: (host, port, Host header) when this client sends there itself, else None.
        #: Per URL: (host, port, Host header, request target) when this client sends there itself, else None.
        self._direct: dict[str, tuple[str, int, str, str] | None] = {}
        #: Per method, URL and headers: the request's head (only the body changes between two model calls).
        self._heads: dict[tuple[Any, ...], bytes | None] = {}
        self._fallback: Any = None
        #: Set once an answer set a cookie: from then on every call goes through requests, which sends it.
        self._cookies = False
        # Kept connections are closed when the session is dropped unclosed (a server's app in tests).
        weakref.finalize(self, _close_all, self._idle)

    # ---------------------------------------------------------------------------------------------- sending

    def send_call(self, call: HTTPCall, guard: CallGuard, *, connect_timeout: float,
                  read_timeout: float) -> Response:
        """Send `call` and return its answer once the head is in (any status); the body is not read yet."""
        url = call.url
        target = self._direct.get(url, _UNSEEN)
        if target is _UNSEEN:
            if len(self._direct) >= 64:
                self._direct.clear()
            target = self._direct[url] = _direct_target(url)
        head = None
        if target is not None and not self._cookies:
            key = (call.method, url, tuple(call.headers.items()))
            head = self._heads.get(key)
            if head is None and key not in self._heads:
                if len(self._heads) >= 16:
                    self._heads.clear()
                head = self._heads[key] = _request_head(call, target[3], target[2])
        if head is None or target is None:
            return send(self._requests(), call, guard, connect_timeout=connect_timeout, read_timeout=read_timeout)
        host, port = target[0], target[1]
        if call.body is not None or call.method in ("POST", "PUT", "PATCH"):
            head += b"Content-Length: %d\r\n\r\n" % len(call.body or b"")
        else:
            head += b"\r\n"
        while True:
            conn = self._get((host, port))
            reused = conn is not None
            if conn is None:
                conn = self._connect(host, port, guard, connect_timeout)
            try:
                answer = self._exchange(conn, head, call, guard, read_timeout)
                if answer.cookies:
                    self._keep_cookies(call, answer.cookies)
                return answer
            except _Stale:
                if not reused:
                    raise AssertionError("a new connection cannot be stale") from None
                continue  # a kept connection the server had closed: once more on a new one

    def _requests(self) -> Any:
        if self._fallback is None:
            self._fallback = new_session(self.pool_maxsize)
        return self._fallback

    def _keep_cookies(self, call: HTTPCall, cookies: list[str]) -> None:
        """Put the cookies an answer set into requests' jar, as requests would have (its policy decides which
        it keeps); every later call goes through requests, which then sends them."""
        from requests.cookies import MockRequest, MockResponse

        message = http.client.HTTPMessage()
        for value in cookies:
            message["Set-Cookie"] = value
        sent = _Sent(call.url, {**BASE_HEADERS, **call.headers})
        self._requests().cookies.extract_cookies(MockResponse(message), MockRequest(sent))
        self._cookies = True

    def _connect(self, host: str, port: int, guard: CallGuard, connect_timeout: float) -> _Connection:
        limit = guard.timeout(connect_timeout)
        try:
            sock = socket.create_connection((host, port), timeout=limit)
        except OSError as error:
            if isinstance(error, TimeoutError):
                if limit < connect_timeout:
                    guard.abort("deadline")
                guard.check()
                configure = "start the server, or point mylm at it with --base-url or MYLM_BASE_URL"
                raise EndpointUnreachableError(
                    f"cannot reach the {guard.place.provider} endpoint at {guard.place.url}: no answer within "
                    f"{connect_timeout:g} s; {configure}") from None
            guard.check()
            raise unreachable(error, guard.place) from None
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(sock, (host, port))

    def _exchange(self, conn: _Connection, head: bytes, call: HTTPCall, guard: CallGuard,
                  read_timeout: float) -> LeanResponse:
        """Send the request on `conn` and read the answer's head. Raises _Stale if a kept connection turns out
        closed before any of the answer came."""
        reused = conn.idle_since is not None
        conn.idle_since = None
        guard.attach(conn.sock)
        try:
            # Inside the try: a deadline or cancel that came while connecting raises here, and the connection
            # must still be closed (left to the garbage collector, it is a leaked socket).
            limit = guard.timeout(read_timeout)
        except BaseException:
            conn.close()
            guard.detach()
            raise
        try:
            conn.sock.settimeout(limit)
            conn.sock.sendall(head + call.body if call.body else head)
            _quick_acks(conn.sock)
            status, version, headers, cookies = self._head(conn)
            while 100 <= status < 200 and status != 101:  # 100 Continue and the like come before the answer
                status, version, headers, cookies = self._head(conn)
        except TimeoutError:
            conn.close()
            guard.detach()
            if limit < read_timeout:
                guard.abort("deadline")
            guard.check()
            raise LLMTimeoutError(f"the {guard.place.provider} endpoint at {guard.place.url} sent no response "
                                  f"within {read_timeout:g} s (the read timeout)") from None
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            guard.detach()
            guard.check()
            if reused and not conn.buffer and isinstance(error, (ConnectionError, http.client.RemoteDisconnected)):
                raise _Stale from None
            raise unreachable(error, guard.place) from None
        answer = LeanResponse(self, conn, guard, status, version, headers, call.method)
        answer.cookies = cookies
        return answer

    @staticmethod
    def _head(conn: _Connection) -> tuple[int, int, Headers, list[str]]:
        """The status, HTTP version (10, 11), headers and Set-Cookie values (each on its own: a cookie's date
        holds a comma) of the next answer on `conn`."""
        while True:
            end = conn.buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(conn.buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("header")
            if not conn.fill():
                if not conn.buffer:
                    raise http.client.RemoteDisconnected("Remote end closed connection without response")
                raise http.client.IncompleteRead(bytes(conn.buffer))
        raw = conn.take(end + 4)
        lines = raw[:-4].decode("iso-8859-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise http.client.BadStatusLine(lines[0])
        headers = Headers()
        cookies: list[str] = []
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                continue
            key, value = name.strip().lower(), value.strip()
            if key == "set-cookie":
                cookies.append(value)
            dict.__setitem__(headers, key, f"{dict.__getitem__(headers, key)}, {value}"
                             if dict.__contains__(headers, key) else value)
        return int(code), 11 if version == "HTTP/1.1" else 10, headers, cookies

    # ------------------------------------------------------------------------------------------------- pool

    def _get(self, key: tuple[str, int]) -> _Connection | None:
        """A kept connection to `key` still fit for a call (those idle too long or closed are closed)."""
        while True:
            with self._lock:
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            if conn is None:
                return None
            since = conn.idle_since or 0.0
            if time.monotonic() - since <= transport._KEEP_IDLE and not conn.dropped():
                return conn
            conn.close()

    def _put(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(conn.key, deque())
            if len(idle) < self.pool_maxsize:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close every kept connection (and the requests session's)."""
        with self._lock:
            _close_all(self._idle)
        if self._fallback is not None:
            self._fallback.close()


def _close_all(idle: dict[tuple[str, int], deque[_Connection]]) -> None:
    for conns in idle.values():
        while conns:
            conns.pop().close()


class _Stale(Exception):
    """A kept connection the server had closed: nothing was answered on it, so the call goes on a new one."""


_UNSEEN: Any = object()
#: The characters requests' `requote_uri` leaves as they are in a request target (anything else, requests
#: would quote or unquote: such a URL goes through requests).
_PLAIN_TARGET = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]*")
#: requests' own checks of a header's name and value (`requests._internal_utils.HEADER_VALIDATORS`), with `\Z`
#: for its `$`, which lets a final line break through (http.client then refuses it: requests fails such a call).
_HEADER_NAME = re.compile(r"[^:\s][^:\r\n]*\Z")
_HEADER_VALUE = re.compile(r"\S[^\r\n]*\Z|\Z")


class _Sent:
    """What requests' cookie policy reads of the request an answer with cookies came to."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers


def _direct_target(url: str) -> tuple[str, int, str, str] | None:
    """(host, port, Host header, request target) when this client may send to `url` itself: plain HTTP, no
    credentials in the URL, no fragment, a target requests would send unchanged, and no proxy variable
    covering the host (requests bypasses a proxy wherever urllib does)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80
    except ValueError:
        return None
    netloc = parts.netloc
    if parts.scheme != "http" or "@" in netloc or not host or parts.fragment or not netloc.isascii():
        return None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not _PLAIN_TARGET.fullmatch(target) or "%" in target:
        return None
    proxies = getproxies()
    if ("http" in proxies or "all" in proxies) and not proxy_bypass(host):
        return None
    return host, port, netloc, target


def _request_head(call: HTTPCall, path: str, host: str) -> bytes | None:
    """The request line and headers of `call` (as requests sends them: its base headers, then the call's),
    without the Content-Length and the blank line that end it; None when requests would reject a header or
    encode it otherwise (the call then goes through requests, which fails it as it always did)."""
    headers: dict[str, str] = {"Host": host, "Accept": "*/*", "Connection": "keep-alive", **BASE_HEADERS,
                               **call.headers}
    lines = [f"{call.method} {path} HTTP/1.1"]
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str) or not _HEADER_NAME.match(name) \
                or not _HEADER_VALUE.match(value) or not (name + value).isascii():
            return None
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n").encode("ascii")


__all__ = ["Headers", "LeanResponse", "LeanSession"]
