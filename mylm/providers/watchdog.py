"""One thread fires every model call's deadline: starting a timer thread per call cost ~3 ms a request."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

#: [when, sequence, callback or None]: a list, so that cancelling can blank the callback in place.
_Entry = list[Any]


class Watchdog:
    """Runs callbacks at `time.monotonic()` instants from one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[_Entry] = []
        self._order = itertools.count()
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def schedule(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` at `when` (at once if past); returns a function that cancels it."""
        entry: _Entry = [when, next(self._order), callback]
        with self._cond:
            heapq.heappush(self._heap, entry)
            # Also after a fork: threads do not survive it.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mylm-deadlines", daemon=True)
                self._thread.start()
            if self._heap[0] is entry:
                self._cond.notify()

        def cancel() -> None:
            with self._cond:
                if entry[2] is not None:
                    entry[2] = None
                    self._cancelled += 1
                    if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                        # Most calls end long before their deadline: drop the dead entries now and then.
                        self._heap = [e for e in self._heap if e[2] is not None]
                        heapq.heapify(self._heap)
                        self._cancelled = 0

        return cancel

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        entry = heapq.heappop(self._heap)
                        callback = entry[2]
                        if callback is None:
                            self._cancelled -= 1
                            continue
                        entry[2] = None
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            with contextlib.suppress(Exception):  # one failing callback must not stop every later deadline
                callback()


#: The process's watchdog.
WATCHDOG = Watchdog()
