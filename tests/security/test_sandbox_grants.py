"""Grants by need: a program on PATH gets what it runs from, not the directory it was installed in; git gets
its configuration files, not its credential store; a workspace holding $HOME does not show tools' tokens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

from mylm.tools.shell import CommandResult, child_environment, run_command
from mylm.core.types import Grant


def run(grant: Grant, command: str, workspace: Path) -> CommandResult:
    sandbox = landlock_sandbox()
    env = child_environment()
    with sandbox.launch(grant, workspace, env) as launch:
        return run_command(command, cwd=workspace, timeout=30, env=env, launch=launch)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


@pytest.fixture
def home(isolated_user_state: Path) -> Path:
    return Path(os.environ["HOME"])


@pytest.mark.parametrize("grant", ["read-only", "workspace-write"])
@pytest.mark.parametrize("tool", [".pulumi", ".fly", "tools/acme"])
def test_a_program_on_path_runs_but_the_tokens_beside_it_stay_unreadable(
    home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, grant: Grant, tool: str
) -> None:
    install = home / tool
    _write(install / "bin" / "tool", "#!/bin/sh\ncat \"$(dirname \"$0\")/../share/banner.txt\"\n", 0o755)
    _write(install / "share" / "banner.txt", "tool-ran\n")
    _write(install / "credentials.json", "canary-token-json\n")
    _write(install / "config.yml", "access_token: canary-token-yml\n")
    _write(install / "workspaces" / "state.json", "canary-state\n")
    monkeypatch.setenv("PATH", f"{install / 'bin'}:{os.environ['PATH']}")
    result = run(grant, f"tool; cat {install}/credentials.json {install}/config.yml {install}/workspaces/state.json",
                 workspace)
    assert "tool-ran" in result.stdout, result.stderr
    assert "canary" not in result.stdout, result.stdout


def test_a_virtual_environment_runs_its_python_without_the_rest_of_its_directory(
    home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import subprocess
    import sys

    venv = tmp_path / "project-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _write(venv / ".env", "canary-env\n")
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:{os.environ['PATH']}")
    result = run("read-only", f"python -c 'import json, sys; print(sys.prefix)'; cat {venv}/.env", workspace)
    assert str(venv) in result.stdout, result.stderr
    assert "canary" not in result.stdout


def test_git_reads_its_configuration_but_not_its_credential_store(home: Path, workspace: Path) -> None:
    _write(home / ".config" / "git" / "config", "[user]\n\tname = Grant Tester\n")
    _write(home / ".config" / "git" / "credentials", "https://user:canary-git-token@example.com\n")
    result = run("read-only", "git config --global --get user.name; cat ~/.config/git/credentials", workspace)
    assert "Grant Tester" in result.stdout, result.stderr
    assert "canary" not in result.stdout


@pytest.mark.parametrize("grant", ["read-only", "workspace-write"])
def test_home_as_the_workspace_hides_credentials_and_tool_state(home: Path, grant: Grant) -> None:
    secrets = {
        ".s3cfg": "secret_key = canary-s3",
        ".fly/config.yml": "access_token: canary-fly",
        ".bash_history": "export TOKEN=canary-history",
        ".zsh_history": "canary-zsh",
        ".config/git/credentials": "https://u:canary-gitcred@h",
        ".pulumi/credentials.json": "canary-pulumi",
        ".some-new-cli/token": "canary-unknown-tool",
        ".Xauthority": "canary-x11",
    }
    for name, text in secrets.items():
        _write(home / name, text + "\n")
    _write(home / ".bashrc", "alias ll='ls -l'  # bashrc-readable\n")
    _write(home / "notes.txt", "notes-readable\n")
    names = " ".join(secrets)
    result = run(grant, f"cat .bashrc notes.txt; cat {names}; ls -a", home)
    assert "bashrc-readable" in result.stdout and "notes-readable" in result.stdout, result.stderr
    assert "canary" not in result.stdout, result.stdout
