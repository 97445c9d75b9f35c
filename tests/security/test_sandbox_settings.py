"""The sandbox's settings and surfaces: user config and flag only, the policy's fallback, the approval prompt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mylm.approval import ApprovalPolicy, decide
from mylm.cli import Terminal, cli
from mylm.config import load_settings
from mylm.core.errors import ConfigError
from mylm.protocol.parser import format_tool_call
from mylm.sandbox import detect
from mylm.testing import ScriptedLLM
from mylm.tools.shell import shell_tool
from mylm.core.types import ToolCall


class FakeTerminal(Terminal):
    """Answers approval questions from a list and keeps what was asked."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.asked = answers, []

    def ask(self, question: str) -> str:
        self.asked.append(question)
        return self.answers.pop(0)


def call(command: str) -> str:
    return "Running.\n" + format_tool_call(ToolCall("execute_command", {"command": command}))


def invoke(args: list[str], llm: ScriptedLLM, terminal: Terminal) -> Result:
    return CliRunner().invoke(cli, args, obj={"llm": llm, "terminal": lambda: terminal}, catch_exceptions=False)


def user_config(text: str) -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_sandbox_settings_default_user_flag_and_bad_values() -> None:
    settings = load_settings()
    assert (settings.sandbox, settings.sandbox_network) == ("auto", True)
    user_config('sandbox = "off"\nsandbox_network = false\n')
    settings = load_settings()
    assert (settings.sandbox, settings.sandbox_network) == ("off", False)
    assert load_settings({"sandbox": "auto"}).sandbox == "auto"
    user_config('sandbox = "maybe"\n')
    with pytest.raises(ConfigError, match='sandbox .* must be "auto" or "off"'):
        load_settings()


def test_sandbox_settings_a_project_cannot_turn_it_off(isolated_user_state: Path) -> None:
    (isolated_user_state / ".mylm").mkdir()
    (isolated_user_state / ".mylm" / "config.toml").write_text('sandbox = "off"\nsandbox_network = false\n')
    settings = load_settings()
    assert settings.sandbox == "auto" and any("ignoring 'sandbox'" in w for w in settings.warnings)
    assert settings.sandbox_network is False  # tightening is allowed
    # Nor can the environment: there is no variable for it.
    assert load_settings(environ={**os.environ, "MYLM_SANDBOX": "off"}).sandbox == "auto"


def test_sandbox_unix_sockets_only_the_user_opens_them(isolated_user_state: Path) -> None:
    from mylm.cli.runner import command_sandbox

    assert load_settings().sandbox_unix_sockets is False
    assert command_sandbox(load_settings()).unix_sockets is False
    (isolated_user_state / ".mylm").mkdir()
    project = isolated_user_state / ".mylm" / "config.toml"
    project.write_text("sandbox_unix_sockets = true\n")
    settings = load_settings()
    assert settings.sandbox_unix_sockets is False
    assert any("ignoring 'sandbox_unix_sockets'" in w for w in settings.warnings)
    user_config("sandbox_unix_sockets = true\n")
    assert command_sandbox(load_settings()).unix_sockets is True
    project.write_text("sandbox_unix_sockets = false\n")  # a project may close them again
    assert load_settings().sandbox_unix_sockets is False


def test_sandbox_policy_without_a_sandbox_asks_for_every_command(isolated_user_state: Path) -> None:
    tool = shell_tool(isolated_user_state, sandbox=detect("off"))
    ls = ToolCall("execute_command", {"command": "ls"})
    confined = decide(ls, tool, ApprovalPolicy(isolated_user_state))
    assert confined.action == "allow" and confined.grant == "read-only"
    unconfined = decide(ls, tool, ApprovalPolicy(isolated_user_state, command_sandbox=False))
    assert unconfined.action == "ask" and "no sandbox" in unconfined.reason
    approved = decide(ls, tool, ApprovalPolicy(isolated_user_state, command_sandbox=False, yes=True))
    assert approved.action == "allow" and approved.grant == "workspace-write"
    trusted = decide(ToolCall("execute_command", {"command": "touch x"}), tool,
                     ApprovalPolicy(isolated_user_state, approve_commands=True))
    assert trusted.action == "allow" and trusted.grant == "workspace-write"


def test_sandbox_approval_prompt_says_what_the_command_may_do(isolated_user_state: Path) -> None:
    terminal = FakeTerminal(["y"])
    llm = ScriptedLLM([call("touch made.txt"), "ok"])
    assert invoke(["ask", "x"], llm, terminal=terminal).exit_code == 0
    assert (isolated_user_state / "made.txt").exists()  # "yes" gives write access to the workspace
    if detect().confines:
        assert f"runs with write access to {isolated_user_state} and a private TMPDIR only" in terminal.asked[0]
    off = FakeTerminal(["n", ""])
    result = invoke(["ask", "--sandbox", "off", "x"], ScriptedLLM([call("ls"), "ok"]),
                    terminal=off)
    assert "the sandbox is off" in result.stderr and "runs UNCONFINED" in off.asked[0]


def test_sandbox_protect_process_makes_mylm_non_dumpable() -> None:
    """What stops a same-user process from reading mylm's /proc/PID/environ even without a sandbox."""
    import subprocess
    import sys

    code = ("import ctypes; from mylm.sandbox import protect_process; libc = ctypes.CDLL(None); "
            "before = libc.prctl(3, 0, 0, 0, 0); ok = protect_process(); print(before, ok, libc.prctl(3, 0, 0, 0, 0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "True", "0"]


def test_sandbox_grants_follow_who_approved(isolated_user_state: Path) -> None:
    """The policy's own reading gives read-only; the user's approval (--yes, approve_commands, allow_commands)
    gives workspace-write, so `pytest` the user listed can write its caches and temporary files."""
    tool = shell_tool(isolated_user_state, sandbox=detect("off"))
    policy = ApprovalPolicy(isolated_user_state, allow_commands=("pytest", "make 'test'"))

    def grant(command: str, chosen: ApprovalPolicy = policy) -> str:
        decision = decide(ToolCall("execute_command", {"command": command}), tool, chosen)
        return decision.grant if decision.action == "allow" else decision.action

    assert grant("ls") == "read-only"
    assert grant("pytest -q") == "workspace-write" and grant("ls && make test") == "workspace-write"
    assert grant("echo pytest") == "read-only"
    assert grant("touch x") == "ask"
    assert grant("touch x", ApprovalPolicy(isolated_user_state, approve_commands=True)) == "workspace-write"
    assert grant("ls", ApprovalPolicy(isolated_user_state, approve_commands=True, command_sandbox=False)) \
        == "workspace-write"
    assert grant("ls", ApprovalPolicy(isolated_user_state, command_sandbox=False)) == "ask"
