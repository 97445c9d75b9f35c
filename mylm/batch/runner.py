"""Running a batch: each task in a fresh workspace, N at once, results appended as tasks end, resumable."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.cancel import CancelToken
from ..core.errors import LLMError, MylmError, WorkspaceError
from .events import (
    BatchEnd,
    BatchEvent,
    BatchStart,
    BatchStopping,
    RateLimited,
    TaskEnd,
    TaskRetry,
    TaskStart,
)
from .gate import GatedLLM, RateGate, defer_rate_limits
from .progress import Progress
from .results import FsyncPolicy, ResultsFile
from .tasks import Task
from .workspaces import make_workspace, remove_workspace

if TYPE_CHECKING:
    from ..agent.loop import Agent
    from ..core.types import RunResult
    from ..telemetry.observer import RunObserver

#: Builds the agent for one task, working in `workspace` (its tools confined there).
AgentFactory = Callable[[Task, Path], "Agent"]
#: Saves a finished task's conversation as a session; returns the session id (or None if not saved).
SessionSaver = Callable[[Task, "RunResult", Path], "str | None"]
#: Stop reasons that count a task as failed: a resume runs it again. Every other ending (an answer, a done tool,
#: the iteration limit's summary answer, a cut-off answer) is done.
FAILED = frozenset({"error", "timeout", "crashed"})


def failure(record: Mapping[str, Any]) -> str | None:
    """How a result line failed, as a resume reports it (`timed out`, `endpoint error`, `error`, `crashed`), or
    None when its task is done."""
    reason = record.get("stop_reason")
    if reason not in FAILED:
        return None
    if reason == "timeout":
        return "timed out"
    if reason == "crashed":
        return "crashed"
    from ..core import errors

    kind = getattr(errors, str(record.get("error_type")), None)
    return "endpoint error" if isinstance(kind, type) and issubclass(kind, LLMError) else "error"


@dataclass(frozen=True)
class TaskContext:
    """What a running task shares with its batch: the cancel token, the rate gate and the reporting hooks."""

    cancel: CancelToken
    gate: RateGate
    emit: Callable[[BatchEvent], None] = lambda event: None
    on_tokens: Callable[[int], None] = lambda count: None
    #: Watches each task's run (its trace), given the task and its agent; local tasks only.
    observe: Callable[[Task, Agent], RunObserver] | None = None


@dataclass(frozen=True)
class TaskJob:
    """How to run one task, picklable so that a cluster worker can run it as well as a local thread."""

    factory: AgentFactory
    retries: int = 1
    keep_workspaces: bool = False
    workspace_root: Path | None = None
    sessions: SessionSaver | None = None

    def __call__(self, task: Task, context: TaskContext) -> dict[str, Any] | None:
        """Run `task` to its end and return its result line; None if it was cancelled (it runs on resume).

        A task that ends in an endpoint error runs again, from a fresh workspace, up to `retries` more times.
        """
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                workspace = make_workspace(task.id, task.workspace, self.workspace_root)
            except WorkspaceError as error:
                return result_record(task, None, wall_s=time.monotonic() - started, attempts=attempt,
                                     error=error)
            context.emit(TaskStart(task.id, attempt, str(workspace)))
            keep = self.keep_workspaces
            try:
                result = self._run(task, workspace, context)
            except MylmError as error:  # the factory failed: a bad setting, a template, ...
                keep = False
                return result_record(task, None, wall_s=time.monotonic() - started, attempts=attempt,
                                     error=error)
            finally:
                if not keep:
                    remove_workspace(workspace)
            if result.stop_reason.value == "cancelled" or context.cancel.cancelled:
                if keep:
                    remove_workspace(workspace)  # a cancelled task leaves nothing: it starts afresh on resume
                return None
            if (result.stop_reason.value == "error" and isinstance(result.error, LLMError)
                    and attempt <= self.retries):
                context.emit(TaskRetry(task.id, attempt + 1, str(result.error)))
                if keep:
                    remove_workspace(workspace)
                continue
            session = self.sessions(task, result, workspace) if self.sessions is not None else None
            return result_record(task, result, wall_s=time.monotonic() - started, attempts=attempt,
                                 workspace=workspace if keep else None, session=session)

    def _run(self, task: Task, workspace: Path, context: TaskContext) -> RunResult:
        agent = self.factory(task, workspace)
        if task.max_iterations is not None:
            agent.max_iterations = task.max_iterations
        if task.timeout is not None:
            agent.timeout = task.timeout
        inner = agent.llm
        defer_rate_limits(inner)
        gated = GatedLLM(inner, context.gate, on_tokens=context.on_tokens,
                         on_rate_limit=lambda delay, limit: context.emit(RateLimited(round(delay, 3), limit)))
        agent.llm = gated
        if agent.compactor is not None and agent.compactor.llm is inner:
            agent.compactor.llm = gated
        observer = context.observe(task, agent) if context.observe is not None else None
        if observer is None:
            return agent.run(task.prompt, cancel=context.cancel)
        stream = agent.stream(task.prompt, cancel=context.cancel)
        try:
            for event in stream:
                observer(event)
        finally:
            observer.end(stream.result)
        assert stream.result is not None
        return stream.result


def result_record(
    task: Task,
    result: RunResult | None,
    *,
    wall_s: float,
    attempts: int,
    error: BaseException | None = None,
    workspace: Path | None = None,
    session: str | None = None,
) -> dict[str, Any]:
    """The result line for a task: what the run produced, or why it could not run."""
    record: dict[str, Any] = {"id": task.id}
    if result is None:
        # Usage null, as `ask --json` says it, when nothing was reported: 0/0 would be a false count.
        record.update(final_text="", stop_reason="error", iterations_used=0, usage=None)
        failure = error
    else:
        record.update(
            final_text=result.final_text,
            stop_reason=result.stop_reason.value,
            iterations_used=result.iterations_used,
            usage=result.reported_usage(),
        )
        failure = result.error
    record.update(
        wall_s=round(wall_s, 3),
        error=str(failure) if failure is not None else None,
        error_type=type(failure).__name__ if failure is not None else None,
        attempts=attempts,
        workspace=str(workspace) if workspace is not None else None,
        session=session,
    )
    if task.extra:
        record["extra"] = dict(task.extra)
    return record


def crash_record(task: Task, error: BaseException) -> dict[str, Any]:
    """The result line of a task whose run raised instead of returning (a bug, or a worker that died)."""
    record = result_record(task, None, wall_s=0.0, attempts=1, error=error)
    record["stop_reason"] = "crashed"
    return record


class Executor(Protocol):
    """Runs the tasks, calling `started` and `finished` for each from the driver's side."""

    name: str

    def run(
        self,
        tasks: Sequence[Task],
        job: TaskJob,
        context: TaskContext,
        started: Callable[[Task], None],
        finished: Callable[[Task, dict[str, Any] | None], None],
    ) -> None:
        """Run until every task has ended or `context.cancel` is set and the running ones have stopped."""
        ...


