"""Kernel objects a confined command must not reach: the user keyring, the init's descriptors (its reply
socket, whose exit report a command could forge), and chat-media tokens in what it prints."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

from mylm.protocol.defuse import has_special_token, neutralise
from mylm.tools.shell import CommandResult, child_environment, run_command
from mylm.core.types import Grant

GRANTS: list[Grant] = ["read-only", "workspace-write"]

KEYRING = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
add_key, keyctl = (248, 250) if os.uname().machine == "x86_64" else (217, 219)
KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING = -4, -3
print("get", libc.syscall(keyctl, 0, KEY_SPEC_USER_KEYRING, 0), ctypes.get_errno())
print("add", libc.syscall(add_key, b"user", b"mylm-planted", b"x", 1, KEY_SPEC_SESSION_KEYRING), ctypes.get_errno())
"""

FORGE = r"""
import os
for fd in range(3, 64):
    try:
        os.write(fd, b"X0")
    except OSError:
        pass
print(sorted(int(f) for f in os.listdir("/proc/self/fd")))
raise SystemExit(7)
"""


def run(grant: Grant, command: str, workspace: Path) -> CommandResult:
    sandbox = landlock_sandbox()
    env = child_environment()
    with sandbox.launch(grant, workspace, env) as launch:
        return run_command(command, cwd=workspace, timeout=20, env=env, launch=launch)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="system call numbers")
@pytest.mark.parametrize("grant", GRANTS)
def test_the_user_keyring_is_out_of_reach(workspace: Path, grant: Grant) -> None:
    """Before: keyctl and add_key worked, so a command read and planted keys in the keyring every process of
    the user shares."""
    (workspace / "k.py").write_text(KEYRING)
    result = run(grant, "python3 k.py", workspace)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["get"] == "-1 1" and lines["add"] == "-1 1", result.stdout  # EPERM both


@pytest.mark.parametrize("grant", GRANTS)
def test_a_command_holds_only_its_stdio_and_cannot_forge_its_status(workspace: Path, grant: Grant) -> None:
    """Before: a command started by a spare init inherited the init's reply socket, copies of its stdio and the
    ruleset; writing "X0" to fd 5 made mylm report exit 0 for a command that failed."""
    (workspace / "f.py").write_text(FORGE)
    for _ in range(3):  # the first command may take the launcher's path, the next ones the spare inits'
        result = run(grant, "python3 f.py", workspace)
        assert result.exit_code == 7, result
        assert result.stdout.strip() == "[0, 1, 2, 3]", result.stdout  # 3: the listing's own


@pytest.mark.parametrize("token", ["<end_of_utterance>", "<start_of_audio>", "<end_of_audio>",
                                   "<audio_soft_token>", "<fake_token_around_image>", "<row_1_col_2>",
                                   "<global-img>", "<IMG_CONTEXT>"])
def test_chat_media_tokens_are_defused(token: str) -> None:
    assert has_special_token(token)
    assert not has_special_token(neutralise(f"output {token} more"))


@pytest.mark.parametrize("text", ["a <b> c", "<end> of it", "x_of_y", "<image_url>", "<start>"])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert neutralise(text) == text
