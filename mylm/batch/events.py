"""What a batch reports as it goes: frozen events with a `type` tag, ready for `--json`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


class _Event:
    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON-ready mapping with a leading `type` key."""
        data: dict[str, Any] = {"type": self.type}
        data.update(dataclasses.asdict(self))  # type: ignore[call-overload]
        return data


@dataclass(frozen=True)
class BatchStart(_Event):
    """The batch begins: how many tasks will run, how many were already done (skipped), and of those that run,
    how many had failed before, by how (`{"timed out": 1, "endpoint error": 1}`)."""

    type: ClassVar[str] = "batch_start"
    total: int
    skipped: int
    concurrency: int
    executor: str = "local"
    again: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskStart(_Event):
    """A task was started (or sent to a cluster worker)."""

    type: ClassVar[str] = "task_start"
    id: str
    attempt: int = 1
    workspace: str | None = None


@dataclass(frozen=True)
class TaskRetry(_Event):
    """A task ended in an endpoint error and runs again (`--retries`)."""

    type: ClassVar[str] = "task_retry"
    id: str
    attempt: int
    error: str


@dataclass(frozen=True)
class TaskEnd(_Event):
    """A task ended; `record` is its result line, as written."""

    type: ClassVar[str] = "task_end"
    id: str
    record: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RateLimited(_Event):
    """The endpoint said 429: every task waits `delay` seconds; `limit` requests may be in flight after it."""

    type: ClassVar[str] = "rate_limited"
    delay: float
    limit: int


@dataclass(frozen=True)
class BatchStopping(_Event):
    """No new task starts; the running ones are being cancelled (Ctrl-C, SIGTERM or the caller's token)."""

    type: ClassVar[str] = "batch_stopping"
    running: int


@dataclass(frozen=True)
class BatchEnd(_Event):
    """The batch is over (finished or stopped)."""

    type: ClassVar[str] = "batch_end"
    done: int
    failed: int
    skipped: int
    remaining: int
    interrupted: bool
    wall_s: float


BatchEvent = BatchStart | TaskStart | TaskRetry | TaskEnd | RateLimited | BatchStopping | BatchEnd