class LocalExecutor:
    """Threads on this machine: `concurrency` workers take the next task until none is left or it stops."""

    name = "local"

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency

    def run(
        self,
        tasks: Sequence[Task],
        job: TaskJob,
        context: TaskContext,
        started: Callable[[Task], None],
        finished: Callable[[Task, dict[str, Any] | None], None],
    ) -> None:
        pending = deque(tasks)
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    if context.cancel.cancelled or not pending:
                        return
                    task = pending.popleft()
                started(task)
                try:
                    record = job(task, context)
                except Exception as error:  # noqa: BLE001 - one broken task must not stop its worker
                    record = crash_record(task, error)
                finished(task, record)

        workers = [threading.Thread(target=work, name=f"mylm-batch-{i}", daemon=True)
                   for i in range(min(self.concurrency, len(tasks)))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()


@dataclass(frozen=True)
class BatchSummary:
    """How a batch went: counts, the result lines written by this run, and whether it was stopped."""

    total: int
    done: int
    failed: int
    skipped: int
    remaining: int
    interrupted: bool
    wall_s: float
    tokens: int
    rate_limited: int
    records: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    #: Tasks that had failed in the results file and ran again, by how they had failed (`failure`).
    again: Mapping[str, int] = field(default_factory=dict)


def run_batch(
    tasks: Iterable[Task],
    agent_factory: AgentFactory,
    *,
    concurrency: int = 4,
    results: ResultsFile | Path | str | None = None,
    retries: int = 1,
    keep_workspaces: bool = False,
    workspace_root: Path | None = None,
    cancel: CancelToken | None = None,
    on_event: Callable[[BatchEvent], None] | None = None,
    executor: Executor | None = None,
    sessions: SessionSaver | None = None,
    fsync: FsyncPolicy = "line",
    progress: Progress | None = None,
    observe: Callable[[Task, Agent], RunObserver] | None = None,
) -> BatchSummary:
    """Run `tasks`, `concurrency` at once, each with an agent from `agent_factory(task, workspace)`.

    `results` (a path or an open `ResultsFile`) gets one line per finished task as it ends; running again with
    the same file resumes: a task whose last line there is done is skipped, and one that failed (an error, a
    timeout: `FAILED`) runs again and gets a new line, which is the one that counts. Setting `cancel` stops starting
    tasks and cancels the running ones; their results are not written (they run again on resume). `observe`
    watches each local task's run (tracing); a cluster executor's tasks run elsewhere and are not observed.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    listed = list(tasks)
    owned = results if isinstance(results, ResultsFile) else None
    opened = ResultsFile(Path(results), fsync=fsync) if isinstance(results, (str, Path)) else None
    sink = owned or opened
    try:
        failed_before = {id_: how for id_, record in (sink.done if sink is not None else {}).items()
                         if (how := failure(record)) is not None}
        done_before = set(sink.done if sink is not None else ()) - set(failed_before)
        todo = [task for task in listed if task.id not in done_before]
        again = dict(Counter(failed_before[task.id] for task in todo if task.id in failed_before))
        token = cancel or CancelToken()
        tracker = progress or Progress(len(todo))
        tracker.total = len(todo)
        gate = RateGate(concurrency)
        lock = threading.RLock()  # RLock: a signal handler may cancel (and so emit) while this thread emits

        def emit(event: BatchEvent) -> None:
            if on_event is not None:
                with lock:
                    on_event(event)

        records: list[dict[str, Any]] = []

        def started(task: Task) -> None:
            tracker.started()

        def finished(task: Task, record: dict[str, Any] | None) -> None:
            if record is None:
                tracker.abandoned()
                return
            with lock:  # written, counted and reported in one step, so "[n/total]" lines come in order
                if sink is not None:
                    sink.append(record)
                records.append(record)
                tracker.finished(record["stop_reason"] in FAILED)
                emit(TaskEnd(task.id, record))

        unregister = token.on_cancel(lambda: emit(BatchStopping(tracker.snapshot().running)))
        runner = executor or LocalExecutor(concurrency)
        job = TaskJob(agent_factory, retries, keep_workspaces, workspace_root, sessions)
        context = TaskContext(token, gate, emit, tracker.add_tokens, observe)
        begun = time.monotonic()
        emit(BatchStart(len(todo), len(listed) - len(todo), concurrency, runner.name, again))
        try:
            runner.run(todo, job, context, started, finished)
        finally:
            unregister()
        snap = tracker.snapshot()
        summary = BatchSummary(
            total=len(listed), done=snap.done, failed=snap.failed, skipped=len(listed) - len(todo),
            remaining=len(todo) - snap.done, interrupted=token.cancelled, wall_s=time.monotonic() - begun,
            tokens=snap.tokens, rate_limited=gate.rate_limited, records=tuple(records), again=again,
        )
        emit(BatchEnd(summary.done, summary.failed, summary.skipped, summary.remaining, summary.interrupted,
                      round(summary.wall_s, 3)))
        return summary
    finally:
        if opened is not None:
            opened.close()
