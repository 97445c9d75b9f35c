"""A lean HTTP/1.1 client for `mylm serve`'s upstream calls: keep-alive connections of its own, and the answer's
head and body (Content-Length, chunked, or up to the close) read straight off the socket.

Why: `mylm serve` makes every request's upstream calls (two for a tool call: the turn and the fit probe) from
its own CPU budget. Through requests, urllib3 and http.client one call cost about 0.4 ms of CPU on the bench's
loopback upstream (`scripts/bench_serve.py`), most of it preparing the request (URL, cookies, environment,
hooks) and parsing the answer's headers with the `email` package; this client does what those calls need in a
few dozen lines. Only plain `http://` upstreams that no proxy variable covers take this path (a local llama.cpp
or vLLM, where the server's own cost shows); TLS and proxies go through requests as before, as does everything
the agent sends (only the server's pool uses this session).

The guard's rules are kept: every read is bounded by the idle timeout and the deadline, the guard holds the
socket so a cancel or the deadline shuts it, a kept connection idle too long or closed by the server is not
reused, and its answers are ACKed at once (`transport._quick_acks`).
"""

from __future__ import annotations

import contextlib
import http.client
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

from ..core.errors import ConfigError, EndpointUnreachableError, LLMTimeoutError
from .transport import (
    _KEEP_IDLE,
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
        self._direct: dict[str, tuple[str, int, str] | None] = {}
        self._fallback: Any = None
        # Kept connections are closed when the session is dropped unclosed (a server's app in tests).
        weakref.finalize(self, _close_all, self._idle)

    # ---------------------------------------------------------------------------------------------- sending

    def send_call(self, call: HTTPCall, guard: CallGuard, *, connect_timeout: float,
                  read_timeout: float) -> Response:
        """Send `call` and return its answer once the head is in (any status); the body is not read yet."""
        parts = urlsplit(call.url)
        origin = parts.netloc
        key = f"{parts.scheme}://{origin}"
        if key in self._direct:
            target = self._direct[key]
        else:
            target = self._direct[key] = _direct_target(parts.scheme, origin)
        if target is None:
            if self._fallback is None:
                self._fallback = new_session(self.pool_maxsize)
            return send(self._fallback, call, guard, connect_timeout=connect_timeout, read_timeout=read_timeout)
        host, port, host_header = target
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = _request_head(call, path, host_header)
        while True:
            conn = self._get((host, port))
            reused = conn is not None
            if conn is None:
                conn = self._connect(host, port, guard, connect_timeout)
            try:
                return self._exchange(conn, head, call, guard, read_timeout)
            except _Stale:
                if not reused:
                    raise AssertionError("a new connection cannot be stale") from None
                continue  # a kept connection the server had closed: once more on a new one

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
        limit = guard.timeout(read_timeout)
        try:
            conn.sock.settimeout(limit)
            conn.sock.sendall(head + call.body if call.body else head)
            _quick_acks(conn.sock)
            status, version, headers = self._head(conn)
            while 100 <= status < 200 and status != 101:  # 100 Continue and the like come before the answer
                status, version, headers = self._head(conn)
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
        return LeanResponse(self, conn, guard, status, version, headers, call.method)

    @staticmethod
    def _head(conn: _Connection) -> tuple[int, int, Headers]:
        """The status, HTTP version (10, 11) and headers of the next answer on `conn`."""
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
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                continue
            key, value = name.strip().lower(), value.strip()
            dict.__setitem__(headers, key, f"{dict.__getitem__(headers, key)}, {value}"
                             if dict.__contains__(headers, key) else value)
        return int(code), 11 if version == "HTTP/1.1" else 10, headers

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
            if time.monotonic() - since <= _KEEP_IDLE and not conn.dropped():
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


def _direct_target(scheme: str, netloc: str) -> tuple[str, int, str] | None:
    """(host, port, Host header) when this client may send to `netloc` itself: plain HTTP, no credentials in
    the URL, no proxy variable covering the host (requests bypasses a proxy wherever urllib does)."""
    if scheme != "http" or "@" in netloc:
        return None
    try:
        parts = urlsplit(f"http://{netloc}")
        host, port = parts.hostname, parts.port or 80
    except ValueError:
        return None
    if not host:
        return None
    proxies = getproxies()
    if ("http" in proxies or "all" in proxies) and not proxy_bypass(host):
        return None
    return host, port, netloc


def _request_head(call: HTTPCall, path: str, host: str) -> bytes:
    """The request line and headers of `call` (as requests sends them: its base headers, then the call's)."""
    headers: dict[str, str] = {"Host": host, "Accept": "*/*", "Connection": "keep-alive", **BASE_HEADERS,
                               **call.headers}
    if call.body is not None or call.method in ("POST", "PUT", "PATCH"):
        headers["Content-Length"] = str(len(call.body or b""))
    lines = [f"{call.method} {path} HTTP/1.1"]
    for name, value in headers.items():
        text = str(value)
        if "\r" in text or "\n" in text or "\r" in name or "\n" in name or ":" in name:
            raise ConfigError(f"invalid HTTP header {name!r}: it carries a line break")
        lines.append(f"{name}: {text}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1", "strict")


__all__ = ["Headers", "LeanResponse", "LeanSession"]
