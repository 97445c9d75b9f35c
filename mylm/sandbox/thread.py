"""Threads that confine themselves, then start commands for other threads, which inherit the confinement."""

from __future__ import annotations

import functools
import gc
import os
import queue
import threading
from typing import Callable, TypeVar

from ..errors import ToolError

T = TypeVar("T")

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


class _NoCollection:
    """No garbage collection while any thread is inside: a finalizer that ran on a confined thread would be
    denied its files (or its network). Counted, so that two threads starting commands at once do not turn
    collection back on under each other."""

    def __enter__(self) -> None:
        global _gc_pauses, _gc_was_enabled
        with _gc_lock:
            if _gc_pauses == 0:
                _gc_was_enabled = gc.isenabled()
                gc.disable()
            _gc_pauses += 1

    def __exit__(self, *_: object) -> None:
        global _gc_pauses
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


no_collection = _NoCollection()

_Job = tuple[Callable[[], object], list[tuple[bool, object]], threading.Event]


class ConfinedThread:
    """A thread that applies `restrict` to itself once, then runs functions handed to it (one at a time).

    Landlock, seccomp and the capability bounding set apply to one thread and are inherited by what it
    starts, so a command started here is confined while mylm's other threads are not. A thread kept for a
    ruleset used by many commands saves making a thread and confining it per command (~0.4 ms).
    """

    def __init__(self, restrict: Callable[[], None], name: str = "mylm-confined") -> None:
        _reset_in_forked_children()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._restrict = restrict
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        with no_collection:
            self._thread.start()
            self._ready.wait()

    def run(self, function: Callable[[], T]) -> T:
        """`function()` on the confined thread; raises `ToolError` if the confinement could not be applied
        (then nothing ran), else what `function` raises."""
        if self._failure is not None:
            raise ToolError(f"the command did not run: its sandbox could not be applied ({self._failure})")
        box: list[tuple[bool, object]] = []
        done = threading.Event()
        with no_collection:
            self._jobs.put((function, box, done))
            try:
                done.wait()
            except BaseException:
                done.wait()  # Ctrl-C: let the function finish, so the caller's clean-up finds its process
                raise
        ok, value = box[0]
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]

    @property
    def thread(self) -> threading.Thread:
        """The thread itself."""
        return self._thread

    def close(self) -> None:
        """End the thread once the functions already handed to it have run."""
        self._jobs.put(None)

    @property
    def failed(self) -> bool:
        """Whether the confinement could not be applied (every `run` then raises)."""
        return self._failure is not None

    def _serve(self) -> None:
        # Python runs here only while a caller holds collection off (`no_collection`): a collection, or a
        # finalizer dropped by a reference, on this thread would run confined. So the bound method is made
        # before the thread confines itself, and every reference to a job is dropped before its caller wakes.
        get = self._jobs.get
        try:
            self._restrict()
        except BaseException as error:  # noqa: BLE001 - reported to every caller instead
            self._failure = error
            return
        finally:
            self._ready.set()
        while True:
            job = get()
            if job is None:
                return
            function, box, done = job
            del job
            try:
                box.append((True, function()))
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                box.append((False, error))
                del error
            finally:
                del function, box
                done.set()
                del done


@functools.lru_cache(maxsize=1)
def _reset_in_forked_children() -> None:
    """Once, when the first confined thread starts: a child forked while collection was paused for one would
    otherwise keep it off for good (the thread that would turn it back on is not in the child)."""
    forget_after_fork(_forget_pauses)


def _forget_pauses() -> None:
    global _gc_pauses, _gc_lock
    _gc_lock = threading.Lock()
    if _gc_pauses and _gc_was_enabled:
        gc.enable()
    _gc_pauses = 0


def run_confined(restrict: Callable[[], None], function: Callable[[], T]) -> T:
    """`function()` on a fresh thread confined by `restrict`, which then ends."""
    thread = ConfinedThread(restrict, name="mylm-sandboxed-spawn")
    try:
        return thread.run(function)
    finally:
        thread.close()


def forget_after_fork(forget: Callable[[], None]) -> None:
    """Call `forget` in a forked child: the threads kept in the parent do not exist there."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=forget)
