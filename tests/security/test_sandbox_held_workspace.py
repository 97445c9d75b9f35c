"""A task's workspace is resolved once and held open: every command and file tool of the task is confined to
that directory object, so another task swapping its path for a link (two `mylm mcp` tasks at once, A in the
root, B in `sub`) cannot redirect B's writes outside."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

from mylm.tools import builtin_tools
from mylm.tools.base import Tool, ToolContext
from mylm.core.types import Grant


def tools_for(workspace: Path) -> dict[str, Tool]:
    return {t.name: t for t in builtin_tools(workspace=workspace, memory=False, sandbox=landlock_sandbox())}


def swap(sub: Path, outside: Path) -> None:
    """What task A (working in the parent) does while B runs: `sub` becomes a link to a directory outside."""
    sub.rename(sub.with_name("sub.old"))
    sub.symlink_to(outside, target_is_directory=True)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    return root / "sub", outside


@pytest.mark.parametrize("grant", ["workspace-write", "read-only"])
def test_a_command_after_the_swap_does_not_write_outside(layout: tuple[Path, Path], grant: Grant) -> None:
    """Before: the sandbox resolved the path again for each command (realpath, then the launcher's chdir), so
    B's next command ran in, and was granted, the directory outside."""
    sub, outside = layout
    shell = tools_for(sub)["execute_command"]
    context = ToolContext(workspace=sub, grant=grant)
    first = shell.invoke({"command": "pwd"}, context)  # B's launcher starts, on the real sub
    assert str(sub) in first
    swap(sub, outside)
    try:
        output = shell.invoke({"command": "echo pwned > f.txt; echo x > " + str(outside / "g.txt")}, context)
    except Exception as error:  # noqa: BLE001 - refused outright is the expected answer
        output = str(error)
    assert list(outside.iterdir()) == [], output
    assert "replaced" in output


def test_the_file_tools_after_the_swap_stay_in_the_held_directory(layout: tuple[Path, Path]) -> None:
    sub, outside = layout
    tools = tools_for(sub)
    context = ToolContext(workspace=sub)
    swap(sub, outside)
    tools["write_file"].invoke({"path": "note.txt", "content": "mine\n"}, context)
    assert list(outside.iterdir()) == []
    assert (sub.with_name("sub.old") / "note.txt").read_text() == "mine\n"


def test_a_swap_between_mylm_s_check_and_the_start_is_caught_by_the_launcher(layout: tuple[Path, Path]) -> None:
    """The path is checked in mylm, then used by the launcher: swapped in between, the launcher finds another
    directory than the one held and does not start the command."""
    import os

    from mylm.tools.shell import child_environment, run_command

    sub, outside = layout
    sandbox = landlock_sandbox()
    held = os.open(sub, os.O_RDONLY | os.O_DIRECTORY)
    env = child_environment()
    try:
        with sandbox.launch("workspace-write", sub, env, anchor=held) as launch:
            swap(sub, outside)
            result = run_command("echo pwned > f.txt", cwd=sub, timeout=20, env=env, launch=launch)
    finally:
        os.close(held)
    assert list(outside.iterdir()) == []
    assert result.exit_code == 127 and "replaced" in result.stderr
