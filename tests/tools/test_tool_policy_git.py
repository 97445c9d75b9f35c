"""git without surprises: every program-running setting, laid out with every discovery trick, asks; git's
own answers (not mylm's discovery) decide; auto-approved git runs with those settings forced off; nothing
blocks."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mylm.approval import ApprovalPolicy, Approver, decide
from mylm.approval.gitrepo import repository_problem
from mylm.sandbox import detect
from mylm.tools.base import ToolContext
from mylm.tools.environment import NEUTRAL_SETTINGS, neutral_env, neutralised
from mylm.tools.shell import shell_tool
from mylm.core.types import ToolCall
from tests.security.gitscenes import HOOKS, TRICKS, git, plain, poison, poisoned

COMMANDS = ("git status", "git diff", "git log -p", "git show --stat", "git diff --stat")


def shell_call(command: str) -> ToolCall:
    return ToolCall("execute_command", {"command": command})


def test_every_trick_leads_git_to_a_repository(workspace: Path) -> None:
    for name, build in TRICKS.items():
        ws = workspace / name
        ws.mkdir()
        cwd = build(ws)
        assert git(ws / cwd, "rev-parse", "--git-dir").strip(), name


@pytest.mark.parametrize("hook", sorted(HOOKS))
@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_program_running_setting_asks_whatever_the_layout(workspace: Path, tmp_path: Path, trick: str,
                                                           hook: str) -> None:
    out = tmp_path / "outside"
    out.mkdir()
    cwd = TRICKS[trick](workspace)
    marker = out / "PWNED"
    poison(workspace, cwd, hook, f"touch {marker}", out)
    assert poisoned(workspace, cwd, str(out) if hook in ("core.worktree", "hooksPath") else str(marker)) or (
        hook == "hooksPath" and poisoned(workspace, cwd, "myhooks")
    )
    prefix = "" if cwd == "." else f"cd '{cwd}' && " if " " in cwd else f"cd {cwd} && "
    command = prefix + COMMANDS[(len(trick) + len(hook)) % len(COMMANDS)]
    tool = shell_tool(workspace)
    permission = Approver(ApprovalPolicy(workspace=workspace), prompt=None)(shell_call(command), tool)
    assert not permission.allowed, (command, permission)
    assert not marker.exists()


def test_a_clean_repository_is_read_only(workspace: Path) -> None:
    plain(workspace)
    for command in COMMANDS:
        decision = decide(shell_call(command), shell_tool(workspace), ApprovalPolicy(workspace=workspace))
        assert (decision.action, decision.grant) == ("allow", "read-only"), decision.reason
        assert "hooks, fsmonitor" in decision.reason  # the user is told what the run changes
    assert repository_problem(workspace, ".") is None


def test_no_repository_is_no_problem(workspace: Path) -> None:
    (workspace / "d").mkdir()
    environ = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workspace)}
    assert repository_problem(workspace, "d", environ=environ) is None


def test_a_repository_above_the_workspace_asks(tmp_path: Path) -> None:
    plain(tmp_path / "repo")
    (tmp_path / "repo" / "ws").mkdir()
    problem = repository_problem(tmp_path / "repo" / "ws", ".")
    assert problem is not None and "outside the workspace" in problem


def test_a_git_file_pointing_outside_asks(workspace: Path, tmp_path: Path) -> None:
    plain(tmp_path / "elsewhere")
    (workspace / ".git").write_text(f"gitdir: {tmp_path / 'elsewhere' / '.git'}\n")
    problem = repository_problem(workspace, ".")
    assert problem is not None and "outside the workspace" in problem


def test_submodules_ask(workspace: Path) -> None:
    plain(workspace)
    (workspace / ".gitmodules").write_text('[submodule "s"]\n\tpath = s\n\turl = ./s\n')
    assert "submodules" in (repository_problem(workspace, ".") or "")


def test_a_fifo_git_config_asks_within_the_deadline_instead_of_hanging(workspace: Path) -> None:
    plain(workspace)
    os.unlink(workspace / ".git" / "config")
    os.mkfifo(workspace / ".git" / "config")
    decision = decide(shell_call("git status"), shell_tool(workspace), ApprovalPolicy(workspace=workspace),
                      deadline=time.monotonic() + 0.5)
    assert decision.action == "ask"
    assert "did not answer" in decision.reason or "cannot read" in decision.reason


def test_a_fifo_gitmodules_asks_without_being_opened(workspace: Path) -> None:
    plain(workspace)
    os.mkfifo(workspace / ".gitmodules")
    decision = decide(shell_call("git status"), shell_tool(workspace), ApprovalPolicy(workspace=workspace))
    assert decision.action == "ask" and "submodules" in decision.reason


def test_no_time_left_asks_without_running_git(workspace: Path) -> None:
    plain(workspace)
    problem = repository_problem(workspace, ".", deadline=time.monotonic() - 1)
    assert problem is not None and "no time" in problem


@pytest.mark.parametrize("setting", ["core.fsmonitor", "core.pager", "gpg"])
def test_auto_approved_git_runs_with_program_settings_forced_off(workspace: Path, tmp_path: Path,
                                                                 setting: str) -> None:
    """The second layer: the user's own (trusted) config names a program; a read-only grant still stops it."""
    plain(workspace)
    marker = tmp_path / "RAN"
    global_config = Path(os.environ["HOME"]) / ".gitconfig"
    config, _ = HOOKS[setting]
    global_config.write_text(config.replace("{cmd}", f"touch {marker}"))
    os.utime(workspace / "f", (1, 1))
    command = "git log -1 && git status"
    decision = decide(shell_call(command), shell_tool(workspace), ApprovalPolicy(workspace=workspace))
    assert (decision.action, decision.grant) == ("allow", "read-only")
    # Unconfined, so this checks the git layer alone (the sandbox would also stop the marker being written).
    tool = shell_tool(workspace, sandbox=detect("off"))
    tool.function(command=command, context=ToolContext(workspace=workspace, grant="read-only"))
    assert not marker.exists()
    if setting == "core.fsmonitor":  # the same command with a person's approval does run the user's fsmonitor
        os.utime(workspace / "f", (2, 2))
        tool.function(command="git status", context=ToolContext(workspace=workspace, grant="workspace-write"))
        assert marker.exists()


def test_a_read_only_command_sees_no_git_variable_but_the_neutral_ones() -> None:
    env = neutralised({"PATH": "/bin", "GIT_DIR": "/elsewhere", "GIT_CONFIG_GLOBAL": "/x",
                       "GIT_PAGER": "cat"})
    assert env["PATH"] == "/bin" and env["GIT_PAGER"] == "cat"
    assert "GIT_DIR" not in env and "GIT_CONFIG_GLOBAL" not in env
    assert env["GIT_CONFIG_COUNT"] == str(len(NEUTRAL_SETTINGS))


def test_the_neutral_settings_reach_git_as_command_scope(workspace: Path) -> None:
    plain(workspace)
    env = {**os.environ, **neutral_env()}
    import subprocess

    listed = subprocess.run(["git", "config", "--list", "--show-scope"], cwd=workspace, env=env,
                            capture_output=True, text=True, check=True).stdout
    for key, value in NEUTRAL_SETTINGS:
        assert f"command\t{key.lower()}={value}" in listed
