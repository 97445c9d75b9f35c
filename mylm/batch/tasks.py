"""The tasks of a batch: one JSON object per line, read and checked before anything runs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import TaskFileError

#: The keys a task line may carry; others are kept in `Task.extra` (a data set's own fields, such as an
#: expected answer) and copied to the result untouched.
KNOWN_KEYS = frozenset({"id", "prompt", "workspace", "max_iterations", "timeout"})


@dataclass(frozen=True)
class Task:
    """One task: the prompt, where it runs (a copy of `workspace`, or an empty directory) and its limits."""

    id: str
    prompt: str
    #: A directory copied into the task's fresh workspace; None starts from an empty one.
    workspace: Path | None = None
    max_iterations: int | None = None
    timeout: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: Path | None = None, where: str = "task") -> Task:
        """A task from its JSON object; a relative `workspace` is taken from `base` (the task file's)."""
        if not isinstance(data, Mapping):
            raise TaskFileError(f"{where}: a task must be a JSON object, not {type(data).__name__}")
        task_id = data.get("id")
        if isinstance(task_id, int) and not isinstance(task_id, bool):
            task_id = str(task_id)
        if not isinstance(task_id, str) or not task_id.strip():
            raise TaskFileError(f"{where}: \"id\" must be a non-empty string")
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise TaskFileError(f"{where}: \"prompt\" must be a non-empty string")
        workspace = data.get("workspace")
        folder: Path | None = None
        if workspace is not None:
            if not isinstance(workspace, str) or not workspace:
                raise TaskFileError(f"{where}: \"workspace\" must be a directory path")
            folder = Path(workspace).expanduser()
            if not folder.is_absolute() and base is not None:
                folder = base / folder
        return cls(
            id=task_id,
            prompt=prompt,
            workspace=folder,
            max_iterations=_positive(data.get("max_iterations"), int, "max_iterations", where),
            timeout=_positive(data.get("timeout"), float, "timeout", where),
            extra={k: v for k, v in data.items() if k not in KNOWN_KEYS},
        )


def _positive(value: Any, kind: type, name: str, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (
        kind is int and not isinstance(value, int)
    ):
        article = "a positive whole number" if kind is int else "a positive number"
        raise TaskFileError(f"{where}: \"{name}\" must be {article}")
    return kind(value)


def parse_tasks(lines: Iterable[str], *, base: Path | None = None, source: str = "tasks") -> list[Task]:
    """Tasks from JSON lines (blank lines skipped); ids must be unique."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            data = json.loads(line)
        except ValueError as error:
            raise TaskFileError(f"{where}: not valid JSON ({error})") from None
        task = Task.from_dict(data, base=base, where=where)
        if task.id in seen:
            raise TaskFileError(f"{where}: id {task.id!r} is already used on line {seen[task.id]}")
        seen[task.id] = number
        tasks.append(task)
    return tasks


def load_tasks(path: Path) -> list[Task]:
    """Tasks from a JSONL file; relative workspaces are relative to the file's folder."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TaskFileError(f"cannot read the task file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TaskFileError(f"the task file {path} is not UTF-8 text") from None
    return parse_tasks(text.splitlines(), base=path.resolve().parent, source=str(path))
