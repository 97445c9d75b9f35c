"""The blocking core seen from the event loop: each request's reply is produced in a worker thread (the providers
block on sockets) and read here as an async iterator; leaving the iterator early cancels the upstream call at
once (the cancel token aborts its socket).

Workers are kept for the next request once their reply is done: starting a thread per request cost about a
twentieth of the server's CPU per request (profiled with py-spy under scripts/bench_serve.py).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sized
from typing import TypeVar

from ..core.cancel import CancelToken

T = TypeVar("T")

#: Idle workers kept beyond this many exit (the busy ones are bounded by the server's concurrency).
MAX_IDLE_WORKERS = 64


class _End:
    """The producer finished; `error` is what it raised, if anything."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class Workers:
    """Daemon threads that run jobs one at a time and wait for the next (daemon: a reply stuck upstream never
    holds up the process's exit; the server's shutdown cancels what it still has in flight)."""

    def __init__(self, name: str = "mylm-serve", max_idle: int = MAX_IDLE_WORKERS) -> None:
        self.name = name
        self.max_idle = max_idle
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)

    def run(self, job: Callable[[], None]) -> None:
        """Run `job` in an idle worker, or in a new one if none is idle."""
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(jobs,), name=self.name, daemon=True).start()
        jobs.put(job)

    def _work(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            job = jobs.get()
            job()  # a job hands its own failures to its reader (`produced`), so none arrives here
            del job  # nothing of the last reply stays alive while the worker waits
            with self._lock:
                if len(self._idle) >= self.max_idle:
                    return
                self._idle.append(jobs)
                self._returned.notify_all()

    def wait_idle(self, count: int, timeout: float) -> bool:
        """Wait until `count` workers are idle (a reply's reader can finish before its worker is back in the
        pool, so the next request may start another thread); whether they are."""
        with self._returned:
            return self._returned.wait_for(lambda: len(self._idle) >= count, timeout)


#: The process's workers.
WORKERS = Workers()


class Backlog:
    """Whether a reply has items waiting that the event loop can take without waiting: its answer's events may
    then go out in one write (fewer writes cost less CPU per request, and a client reads nothing later). Once the
    reply has ended this stays true: what is left of the answer (its last events) is made without waiting, and
    goes out in the write that ends the stream."""

    def __init__(self) -> None:
        self.items: Sized = ()

    def __len__(self) -> int:
        return len(self.items)


#: A backlog's items once its reply has ended (see `Backlog`).
_ENDED: Sized = (None,)


async def produced(produce: Callable[[CancelToken], Iterator[T]], *, workers: Workers = WORKERS,
                   backlog: Backlog | None = None) -> AsyncIterator[T]:
    """The items `produce(cancel)` yields, produced in a worker thread; its exception is re-raised here.
    `backlog`, if given, tells whether more items are already waiting."""
    loop = asyncio.get_running_loop()
    cancel = CancelToken()
    items: deque[T | _End] = deque()
    if backlog is not None:
        backlog.items = items
    ready = asyncio.Event()
    lock = threading.Lock()
    signalled = False

    def push(item: T | _End) -> None:
        nonlocal signalled
        items.append(item)
        with lock:
            # One wake-up per batch: while the loop has not drained the queue, more items need no new signal.
            if signalled:
                return
            signalled = True
        try:
            loop.call_soon_threadsafe(ready.set)
        except RuntimeError:
            pass  # the loop is gone (the server is shutting down): nobody is reading any more

    def work() -> None:
        try:
            for item in produce(cancel):
                push(item)
                if cancel.cancelled:
                    break
        except BaseException as error:  # noqa: BLE001 - handed to the reader, which re-raises it
            push(_End(error))
            return
        push(_End(None))

    workers.run(work)
    try:
        while True:
            with lock:
                signalled = False
                ready.clear()
            while items:
                item = items.popleft()
                if isinstance(item, _End):
                    if backlog is not None:
                        backlog.items = _ENDED
                    if item.error is not None:
                        raise item.error
                    return
                yield item
            if not items:
                await ready.wait()
    finally:
        cancel.cancel()
