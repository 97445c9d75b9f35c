"""HTTP plumbing the routes share: a bounded body read, JSON answers, server-sent events, and noticing a client
that went away (so its upstream call is cancelled at once, not at the next write)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sized
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..core.errors import RequestError

T = TypeVar("T")


#: `json.dumps(..., ensure_ascii=False, separators=(",", ":"))` made once: `json.dumps` with any argument of its
#: own builds a new encoder per call, and every streamed chunk is encoded (the encoder keeps no state between
#: calls, so one serves every thread).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: The C function the encoder writes every string with (its keys' too) when `ensure_ascii` is off.
string_literal: Callable[[str], str] = json.encoder.encode_basestring


def dumps(document: Any) -> bytes:
    """Compact UTF-8 JSON (non-ASCII kept as is: every client decodes UTF-8)."""
    return _ENCODE(document).encode("utf-8")


def json_response(document: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer."""
    return Response(dumps(document), status_code=status, media_type="application/json", headers=headers)


def sse(document: Any, event: str | None = None) -> bytes:
    """One server-sent event carrying `document` as JSON (or a literal string such as `[DONE]`)."""
    data = document.encode() if isinstance(document, str) else dumps(document)
    head = f"event: {event}\n".encode() if event else b""
    return b"%sdata: %s\n\n" % (head, data)


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole body, at most `limit` bytes (413 beyond), within `timeout` seconds (408: a client trickling its
    body, slowloris-style, does not hold the request open)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError("the Content-Length header is not a number")
        if int(declared) > limit:
            raise too_large(limit)

    async def read() -> bytes:
        parts: list[bytes] = []
        size = 0
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise too_large(limit)
            parts.append(part)
        return b"".join(parts)

    try:
        # asyncio.timeout (3.11) times the read in this task; wait_for runs it in a task of its own, which cost
        # each request a task's creation and a hop through the loop.
        within = getattr(asyncio, "timeout", None)
        if within is None:
            return await asyncio.wait_for(read(), timeout)
        async with within(timeout):
            return await read()
    except asyncio.TimeoutError:
        raise RequestError(f"the request body did not arrive within {timeout:g} s", status=408,
                           kind="timeout") from None
    except ClientDisconnect:
        raise RequestError("the client went away while sending the body", status=400) from None


def too_large(limit: int) -> RequestError:
    """The 413 for a body over `limit` bytes."""
    return RequestError(f"the request body is larger than the server's limit of {limit:,} bytes", status=413,
                        kind="request_too_large")


async def until_disconnect(receive: Receive) -> None:
    """Return once the client has gone away (the body has been read already, so only that can arrive)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def watching(request: Request) -> asyncio.Future[None]:
    """A task done once the client of `request` has gone away (its body has been read)."""
    return asyncio.ensure_future(until_disconnect(request.receive))


async def settled_unless_disconnected(request: Request, task: asyncio.Future[Any], within: float,
                                      watcher: asyncio.Future[None] | None = None) -> bool | None:
    """Wait up to `within` seconds for `task` (never cancelling it): whether it is done, or None if the client
    goes away first. (`unless_disconnected` with `_settled` inside, in one wait: a task and a wait fewer.) The
    client is watched by `watcher` if given (`watching`: left running, for the stream to watch with next), else
    by a task of this call's own."""
    own = watcher is None
    if watcher is None:
        watcher = watching(request)
    try:
        if not task.done() and not watcher.done():
            await first_done(task, watcher, within)
        if task.done():
            return True
        return None if watcher.done() else False
    finally:
        if own:
            watcher.cancel()


