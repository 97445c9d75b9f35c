"""Signal handlers installed for the length of a block, restored after it (and left alone off the main thread)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def handling(names: tuple[str, ...], handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Route the signals called `names` (those this platform has) to `handler` while the block runs.

    A signal ignored when mylm started stays ignored, as POSIX programs leave it: `nohup` ignores SIGHUP, and a
    shell's background job SIGINT, so that they are not stopped by them."""
    previous: dict[int, Any] = {}
    try:
        for name in names:
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
                previous[number] = signal.signal(number, handler)
    except ValueError:  # not the main thread (an embedding application): leave its signals alone
        pass
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
