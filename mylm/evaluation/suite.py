"""The agent-task suite file: tasks (prompt, workspace files, tools, checks), found like the prompt templates."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError

SUITE_FILE = "suite.toml"
FILE_TOOLS = ("read_file", "write_file", "edit_file", "list_dir")
#: The builtin tools a task may be given (the memory tools are left out: they would reach beyond the workspace).
TASK_TOOLS = ("execute_command", *FILE_TOOLS, "search_files")
_KEYS = {"name", "prompt", "files", "tools", "answer_contains", "answer_equals", "file", "file_contains",
         "file_equals", "command"}
#: Runs a check command in the workspace, returning its exit status (the CLI's runs it in the sandbox).
CommandRunner = Callable[[str, Path], int]


def normalise(text: str) -> str:
    """An answer as the checks compare it: one line, lower case, spaces collapsed, without surrounding quotes,
    backticks, markdown emphasis or a final full stop."""
    text = " ".join(text.split()).lower()
    text = text.strip("`'\"*_ ")
    return text.removesuffix(".").strip("`'\"*_ ")


def contains(text: str, wanted: str) -> bool:
    """Whether `wanted` appears in `text` as a whole: not inside a longer word or number ("3" is not in "13")."""
    return re.search(rf"(?<![\w]){re.escape(wanted)}(?![\w])", text) is not None


@dataclass(frozen=True)
class Task:
    """One task: run in a fresh workspace holding `files`; solved when every check holds."""

    name: str
    prompt: str
    files: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = TASK_TOOLS
    #: Each string appears in the answer as a whole word or number (case-insensitive, spaces collapsed).
    answer_contains: tuple[str, ...] = ()
    #: The answer is exactly this (normalised, see `normalise`); alternatives allowed.
    answer_equals: tuple[str, ...] = ()
    file: str | None = None
    file_contains: tuple[str, ...] = ()
    #: The file's whole text, ignoring trailing spaces on lines and at the end.
    file_equals: str | None = None
    #: A command that must exit 0 in the workspace afterwards (e.g. the task's test script).
    command: str | None = None

    def check(self, answer: str, workspace: Path, run: CommandRunner | None = None) -> str | None:
        """Why the answer and the workspace fail this task's checks, or None when they pass."""
        said = normalise(answer)
        for wanted in self.answer_contains:
            if not contains(said, normalise(wanted)):
                return f"the answer does not contain {wanted!r}"
        if self.answer_equals and said not in {normalise(w) for w in self.answer_equals}:
            return f"the answer is not {self.answer_equals[0]!r}"
        if self.file is not None:
            path = workspace / self.file
            if not path.is_file():
                return f"{self.file} does not exist"
            text = path.read_text(encoding="utf-8", errors="replace")
            for wanted in self.file_contains:
                if wanted not in text:
                    return f"{self.file} does not contain {wanted!r}"
            if self.file_equals is not None and _lines(text) != _lines(self.file_equals):
                return f"{self.file} is not what was asked for"
        if self.command is not None:
            if run is None:
                return "no way to run the check command"
            status = run(self.command, workspace)
            if status != 0:
                return f"`{self.command}` exited {status}"
        return None

    def solved(self, answer: str, workspace: Path, run: CommandRunner | None = None) -> bool:
        """Whether the answer and the workspace pass this task's checks."""
        return self.check(answer, workspace, run) is None


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


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
    tasks = [_task(path, i, entry) for i, entry in enumerate(data.get("task") or ())]
    if not tasks:
        raise ConfigError(f"eval suite {path} has no [[task]] entries")
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"eval suite {path}: two tasks are named {twice[0]!r}")
    return tasks


def _strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise ConfigError(f"{where}: {key} must be a string or a list of strings")
    return tuple(str(v) for v in value)


def _task(path: Path, index: int, entry: Any) -> Task:
    where = f"eval suite {path}, task {index + 1}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    name, prompt = entry.get("name"), entry.get("prompt")
    if not isinstance(name, str) or not isinstance(prompt, str) or not name or not prompt:
        raise ConfigError(f"{where}: needs a name and a prompt")
    if not re.fullmatch(r"[\w.-]+", name):
        raise ConfigError(f"{where}: the name {name!r} may hold letters, digits, '.', '-' and '_' only")
    where = f"{where} ({name})"
    files = entry.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ConfigError(f"{where}: files must map paths to text")
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ConfigError(f"{where}: file {rel!r} must be a relative path inside the workspace")
    tools = _strings(where, "tools", entry.get("tools")) or TASK_TOOLS
    bad = [t for t in tools if t not in TASK_TOOLS]
    if bad:
        raise ConfigError(f"{where}: unknown tool {bad[0]!r} (choose from {', '.join(TASK_TOOLS)})")
    file = entry.get("file")
    if file is not None and (not isinstance(file, str) or Path(file).is_absolute() or ".." in Path(file).parts):
        raise ConfigError(f"{where}: file must be a relative path inside the workspace")
    file_equals = entry.get("file_equals")
    if file_equals is not None and not isinstance(file_equals, str):
        raise ConfigError(f"{where}: file_equals must be a string")
    file_checks = _strings(where, "file_contains", entry.get("file_contains"))
    if (file_checks or file_equals is not None) and file is None:
        raise ConfigError(f"{where}: file_contains and file_equals need file = \"PATH\"")
    command = entry.get("command")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ConfigError(f"{where}: command must be a non-empty string")
    task = Task(
        name, prompt, dict(files), tools,
        answer_contains=_strings(where, "answer_contains", entry.get("answer_contains")),
        answer_equals=_strings(where, "answer_equals", entry.get("answer_equals")),
        file=file, file_contains=file_checks, file_equals=file_equals, command=command,
    )
    if not (task.answer_contains or task.answer_equals or task.file or task.command):
        raise ConfigError(f"{where}: needs a check: answer_contains, answer_equals, file or command")
    return task
