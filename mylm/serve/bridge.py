"""The blocking core seen from the event loop: each request's reply is produced in a thread of its own (the
providers block on sockets) and read here as an async iterator; leaving the iterator early cancels the upstream
call at once (the cancel token aborts its socket)."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

from ..cancel import CancelToken

T = TypeVar("T")


class _End:
    """The producer finished; `error` is what it raised, if anything."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


async def produced(produce: Callable[[CancelToken], Iterator[T]], *, name: str = "mylm-serve") -> AsyncIterator[T]:
    """The items `produce(cancel)` yields, produced in a new thread; its exception is re-raised here."""
    loop = asyncio.get_running_loop()
    cancel = CancelToken()
    items: deque[T | _End] = deque()
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

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        while True:
            with lock:
                signalled = False
                ready.clear()
            while items:
                item = items.popleft()
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
            if not items:
                await ready.wait()
    finally:
        cancel.cancel()

