"""A thread-safe cancel token and deadline helpers shared by the loop, the providers and the tools."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar

from .errors import CancelledError


class CancelToken:
    """Set once to cancel a run; callbacks let blocked I/O (an HTTP read, a child process) abort at once."""

    def __init__(self) -> None:
        self._set = False
        # Made by the first `wait` only: most tokens are never waited on (a tool's own token, a run's), and a
        # threading.Event costs ~3 µs to make (its Condition probes the lock, raising AttributeError three
        # times), ~9 µs of a step's CPU in the loop.
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next_id = 0

    @property
    def cancelled(self) -> bool:
        """Whether `cancel()` has been called."""
        return self._set

    def cancel(self) -> None:
        """Cancel; runs every registered callback once (from the calling thread)."""
        with self._lock:
            if self._set:
                return
            self._set = True
            event = self._event
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        if event is not None:
            event.set()
        for callback in callbacks:
            with contextlib.suppress(Exception):  # one failing abort must not stop the others
                callback()

    def raise_if_cancelled(self) -> None:
        """Raise `CancelledError` if the token is set."""
        if self._set:
            raise CancelledError("cancelled")

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Register `callback` to run on cancel (at once if already cancelled; what it returns is ignored, so
        `future.cancel` will do); returns an unregister function."""
        with self._lock:
            if not self._set:
                key = self._next_id
                self._next_id += 1
                self._callbacks[key] = callback

                def unregister() -> None:
                    with self._lock:
                        self._callbacks.pop(key, None)

                return unregister
        callback()
        return lambda: None

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking early on cancel; returns whether the token is set."""
        with self._lock:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(max(0.0, seconds))


def remaining(deadline: float | None, *, default: float = float("inf")) -> float:
    """Seconds left before `deadline` (a `time.monotonic()` value), or `default` when there is none."""
    if deadline is None:
        return default
    return deadline - time.monotonic()


#: The deadline of the run whose permission hook is being called: checks the hook makes by running other
#: programs (the approval policy asks git about the repository) stop there. Set by the agent around the call.
hook_deadline: ContextVar[float | None] = ContextVar("mylm_hook_deadline", default=None)
