"""Running a tool where the run can abandon it: at the run's deadline or on cancel, without waiting for it."""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import functools
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..core.cancel import CancelToken, remaining
from ..core.errors import CancelledError
from .base import Tool, ToolContext, ToolOutcome, run_tool

#: After a cancel, how long a tool may take to notice its token and return what it did (a bound, not a delay:
#: a cooperative tool returns at once, and its output is kept).
CANCEL_GRACE = 2.0
#: Idle worker threads kept for the next tool (a thread per call cost ~0.1 ms); busy ones are not counted.
_IDLE_WORKERS = 4


class _Workers:
    """Daemon threads that run tools one at a time and wait for the next when done. A tool that overruns keeps
    its thread busy (it is abandoned, not stopped); the next call then gets another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None] | None]] = []

    def run(self, work: Callable[[], None], name: str) -> None:
        """Start `work` on an idle worker, or on a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            _forget_in_forked_children()
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()
        inbox.put(work)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while True:
            work = inbox.get()
            if work is None:
                return
            # A fresh context each time, as a new thread would have: one tool's context variables are not the
            # next one's.
            contextvars.Context().run(work)
            del work
            with self._lock:
                if len(self._idle) >= _IDLE_WORKERS:
                    return
                self._idle.append(inbox)

    def forget(self) -> None:
        """In a forked child: the parent's workers are not there."""
        self._lock = threading.Lock()
        self._idle = []


_workers = _Workers()


def _let_go(lock: _thread.LockType) -> None:
    """Release `lock` unless it is already released."""
    # Released already: the tool finished and the run was cancelled, and either wakes the waiter.
    with contextlib.suppress(RuntimeError):
        lock.release()


@functools.lru_cache(maxsize=1)
def _forget_in_forked_children() -> None:
    """Once, when the first worker starts (not at import)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _workers.forget())


def run_bounded(tool_: Tool, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutcome:
    """Run `tool_` in a worker thread, waiting for it only until `context.deadline` or `context.cancel`.

    Python cannot stop a thread, so a tool that overruns is abandoned: it keeps running in its daemon thread
    until it returns by itself, and whatever it returns then is dropped. The tool gets its own cancel token,
    set when the run is cancelled or the tool is abandoned, so a tool that checks `context.cancel` (or
    `context.time_left()`) stops early. An overrun is reported as an error outcome. On a cancel the tool has
    up to `CANCEL_GRACE` seconds to return (its outcome is then kept), else `CancelledError` is raised;
    Ctrl-C (KeyboardInterrupt) while waiting cancels the tool's token and propagates.
    """
    own = CancelToken()
    # Two bare locks, taken here and let go from the other threads (a threading.Event's condition cost ~10 µs of
    # CPU a call, the wake-up included): `wake` when the tool finished or the run was cancelled, `finished` when
    # the tool returned. Let go at most once each: `_let_go` ignores a second time.
    wake, finished = _thread.allocate_lock(), _thread.allocate_lock()
    wake.acquire()
    finished.acquire()
    box: list[ToolOutcome | BaseException] = []

    def work() -> None:
        try:
            box.append(run_tool(tool_, arguments, replace(context, cancel=own)))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which re-raises it
            box.append(error)
        finally:
            finished.release()
            _let_go(wake)

    def cancelled() -> None:
        own.cancel()
        _let_go(wake)

    started = time.monotonic()
    unregister = context.cancel.on_cancel(cancelled) if context.cancel is not None else (lambda: None)
    try:
        _workers.run(work, "mylm-tool")
        while not box:
            left = remaining(context.deadline)
            if left <= 0 or (context.cancel is not None and context.cancel.cancelled):
                break
            # Bounded slices: an infinite wait would not wake for Ctrl-C on every platform.
            wake.acquire(timeout=min(left, 1.0))
    except BaseException:
        # Ctrl-C: stop the tool, and let it clean up (kill and reap its processes) before the run goes on.
        own.cancel()
        finished.acquire(timeout=CANCEL_GRACE)
        raise
    finally:
        unregister()
    if box:
        outcome = box[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    own.cancel()
    if context.cancel is not None and context.cancel.cancelled:
        if finished.acquire(timeout=CANCEL_GRACE) and not isinstance(box[0], BaseException):
            return box[0]
        raise CancelledError("cancelled")
    took = time.monotonic() - started
    return ToolOutcome(
        f"timed out: the run's time ran out after the tool had run {took:.1f} s; it was abandoned, and "
        "anything it did before that may have happened",
        True,
        took,
        timed_out=True,
    )
