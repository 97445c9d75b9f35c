"""The builtin tool set: protocol names, the `[tools]` config table, and a cheap, side-effect-free import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from mylm.core.errors import ConfigError
from mylm.tools import ToolContext, ToolRegistry, builtin_tools, run_tool
from mylm.tools.builtin import ToolSettings

PROTOCOL = {
    "execute_command": (["command"], ["timeout"]),
    "read_file": (["path"], ["offset", "limit"]),
    "write_file": (["path", "content"], []),
    "edit_file": (["path", "old", "new"], ["replace_all"]),
    "list_dir": ([], ["path"]),
    "search_files": (["pattern"], ["path"]),
    "remember": (["text"], []),
    "search_memory": (["query"], ["limit"]),
}


def test_builtin_tool_and_argument_names_are_the_protocol(workspace: Path) -> None:
    tools = builtin_tools(workspace=workspace)
    got = {
        t.name: (
            t.parameters.get("required", []),
            sorted(set(t.parameters["properties"]) - set(t.parameters.get("required", []))),
        )
        for t in tools
    }
    assert got == {name: (required, sorted(optional)) for name, (required, optional) in PROTOCOL.items()}
    risks = {t.name: t.risk for t in tools}
    assert risks == {
        "execute_command": "execute",
        "read_file": "read",
        "write_file": "write",
        "edit_file": "write",
        "list_dir": "read",
        "search_files": "read",
        "remember": "write",
        "search_memory": "read",
    }
    assert [t.name for t in builtin_tools(workspace=workspace, memory=False)][-1] == "search_files"


def test_builtin_tools_work_together_in_the_workspace(workspace: Path) -> None:
    registry = ToolRegistry(builtin_tools(workspace=workspace))
    context = ToolContext(workspace=workspace)

    def call(name: str, **arguments: object) -> str:
        tool_ = registry.get(name)
        assert tool_ is not None
        checked, problems = tool_.validate(arguments)
        assert problems == []
        outcome = run_tool(tool_, checked, context)
        assert not outcome.is_error, outcome.output
        return outcome.output

    call("write_file", path="notes/todo.md", content="- write tests\n")
    call("edit_file", path="notes/todo.md", old="write tests", new="run tests")
    assert call("read_file", path="notes/todo.md") == "[notes/todo.md: lines 1-1 of 1]\n- run tests"
    assert "todo.md" in call("list_dir", path="notes")
    assert call("search_files", pattern="run tests") == "[1 match for 'run tests' in 1 file (case ignored)]\n" \
        "notes/todo.md:1: - run tests"
    assert call("execute_command", command="cat notes/todo.md") == "[exit code 0]\n- run tests\n"
    call("remember", text="tests live in notes/todo.md")
    assert "notes/todo.md" in call("search_memory", query="where are the tests")
    assert registry.unknown_tool_message("read") == (
        "There is no tool named 'read'. Did you mean 'read_file'? The available tools are: execute_command, "
        "read_file, write_file, edit_file, list_dir, search_files, remember, search_memory."
    )


def test_builtin_settings_from_config() -> None:
    settings = ToolSettings.from_config(
        {
            "command_timeout": 10,
            "env": ["GOPATH"],
            "memory": False,
            "approval": {"allow_commands": ["pytest"]},
        }
    )
    assert settings == ToolSettings(10.0, ("GOPATH",), False, None)
    for bad in (
        {"command_timeout": 500},
        {"command_timeout": "10"},
        {"env": "GOPATH"},
        {"memory": "no"},
        {"memroy": True},
    ):
        with pytest.raises(ConfigError):
            ToolSettings.from_config(bad)


def test_builtin_import_is_cheap_and_has_no_side_effects(
    workspace: Path, run_python: Callable[..., str]
) -> None:
    probe = (
        "import sys, mylm.tools\n"
        "heavy = ['mcp', 'anyio', 'sqlite3', 'subprocess', 'jsonschema', 'mylm.tools.shell']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    assert run_python(probe, workspace).strip() == "[]"
    home = Path(os.environ["HOME"])
    assert [p for p in [*workspace.iterdir(), *home.glob("*/*")]] == []  # nothing created at import


def test_tools_run_on_reused_threads_without_each_others_context() -> None:
    """Tools run on kept worker threads; a context variable one tool sets is not there for the next."""
    import contextvars

    from mylm.tools import tool
    from mylm.tools.bounded import run_bounded

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    seen: list[str] = []

    @tool()
    def mark(value: str) -> str:
        """Record the marker, then set it.

        Args:
            value: the new marker.
        """
        seen.append(marker.get())
        marker.set(value)
        return "ok"

    context = ToolContext(workspace=Path("."))
    for value in ("first", "second", "third"):
        assert run_bounded(mark, {"value": value}, context).output == "ok"
    assert seen == ["unset", "unset", "unset"]
