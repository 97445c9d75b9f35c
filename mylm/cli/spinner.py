"""The spinner drawn on stderr while mylm waits for the model's first token (terminals only)."""

from __future__ import annotations

import threading
import time
from typing import IO

_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ASCII_FRAMES = "|/-\\"


class Spinner:
    """An animated `⠋ waiting for the model… 3s` line, drawn from a thread and erased before anything else prints.

    It appears only after `delay` seconds, so quick replies do not flicker; `stop()` returns once the line is gone.
    """

    def __init__(self, stream: IO[str], *, interval: float = 0.1, delay: float = 0.15) -> None:
        self.stream = stream
        self.interval = interval
        self.delay = delay
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        self.frames, self.ellipsis = (_FRAMES, "…") if encoding == "utf8" else (_ASCII_FRAMES, "...")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False

    def start(self, label: str) -> None:
        """Start spinning with `label` (restarting if already running)."""
        self.stop()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(label, self._stop), name="mylm-spinner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and erase the line; safe to call when not running."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        # The thread checks the event under the lock before each frame, so once we hold the lock it draws no more;
        # not joining keeps a Ctrl-C here from leaving the line drawn.
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._drawn = False

    def _run(self, label: str, stop: threading.Event) -> None:
        started = time.monotonic()
        if stop.wait(self.delay):
            return
        frame = 0
        while not stop.is_set():
            seconds = int(time.monotonic() - started)
            text = f"{self.frames[frame % len(self.frames)]} {label}{self.ellipsis}" + (f" {seconds}s" if seconds else "")
            with self._lock:
                if stop.is_set():
                    return
                self.stream.write(f"\r\x1b[K{text}")
                self.stream.flush()
                self._drawn = True
            frame += 1
            stop.wait(self.interval)