async def first_done(one: asyncio.Future[Any], other: asyncio.Future[Any], timeout: float) -> None:
    """Return once `one` or `other` is done, or `timeout` seconds have passed (neither is cancelled): what
    `asyncio.wait(..., return_when=FIRST_COMPLETED)` does for two, without its sets, its counter and its copies
    of the done and pending futures."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    one.add_done_callback(wake)
    other.add_done_callback(wake)
    timer = loop.call_later(timeout, wake)
    try:
        await woken
    finally:
        timer.cancel()
        one.remove_done_callback(wake)
        other.remove_done_callback(wake)


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None (with `work` cancelled) if the client goes away first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


class EventStream(Response):
    """A `text/event-stream` answer from an async iterator of byte chunks. The iterator is cancelled as soon as
    the client disconnects (the upstream call with it), and closed whatever happens."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], headers: dict[str, str] | None = None, *,
                 more: Sized = (), closed: Callable[[], None] | None = None,
                 keepalive: bytes | Callable[[], bytes] = b"",
                 interval: float = 0.0, eager: bool = False, watcher: asyncio.Future[None] | None = None) -> None:
        """`more` is non-empty while more events are ready to be taken at once: they are gathered into one write
        (the client gets them no later: nothing is awaited meanwhile). `closed` is called once the answer is
        over, however it ended. `keepalive` is written whenever nothing else was for `interval` seconds (after
        the first event: an API's own ping may not come before its opening event; from the start if `eager`,
        for an API whose stream has no opening event); a callable is called for each one, at the moment it is
        written (an event numbered in its stream). `watcher` (from `watching`) is the task already watching for
        the client going away, if there is one: one task a request, not one before the headers and one after."""
        # No body and so no Content-Length: the answer is chunked, its length unknown until it ends.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "Content-Type": "text/event-stream; charset=utf-8",
                           **(headers or {})})
        self.events = events
        self.more = more
        self.closed = closed
        self.keepalive = keepalive
        self.interval = interval
        self.eager = eager
        self.watcher = watcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The events are written in this task; the client going away cancels it (only while it writes them: a
        # cancel requested later is never made), and that cancel ends the answer as the client's leaving does.
        # A task of their own and a wait on it and the watcher cost each request more than the rest of this.
        watcher = self.watcher if self.watcher is not None else asyncio.ensure_future(until_disconnect(receive))
        current = asyncio.current_task()
        writing = [True]
        left = [False]

        def gone(_: object) -> None:
            if writing[0] and current is not None:
                left[0] = True
                current.cancel()

        watcher.add_done_callback(gone)
        try:
            await self._stream(send)
        except asyncio.CancelledError:
            if not left[0]:
                raise  # cancelled from outside (the server shutting down): not this answer's to swallow
            uncancel = getattr(current, "uncancel", None)  # 3.11: the task's count of cancels asked for
            if uncancel is not None:
                uncancel()
        finally:
            writing[0] = False
            watcher.remove_done_callback(gone)
            watcher.cancel()  # it ends at its next step; nothing waits for it
            close: Callable[[], Awaitable[None]] | None = getattr(self.events, "aclose", None)
            try:
                if close is not None:
                    await close()
            finally:
                if self.closed is not None:
                    self.closed()

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        lock = asyncio.Lock()
        last = [time.monotonic()]

        async def write(body: bytes | Callable[[], bytes], more: bool = True) -> None:
            async with lock:
                # Made under the lock: a numbered keep-alive is written in the order it was numbered.
                chunk = body() if callable(body) else body
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
                last[0] = time.monotonic()

        ticker = _Ticker(lambda: self._tick(write, last, pending), self.interval)
        pending: list[bytes] = []
        ticking = bool(self.keepalive) and self.interval > 0
        if self.eager and ticking:
            ticker.start()
        try:
            async for chunk in self.events:
                pending.append(chunk)
                if not self.more:
                    await write(b"".join(pending))
                    pending.clear()
                    if ticking:
                        ticker.start()
        except OSError:
            return  # the client went away mid-write
        finally:
            await ticker.stop()
        await write(b"".join(pending), more=False)

    async def _tick(self, write: Callable[[bytes | Callable[[], bytes]], Awaitable[None]],
                    last: list[float], pending: list[bytes]) -> None:
        """A keep-alive whenever the stream has been silent for `interval` seconds: the model may think or be
        corrected for minutes before the answer's first byte, and clients and proxies drop a silent stream. Never
        while events are gathered for a write: one made now would be written before them, out of their order."""
        while True:
            wait = last[0] + self.interval - time.monotonic()
            if wait > 0 or pending:
                await asyncio.sleep(max(wait, self.interval / 10))
                continue
            try:
                await write(self.keepalive)
            except OSError:
                return


class _Ticker:
    """The keep-alive task of a stream, started only once `interval` seconds have passed: most streams end
    sooner, and a task per stream, created and cancelled, cost each request more than the rest of its
    keep-alive logic (the task's first act was to sleep `interval` anyway)."""

    def __init__(self, tick: Callable[[], Awaitable[None]], interval: float) -> None:
        self._tick = tick
        self._interval = interval
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        """Tick from `interval` seconds from now (again: no-op)."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._begin)

    def _begin(self) -> None:
        self._task = asyncio.ensure_future(self._tick())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
