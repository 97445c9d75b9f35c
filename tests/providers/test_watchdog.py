"""The shared deadline thread: fires in time order, skips cancelled deadlines, survives a failing callback."""

from __future__ import annotations

import threading
import time

from mylm.providers.watchdog import Watchdog


def test_deadlines_fire_in_order_and_cancelled_ones_never() -> None:
    watchdog = Watchdog()
    fired: list[str] = []
    done = threading.Event()
    now = time.monotonic()
    watchdog.schedule(now + 0.02, lambda: fired.append("second"))
    cancel = watchdog.schedule(now + 0.01, lambda: fired.append("cancelled"))
    watchdog.schedule(now - 1, lambda: fired.append("first"))
    watchdog.schedule(now + 0.01, lambda: 1 / 0)  # a failing callback does not stop the thread
    watchdog.schedule(now + 0.03, done.set)
    cancel()
    assert done.wait(10)
    assert fired == ["first", "second"]


def test_many_cancelled_deadlines_do_not_pile_up() -> None:
    watchdog = Watchdog()
    later = time.monotonic() + 3600
    for _ in range(1000):
        watchdog.schedule(later, lambda: None)()
    assert len(watchdog._heap) < 200
