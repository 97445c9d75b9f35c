"""The Ray executor: tasks go out as Ray tasks to a cluster's nodes; the driver writes every result line."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .._version import install_command
from ..core.cancel import CancelToken
from ..core.errors import ConfigError
from .events import TaskStart
from .gate import RateGate
from .runner import TaskContext, TaskJob, crash_record
from .tasks import Task

#: How often the driver looks up from waiting on the cluster to notice a Ctrl-C.
_POLL_S = 0.2
#: Ray's cancel is best effort: one sent while a task is still being handed to its worker can be lost. So it
#: is sent again this often while tasks run on after a stop...
_RECANCEL_S = 1.0
#: ...and after this long, the tasks still running are cancelled by force (their worker process is killed).
_FORCE_AFTER_S = 5.0

_worker_gates: dict[int, RateGate] = {}
_worker_gates_lock = threading.Lock()


def _worker_gate(limit: int) -> RateGate:
    """One gate per worker process: the 429s one worker sees slow its later tasks (Ray reuses workers)."""
    with _worker_gates_lock:
        if limit not in _worker_gates:
            _worker_gates[limit] = RateGate(limit)
        return _worker_gates[limit]


def run_on_worker(job: TaskJob, task: Task, limit: int) -> dict[str, Any] | None:
    """The Ray task: run one task on whichever node Ray chose.

    `ray.cancel` raises KeyboardInterrupt in this thread, but only between bytecodes: a thread blocked in a
    socket read would never see it. So the task runs in a thread of its own while this one waits in short
    joins, and turns the interrupt into a cancel of the task's token, which aborts the read at once.
    """
    token = CancelToken()
    outcome: list[dict[str, Any] | None] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(job(task, TaskContext(token, _worker_gate(limit))))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which raises it
            failure.append(error)

    worker = threading.Thread(target=work, name=f"mylm-task-{task.id}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(_POLL_S)
    except KeyboardInterrupt:
        token.cancel()
        worker.join()
        raise
    if failure:
        raise failure[0]
    return outcome[0] if outcome else None


def import_ray() -> Any:
    """The `ray` module, or a readable error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--executor ray needs Ray: {install_command('ray')}") from None
    return ray


class RayExecutor:
    """Runs tasks as Ray tasks: at most `concurrency` in flight, spread over the cluster's nodes.

    Each Ray task asks for no CPU (an agent mostly waits on its model), so `concurrency`, not the cluster's
    CPU count, decides how many run; `SPREAD` scheduling puts them on every node. The task's `workspace` must
    exist at the same path on every node (a shared file system), since each task copies it where it runs.
    """

    name = "ray"

    def __init__(
        self, concurrency: int, *, address: str = "auto", init: dict[str, Any] | None = None
    ) -> None:
        self.concurrency = concurrency
        self.address = address
        self.init = dict(init or {})

    def connect(self) -> None:
        """Join (or start) the Ray cluster now, before a live progress line is drawn: what Ray prints while it
        starts (a token-auth warning) then lands above the line instead of inside it."""
        self._connect(import_ray())

    def _connect(self, ray: Any) -> None:
        if ray.is_initialized():
            return
        import logging

        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.WARNING, **self.init}
        if self.address == "local":
            # A private instance on this machine: every Ray service listens on loopback only.
            options.setdefault("_node_ip_address", "127.0.0.1")
        try:
            ray.init(address=self.address, **options)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise ConfigError(f"cannot join the Ray cluster at {self.address}: {error}") from None

    def run(
        self,
        tasks: Sequence[Task],
        job: TaskJob,
        context: TaskContext,
        started: Callable[[Task], None],
        finished: Callable[[Task, dict[str, Any] | None], None],
    ) -> None:
        ray = import_ray()
        if not tasks:
            return
        self._connect(ray)
        remote = ray.remote(run_on_worker).options(num_cpus=0, max_retries=0, scheduling_strategy="SPREAD")
        # The job goes to the object store once, not once per task.
        job_ref = ray.put(job)
        pending = deque(tasks)
        running: dict[Any, Task] = {}
        cancelled_at: float | None = None
        sent_at = 0.0
        forced = False
        while pending or running:
            while pending and len(running) < self.concurrency and not context.cancel.cancelled:
                task = pending.popleft()
                started(task)
                context.emit(TaskStart(task.id))
                running[remote.remote(job_ref, task, self.concurrency)] = task
            if context.cancel.cancelled:
                pending.clear()
                now = time.monotonic()
                cancelled_at = now if cancelled_at is None else cancelled_at
                if not forced and now - sent_at >= _RECANCEL_S:
                    forced = now - cancelled_at >= _FORCE_AFTER_S
                    for ref in running:
                        ray.cancel(ref, force=forced)
                    sent_at = now
            if not running:
                break
            ready, _ = ray.wait(list(running), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                task = running.pop(ref)
                finished(task, self._outcome(ray, ref, task, context))

    def _outcome(self, ray: Any, ref: Any, task: Task, context: TaskContext) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] | None = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return None
        except ray.exceptions.RayError as error:
            if context.cancel.cancelled:
                return None  # cut short by the stop: it runs again on resume
            return crash_record(task, error)
        if record is not None:
            context.on_tokens(int((record.get("usage") or {}).get("completion_tokens", 0)))
        return record
