"""The batch's progress: counts and rates (tasks/min, ETA, tokens/s), updated from any thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Snapshot:
    """Progress at one moment."""

    done: int
    total: int
    running: int
    failed: int
    elapsed_s: float
    tokens: int

    @property
    def tasks_per_min(self) -> float:
        """Tasks finished per minute so far."""
        return self.done * 60.0 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens generated per second so far, all tasks together."""
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far (None until a task has finished)."""
        if self.done == 0 or self.elapsed_s <= 0:
            return None
        return (self.total - self.done) * self.elapsed_s / self.done


class Progress:
    """Thread-safe counters; `snapshot()` reads them all at once."""

    def __init__(self, total: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self.total = total
        self.done = self.running = self.failed = self.tokens = 0

    def started(self) -> None:
        with self._lock:
            self.running += 1

    def finished(self, failed: bool) -> None:
        with self._lock:
            self.running -= 1
            self.done += 1
            self.failed += int(failed)

    def abandoned(self) -> None:
        """A running task was cancelled: it is neither done nor failed, and runs again on resume."""
        with self._lock:
            self.running -= 1

    def add_tokens(self, count: int) -> None:
        with self._lock:
            self.tokens += count

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self.done, self.total, self.running, self.failed, self._clock() - self._started,
                            self.tokens)
