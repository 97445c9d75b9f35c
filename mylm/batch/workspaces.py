"""A fresh workspace per task: a copy of the task's directory, or an empty temporary one."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from ..core.errors import WorkspaceError


def _slug(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task_id)[:40].strip("._") or "task"


def make_workspace(task_id: str, source: Path | None, root: Path | None = None) -> Path:
    """A new directory for one task (under `root`, else the system's temporary folder), filled from `source`.

    Symlinks are copied as links, never followed: a link in the source pointing outside it must not pull
    the outside in. The copy is the task's own, so tasks never see each other's changes.
    """
    if source is not None and not source.is_dir():
        raise WorkspaceError(f"task {task_id!r}: the workspace {source} is not a directory")
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"mylm-batch-{_slug(task_id)}-", dir=root))
    if source is None:
        return path
    try:
        shutil.copytree(source, path, symlinks=True, dirs_exist_ok=True)
    except (OSError, shutil.Error) as error:
        shutil.rmtree(path, ignore_errors=True)
        raise WorkspaceError(f"task {task_id!r}: could not copy the workspace {source}: {error}") from None
    return path


def remove_workspace(path: Path) -> None:
    """Delete a task's workspace (best effort: what a command left behind must not fail the batch)."""
    shutil.rmtree(path, ignore_errors=True)
