"""The eval suite file: tasks (prompt, workspace files, tools, checks), found like the prompt templates."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError

SUITE_FILE = "suite.toml"
FILE_TOOLS = ("read_file", "write_file", "edit_file", "list_dir")


@dataclass(frozen=True)
class Task:
    """One task: run in a fresh workspace holding `files`; solved when every check holds."""

    name: str
    prompt: str
    files: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = FILE_TOOLS
    answer_contains: tuple[str, ...] = ()
    file: str | None = None
    file_contains: tuple[str, ...] = ()

    def solved(self, answer: str, workspace: Path) -> bool:
        """Whether the answer and the workspace pass this task's checks."""
        if not all(s.lower() in answer.lower() for s in self.answer_contains):
            return False
        if self.file is not None:
            path = workspace / self.file
            if not path.is_file():
                return False
            text = path.read_text(encoding="utf-8", errors="replace")
            return all(s in text for s in self.file_contains)
        return True


def default_suite_path() -> Path:
    """The user's suite (`<config dir>/mylm/evals/suite.toml`) if present, else the one shipped with mylm."""
    from ..core.paths import config_dir

    user = config_dir() / "evals" / SUITE_FILE
    if user.is_file():
        return user
    spec = importlib.util.find_spec("mylm._evals")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if Path(location, SUITE_FILE).is_file():
            return Path(location, SUITE_FILE)
    checkout = Path(__file__).resolve().parent.parent.parent / "evals" / SUITE_FILE
    if checkout.is_file():
        return checkout
    raise ConfigError("the eval suite is missing from this installation; reinstall mylm or pass --suite FILE")


def load_suite(path: Path) -> list[Task]:
    """The tasks in a suite file; a malformed one is a ConfigError naming the file and the task."""
    from ..config.files import _tomllib

    try:
        data = _tomllib().loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read eval suite {path}: {error.strerror}") from None
    except ValueError as error:
        raise ConfigError(f"eval suite {path}: {error}") from None
    tasks = []
    for i, entry in enumerate(data.get("task") or ()):
        tasks.append(_task(path, i, entry))
    if not tasks:
        raise ConfigError(f"eval suite {path} has no [[task]] entries")
    return tasks


def _task(path: Path, index: int, entry: Any) -> Task:
    where = f"eval suite {path}, task {index + 1}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(entry) - {"name", "prompt", "files", "tools", "answer_contains", "file", "file_contains"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {min(unknown)!r}")
    name, prompt = entry.get("name"), entry.get("prompt")
    if not isinstance(name, str) or not isinstance(prompt, str) or not name or not prompt:
        raise ConfigError(f"{where}: needs a name and a prompt")
    files = entry.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ConfigError(f"{where} ({name}): files must map paths to text")
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ConfigError(f"{where} ({name}): file {rel!r} must be a relative path inside the workspace")
    tools = tuple(entry.get("tools") or FILE_TOOLS)
    bad = [t for t in tools if t not in FILE_TOOLS]
    if bad:
        raise ConfigError(f"{where} ({name}): unknown tool {bad[0]!r} (choose from {', '.join(FILE_TOOLS)})")
    checks = tuple(str(s) for s in entry.get("answer_contains") or ())
    file = entry.get("file")
    if not checks and not file:
        raise ConfigError(f"{where} ({name}): needs answer_contains or file to check")
    file_checks = tuple(str(s) for s in entry.get("file_contains") or ())
    return Task(name, prompt, dict(files), tools, checks, file, file_checks)
