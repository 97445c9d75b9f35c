"""A run's events as a synchronous stream: iterate it for the events, then read its `result`."""

from __future__ import annotations

from collections.abc import Generator

from ..core.cancel import CancelToken
from ..core.types import Event, RunResult


class AgentStream:
    """The events of one run as they happen; `result` is set once the iteration is exhausted."""

    def __init__(self, events: Generator[Event, None, RunResult], cancel: CancelToken) -> None:
        self._events = events
        self._cancel = cancel
        self.result: RunResult | None = None

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> Event:
        if self.result is not None:
            raise StopIteration  # finished: iterating again yields nothing and keeps the result
        try:
            return next(self._events)
        except StopIteration as stop:
            self.result = stop.value
            raise

    def cancel(self) -> None:
        """Ask the run to stop as soon as possible (aborts an in-flight model stream or tool)."""
        self._cancel.cancel()

    def consume(self) -> RunResult:
        """Run to the end (events are kept in the result) and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result
