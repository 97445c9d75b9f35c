"""A variable passed through to commands (`[tools] env`) must not make bash read a command otherwise than the
policy did: the policy expands globs and follows `cd` under the allowlisted environment, so variables that
change bash's options, globs, `cd` or startup (BASHOPTS, SHELLOPTS, GLOBIGNORE, CDPATH, BASH_ENV, ...) or what
the loader runs are refused in the config and never reach a command."""

from __future__ import annotations

from pathlib import Path

import pytest

from mylm.core.errors import ConfigError
from mylm.tools.base import ToolContext
from mylm.tools.builtin import ToolSettings
from mylm.tools.environment import child_environment
from mylm.tools.shell import shell_tool

SHELL = [("BASHOPTS", "dotglob"), ("SHELLOPTS", "noglob"), ("GLOBIGNORE", "notes.txt"), ("CDPATH", "/"),
         ("BASH_ENV", "./startup.sh"), ("BASH_FUNC_ls%%", "() { cat .hidden; }"), ("LD_PRELOAD", "./x.so"),
         ("GLOBSORT", "-name"), ("POSIXLY_CORRECT", "1")]


@pytest.mark.parametrize("name", [n for n, _ in SHELL] + ["bashopts"])
def test_the_config_refuses_shell_variables(name: str) -> None:
    with pytest.raises(ConfigError, match="may not pass"):
        ToolSettings.from_config({"env": ["GOPATH", name]})
    assert ToolSettings.from_config({"env": ["GOPATH"]}).env == ("GOPATH",)


@pytest.mark.parametrize(("name", "value"), SHELL)
def test_a_shell_variable_never_reaches_a_command(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert name not in child_environment([name, "GOPATH"])


def test_a_glob_expands_in_the_command_as_the_policy_expanded_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: with BASHOPTS=dotglob passed through, `echo *` (the policy saw `notes.txt`) printed `.hidden`
    too in the command."""
    (workspace / ".hidden").write_text("x\n")
    (workspace / "notes.txt").write_text("y\n")
    monkeypatch.setenv("BASHOPTS", "dotglob")
    monkeypatch.setenv("GLOBIGNORE", "notes.txt")
    shell = shell_tool(workspace, env_passthrough=("BASHOPTS", "GLOBIGNORE"))
    output = shell.invoke({"command": "echo *"}, ToolContext(workspace=workspace, grant="read-only"))
    assert "notes.txt" in output and ".hidden" not in output
