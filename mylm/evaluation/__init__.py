"""`mylm eval`: a suite of small hermetic tool tasks run against an endpoint, scored turn by turn."""

from __future__ import annotations

from .runner import RecordingLLM, TaskResult, Totals, judge_turn, run_task, totals
from .suite import Task, default_suite_path, load_suite

__all__ = [
    "RecordingLLM", "Task", "TaskResult", "Totals", "default_suite_path", "judge_turn", "load_suite",
    "run_task", "totals",
]
