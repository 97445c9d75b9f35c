"""`mylm serve --workers N`: N server processes on one listening socket, with the state that must be shared,
shared.

The parent binds the socket once (the loopback and key rules are checked before), builds the application once,
then forks the workers: each runs the very uvicorn server `server.run` runs on that inherited socket, and the
kernel hands each new connection to whichever worker accepts it first. Forking (not spawning) keeps the one
application the CLI built, with its one set of error messages, and costs no re-import; the parent itself never
serves, so a worker it forks later (to replace one that died) starts from the same untouched state.

What is shared, and how (docs/serve.md, "Workers"):

- the responses kept for `previous_response_id`: a SQLite file in a private directory the parent owns
  (`stored.SharedResponses`);
- the per-client connection limit: counters in memory shared by every worker (`SharedConnections`), so a client
  may hold `max_connections` in all, however the kernel spreads them;
- `--max-concurrency`: divided, each worker serving its share upstream at once (a request waits for its own
  worker's share, never more than the limit in all).

What replies taught about the upstream (its context window, whether its template opens `<think>`, whether its
stops cut reasoning) stays each worker's own: a worker learns it once more, which costs a request to the upstream
at most, never a wrong answer.

Signals: SIGINT or SIGTERM on the parent asks every worker to drain and stop (a second Ctrl-C cancels what is left,
as for one process). A worker that dies is reported in one line and replaced; workers that keep dying (more than
`RESTARTS` in `RESTART_WINDOW` seconds) stop the server with an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import logging
import mmap
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import WorkersFailed
from .server import DRAIN_SECONDS, run
from .stored import SharedResponses

logger = logging.getLogger("mylm.serve")

#: The signals that stop the server.
STOPPING = (signal.SIGINT, signal.SIGTERM)
#: Worker deaths tolerated within `RESTART_WINDOW` seconds (beyond: the server stops; something is wrong).
RESTARTS = 5
RESTART_WINDOW = 60.0
#: Client addresses the shared connection counters hold at once (beyond: a new address is not limited).
ADDRESSES = 4096
#: How a Linux process asks for a signal when its parent dies (prctl's PR_SET_PDEATHSIG).
_PR_SET_PDEATHSIG = 1

#: A function called in each worker once it is forked, before it serves (its number from 1); what it returns, if
#: callable, is called when the worker stops (the CLI starts each worker's own tracing there).
Started = Callable[[int], "Callable[[], None] | None"]


def shares(total: int, workers: int) -> list[int]:
    """`total` divided among `workers` as evenly as whole numbers go (the first ones get the remainder)."""
    base, left = divmod(total, workers)
    return [base + (1 if i < left else 0) for i in range(workers)]


class SharedConnections:
    """The connections each client address holds open, counted across worker processes.

    A table in anonymous shared memory (made before the fork, so every worker maps the same pages): per slot the
    address's 64-bit hash, then one counter per worker. A worker counts in its own column, so the parent can zero
    a dead worker's connections (the kernel closed them) without knowing whose they were. Every update holds a
    POSIX lock on a file in the parent's private directory, which the kernel releases if its holder dies."""

    def __init__(self, directory: Path, workers: int, addresses: int = ADDRESSES) -> None:
        self.workers = workers
        self.addresses = addresses
        self.width = 1 + workers
        self._memory = mmap.mmap(-1, 8 * addresses * self.width)
        self._table = memoryview(self._memory).cast("q")
        self._lock = os.open(directory / "connections.lock", os.O_RDWR | os.O_CREAT, 0o600)
        #: This process's counters: its worker number (column 0 holds the hashes).
        self.column = 1

    def take(self, address: str, limit: int) -> bool:
        """Count a connection of `address` unless it holds `limit` already (in all workers)."""
        key = _key(address)
        with self._locked():
            slot = self._slot(key, insert=True)
            if slot is None:
                return True  # the table is full of other addresses: this one is not limited
            if self._total(slot) >= limit:
                return False
            self._table[slot * self.width + self.column] += 1
            return True

    def give(self, address: str) -> None:
        """A connection of `address` closed."""
        key = _key(address)
        with self._locked():
            slot = self._slot(key, insert=False)
            if slot is not None:
                cell = slot * self.width + self.column
                self._table[cell] = max(0, self._table[cell] - 1)
                self._release(slot)

    def forget(self, column: int) -> None:
        """A worker died: its connections are gone."""
        with self._locked():
            for slot in range(self.addresses):
                if self._table[slot * self.width] not in (0, -1):
                    self._table[slot * self.width + column] = 0
                    self._release(slot)

    def open_of(self, address: str) -> int:
        """The connections `address` holds open now, in all workers."""
        with self._locked():
            slot = self._slot(_key(address), insert=False)
            return 0 if slot is None else self._total(slot)

    def _slot(self, key: int, *, insert: bool) -> int | None:
        """The slot of `key` (open addressing; -1 marks a slot freed after use), or a free one to put it in."""
        free = None
        start = key % self.addresses
        for step in range(self.addresses):
            slot = (start + step) % self.addresses
            found = self._table[slot * self.width]
            if found == key:
                return slot
            if found == -1 and free is None:
                free = slot
            if found == 0:
                free = slot if free is None else free
                break
        if not insert or free is None:
            return None
        self._table[free * self.width] = key
        return free

    def _total(self, slot: int) -> int:
        start = slot * self.width
        return sum(self._table[start + 1:start + self.width])

    def _release(self, slot: int) -> None:
        if self._total(slot) == 0:
            self._table[slot * self.width] = -1

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.lockf(self._lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self._lock, fcntl.LOCK_UN)


