"""The asyncio face of the agent: a run's events as an async iterator, without blocking the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.types import Event, RunResult
    from .streams import AgentStream

_DONE = object()


class AsyncAgentStream:
    """Drives a synchronous `AgentStream` from a worker thread; cancelling the consumer cancels the run."""

    def __init__(self, stream: AgentStream) -> None:
        self._stream = stream
        self._finished = False
        #: The worker's step in progress; kept across a cancelled await so the run is never driven twice at once.
        self._pending: asyncio.Future[object] | None = None

    @property
    def result(self) -> RunResult | None:
        """The run's result, once the events are exhausted."""
        return self._stream.result

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if self._finished:
            raise StopAsyncIteration
        if self._pending is None:
            # The loop blocks on HTTP reads and child processes; a thread keeps the event loop free.
            self._pending = asyncio.ensure_future(asyncio.to_thread(self._next))
        try:
            item = await asyncio.shield(self._pending)
        except asyncio.CancelledError:
            self._stream.cancel()  # the worker stops soon; awaiting again picks up where it is
            raise
        self._pending = None
        if item is _DONE:
            self._finished = True
            raise StopAsyncIteration
        return item  # type: ignore[return-value]

    def _next(self) -> object:
        try:
            return next(self._stream)
        except StopIteration:
            return _DONE

    def cancel(self) -> None:
        """Ask the run to stop as soon as possible."""
        self._stream.cancel()

    async def consume(self) -> RunResult:
        """Run to the end and return the result."""
        async for _ in self:
            pass
        assert self.result is not None
        return self.result
