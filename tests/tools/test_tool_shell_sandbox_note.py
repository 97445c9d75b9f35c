"""When the sandbox stops a command, its observation says so in one line: the grant, the limit, what to do."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from mylm.core.errors import ToolError
from mylm.prompts import PromptLoader, tool_view
from mylm.sandbox import Sandbox, landlock
from mylm.tools.base import ToolContext
from mylm.tools.shell import shell_tool
from mylm.core.types import Grant


def _sandbox(network: bool = True) -> Sandbox:
    abi = landlock.abi_version()
    if abi < 1:
        pytest.skip("this kernel has no Landlock")
    return Sandbox("landlock", network, landlock_abi=abi)


def observe(workspace: Path, grant: Grant, command: str, network: bool = True) -> str:
    tool = shell_tool(workspace, sandbox=_sandbox(network))
    try:
        return tool.invoke({"command": command}, ToolContext(workspace=workspace, grant=grant))
    except ToolError as error:
        return str(error)


def sandbox_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[sandbox:")]


@pytest.mark.parametrize("command", ["touch /etc/mylm-probe", "echo x > /usr/mylm-probe",
                                     "python3 -c 'open(\"/var/mylm-probe\", \"w\")'"])
def test_a_write_outside_the_workspace_says_which_grant_and_what_to_do(workspace: Path, command: str) -> None:
    text = observe(workspace, "workspace-write", command)
    [line] = sandbox_lines(text)
    assert "write access to the workspace" in line and "mylm-probe" in line and "outside the workspace" in line
    assert "write inside the workspace" in line


def test_a_write_by_a_read_only_command_says_it_needs_approval(workspace: Path) -> None:
    [line] = sandbox_lines(observe(workspace, "read-only", "echo x > notes.txt"))
    assert "read-only" in line and "notes.txt" in line and "approval" in line


def test_a_hidden_credential_file_is_named_as_hidden(workspace: Path) -> None:
    secret = Path(os.environ["HOME"]) / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("canary\n")
    [line] = sandbox_lines(observe(workspace, "read-only", f"cat {secret}"))
    assert "hidden" in line and str(secret) in line


@pytest.mark.parametrize("command", [
    "cat /no/such/file",  # not the sandbox: the file is not there
    "echo 'cat: /etc/hostname: No such file or directory' >&2; exit 1",  # not a denial
    "echo \"touch: cannot touch 'inside.txt': Permission denied\" >&2; exit 1",  # inside the workspace
])
def test_no_line_when_the_sandbox_did_not_stop_it(workspace: Path, command: str) -> None:
    assert sandbox_lines(observe(workspace, "workspace-write", command)) == []


def test_a_read_only_command_told_it_has_no_network(workspace: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        port = server.getsockname()[1]
        [line] = sandbox_lines(observe(workspace, "read-only", f"curl -sS http://127.0.0.1:{port}/"))
        assert "no network" in line and "approval" in line
        assert sandbox_lines(observe(workspace, "workspace-write", f"curl -sS -m 5 http://127.0.0.1:{port}/x",
                                     network=True)) == []
    finally:
        server.close()


def test_the_system_prompt_states_the_workspace_rule_when_commands_can_run(workspace: Path) -> None:
    loader = PromptLoader.default()
    common = {"multiple_calls": False, "instructions": "", "platform": "linux", "cwd": str(workspace)}
    with_shell = loader.render("system.j2", tools=tool_view([shell_tool(workspace)]), **common)
    assert "may change files only inside the working directory" in with_shell
    assert "may change files only" not in loader.render("system.j2", tools=[], **common)