def _key(address: str) -> int:
    """A 64-bit hash of `address`, never 0 (an empty slot) or -1 (a freed one)."""
    value = int.from_bytes(hashlib.blake2b(address.encode("utf-8", "replace"), digest_size=8).digest(), "little",
                           signed=True)
    return value if value not in (0, -1) else 1


def run_workers(app: Any, sock: socket.socket, workers: int, *, drain: float = DRAIN_SECONDS,
                ready: Callable[[], None] | None = None, say: Callable[[str], None] = lambda line: None,
                started: Started | None = None) -> None:
    """Serve `app` (from `app.create_app`) on `sock` in `workers` processes until SIGINT/SIGTERM, then drain them
    all (blocks; the main thread's). `ready` is called once the workers run and a signal would stop them; `say`
    reports a worker's death in one line. Raises `WorkersFailed` when workers keep dying."""
    directory = Path(tempfile.mkdtemp(prefix="mylm-serve-"))  # mode 0700: the conversations are the clients'
    try:
        server = app.app.state.server
        server.stored = SharedResponses(directory / "responses.sqlite3")
        app.connections = SharedConnections(directory, workers)
        slots = shares(server.config.max_concurrency, workers)
        Supervisor(app, sock, slots, drain=drain, say=say, started=started).run(ready)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class Supervisor:
    """The parent: forks the workers, forwards the stopping signals, replaces a worker that died."""

    def __init__(self, app: Any, sock: socket.socket, slots: list[int], *, drain: float,
                 say: Callable[[str], None], started: Started | None) -> None:
        self.app, self.sock, self.slots, self.drain = app, sock, slots, drain
        self.say, self.started = say, started
        self.children: dict[int, int] = {}  # pid -> worker number
        self.stopping = 0  # stopping signals received
        self.deaths: deque[float] = deque()
        # A signal the server was started with ignored (a background job's SIGINT) stays ignored, in every process.
        self.ignored = {number for number in STOPPING if signal.getsignal(number) is signal.SIG_IGN}
        self.parent = os.getpid()

    def run(self, ready: Callable[[], None] | None) -> None:
        previous = {number: signal.signal(number, self._signalled) for number in STOPPING
                    if number not in self.ignored}
        failed = None
        try:
            for number in range(1, len(self.slots) + 1):
                self._fork(number)
            if ready is not None:
                ready()
            while self.children:
                pid, status = os.wait()
                number = self.children.pop(pid, 0)
                if not number or self.stopping:
                    continue
                self.app.connections.forget(number)
                failed = self._replace(number, pid, status)
                if failed is not None:
                    self._stop(signal.SIGTERM)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        if failed is not None:
            raise WorkersFailed(failed)

    def _replace(self, number: int, pid: int, status: int) -> str | None:
        """Report worker `number`'s death and fork another; the reason to stop instead, if the workers keep
        dying."""
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and now - self.deaths[0] > RESTART_WINDOW:
            self.deaths.popleft()
        how = _death(status)
        if len(self.deaths) > RESTARTS:
            self.say(f"mylm serve: worker {number} (pid {pid}) {how}; stopping")
            return f"the workers died {len(self.deaths)} times within {RESTART_WINDOW:g} s; the last {how}"
        self.say(f"mylm serve: worker {number} (pid {pid}) {how}; starting another")
        self._fork(number)
        return None

    def _signalled(self, number: int, frame: Any) -> None:
        self._stop(number)

    def _stop(self, number: int) -> None:
        """Ask every worker to drain and stop; a second Ctrl-C (SIGINT to them) cancels what is left."""
        self.stopping += 1
        forwarded = signal.SIGINT if self.stopping > 1 and number == signal.SIGINT else signal.SIGTERM
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, forwarded)

    def _fork(self, number: int) -> None:
        # The stopping signals wait until the worker has its server's handler (or the parent knows the pid).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self._worker(number, blocked)  # never returns
            self.children[pid] = number
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if self.stopping:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _worker(self, number: int, mask: Any) -> None:
        """The worker's whole life (in the forked child): serve until told to stop, then leave without running
        anything of the parent's (its `finally` blocks, its clean-up at exit)."""
        code = 1
        try:
            for each in STOPPING:
                # Not the parent's handlers (they signal the workers); the server puts its own in place.
                signal.signal(each, signal.SIG_IGN if each in self.ignored else _not_yet)
            _die_with_parent(self.parent)
            self.app.connections.column = number
            server = self.app.app.state.server
            server.as_worker(number, len(self.slots), self.slots[number - 1])
            finish = self.started(number) if self.started is not None else None
            try:
                # Once the server's handler is in place a stopping signal may arrive: unblock them.
                run(self.app, self.sock, drain=self.drain, ready=lambda: _unblock(mask))
            finally:
                if callable(finish):
                    finish()
            code = 0
        except KeyboardInterrupt:
            code = 0
        except BaseException as error:  # noqa: BLE001 - a worker's failure is one line, never a traceback
            with contextlib.suppress(BaseException):
                self.say(f"mylm serve: worker {number}: {error}")
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _unblock(mask: Any) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _not_yet(number: int, frame: Any) -> None:
    """A stopping signal before the worker's server has its handler: the parent sends it again if it must."""


def _die_with_parent(parent: int) -> None:
    """Ask Linux for a SIGTERM (a draining stop) if the parent dies without stopping this worker (it was killed):
    no worker is left serving on its own."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)  # it died before the request: pending until the server listens


def _death(status: int) -> str:
    """How a worker ended, in words (`status` from `os.wait`)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"was killed by {name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
