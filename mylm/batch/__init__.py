"""Many runs at once: `run_batch(tasks, agent_factory, concurrency=..., results=...)`, resumable."""

from __future__ import annotations

from ..core.errors import ResultsFileError, TaskFileError, WorkspaceError
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
from .gate import GatedLLM, RateGate
from .progress import Progress, Snapshot
from .results import ResultsFile
from .runner import (
    AgentFactory,
    BatchSummary,
    Executor,
    LocalExecutor,
    TaskContext,
    TaskJob,
    result_record,
    run_batch,
)
from .tasks import Task, load_tasks, parse_tasks
from .workspaces import make_workspace

__all__ = [
    "AgentFactory", "BatchEnd", "BatchEvent", "BatchStart", "BatchStopping", "BatchSummary", "Executor",
    "GatedLLM", "LocalExecutor", "Progress", "RateGate", "RateLimited", "ResultsFile", "ResultsFileError",
    "Snapshot", "Task", "TaskContext", "TaskEnd", "TaskFileError", "TaskJob", "TaskRetry", "TaskStart",
    "WorkspaceError", "load_tasks", "make_workspace", "parse_tasks", "result_record", "run_batch",
]
