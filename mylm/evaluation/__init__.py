"""`mylm eval`: BFCL questions (scored like BFCL's AST checker) and small agent tasks (each in a fresh workspace),
asked in mylm's protocol (with and without the grammar), through the endpoint's own tool calling, or through an
in-process `mylm serve`; scored into one table."""

from __future__ import annotations

from .bfcl import CATEGORIES, CORE_CATEGORIES, Question
from .checker import Call, Verdict, check, check_call
from .modes import MODES, Limits, Reply
from .recording import RecordingLLM
from .runner import TaskResult, Totals, judge_turn, run_task, run_task_native, totals
from .score import Item, Row, Session, ask_question, best_mode, run_agent_task, summarise, table
from .suite import Task, default_suite_path, load_suite

__all__ = [
    "CATEGORIES", "CORE_CATEGORIES", "MODES", "Call", "Item", "Limits", "Question", "RecordingLLM", "Reply", "Row",
    "Session", "Task", "TaskResult", "Totals", "Verdict", "ask_question", "best_mode", "check", "check_call",
    "default_suite_path", "judge_turn", "load_suite", "run_agent_task", "run_task", "run_task_native", "summarise",
    "table", "totals",
]
