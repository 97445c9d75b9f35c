"""Secrets are masked by the kernel: a read-only (auto-approved) command runs in a mount namespace where every
secret of the workspace and the credential floor is an empty file or directory, whatever name, link or
`/proc/self/cwd` trick it uses; the file tools and the policy judge the same list on a path's real location."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

from mylm.approval import ApprovalPolicy, decide
from mylm.core.errors import ToolError
from mylm.sandbox import Sandbox
from mylm.sandbox.rulesets import kept_rulesets
from mylm.tools.base import ToolContext
from mylm.tools.files import file_tools
from mylm.tools.paths import Workspace
from mylm.tools.shell import child_environment, run_command, shell_tool
from mylm.core.types import Grant, ToolCall

SECRET = "SECRET-VALUE-91c2"
ROOT = Path(__file__).resolve().parents[2]

#: Every way the battery found to a workspace secret from a read-only command, each printing what it reads.
TRICKS = [
    "cat .env",
    "cat ./sub/../.env",
    "cd sub && cat s",  # s -> /proc/self/cwd/../.env: resolved in the command's directory
    "cat sub/t",  # t -> /dev/fd/../cwd/.env
    "cat hard",  # a hard link to .env (made before the command)
    "cat .ssh/id_ed25519",
    "cat deploy.pem",
    "cat /proc/self/cwd/.env",
    "cat /proc/thread-self/cwd/.env",
    "cat $(pwd)/.env",
]


def plant(workspace: Path) -> None:
    (workspace / ".env").write_text(f"TOKEN={SECRET}\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "s").symlink_to("/proc/self/cwd/../.env")
    (workspace / "sub" / "t").symlink_to("/dev/fd/../cwd/.env")
    os.link(workspace / ".env", workspace / "hard")
    (workspace / ".ssh").mkdir()
    (workspace / ".ssh" / "id_ed25519").write_text(SECRET)
    (workspace / "deploy.pem").write_text(SECRET)
    (workspace / "notes.txt").write_text("plain notes\n")


def run(sandbox: Sandbox, grant: Grant, command: str, workspace: Path) -> str:
    env = child_environment()
    with sandbox.launch(grant, workspace, env) as launch:
        result = run_command(command, cwd=workspace, timeout=20, env=env, launch=launch)
    return result.stdout + result.stderr


@pytest.mark.parametrize("trick", TRICKS)
def test_a_read_only_command_reads_no_workspace_secret_by_any_name(workspace: Path, trick: str) -> None:
    """Before: Landlock granted the workspace whole, and the policy's list was all that kept `.env` from an
    auto-approved command; every one of these printed it."""
    plant(workspace)
    output = run(landlock_sandbox(), "read-only", f"({trick}); cat notes.txt", workspace)
    assert SECRET not in output
    assert "plain notes" in output  # the rest of the workspace is there


def test_a_secret_made_after_the_launcher_started_is_masked_too(workspace: Path) -> None:
    """The read-only launcher is kept between commands: a `.env` an approved command writes later must not
    be readable by the next auto-approved one."""
    sandbox = landlock_sandbox()
    (workspace / "deep" / "er").mkdir(parents=True)
    assert run(sandbox, "read-only", "ls deep", workspace).strip() == "er"
    run(sandbox, "workspace-write", f"echo {SECRET} > deep/er/.env.local", workspace)
    assert (workspace / "deep" / "er" / ".env.local").read_text().strip() == SECRET
    assert SECRET not in run(sandbox, "read-only", "cat deep/er/.env.local", workspace)


def test_an_approved_command_still_reads_the_workspace_secrets(workspace: Path) -> None:
    """The user approved it (pytest may need `.env`): only the credential floor is masked for it."""
    plant(workspace)
    assert SECRET in run(landlock_sandbox(), "workspace-write", "cat .env", workspace)


def test_the_launcher_reports_its_mount_namespace(workspace: Path) -> None:
    plant(workspace)
    run(landlock_sandbox(), "read-only", "true", workspace)
    mine = [launcher for launcher in kept_rulesets.launchers() if launcher.masked]
    assert mine and all(launcher.mount_namespace for launcher in mine)


def test_the_credential_floor_is_masked_when_the_workspace_is_home(isolated_user_state: Path) -> None:
    """With $HOME as the workspace, `~/.bash_history`, `~/.vault-token` and `~/.config/gcloud` were hidden by
    Landlock only; now they are not there at all for a command, and the file tools refuse them too."""
    home = Path(os.environ["HOME"])
    (home / ".bash_history").write_text(f"export TOKEN={SECRET}\n")
    (home / ".vault-token").write_text(SECRET)
    (home / ".config" / "gcloud").mkdir(parents=True)
    (home / ".config" / "gcloud" / "credentials.db").write_text(SECRET)
    output = run(landlock_sandbox(), "read-only",
                 "cat .bash_history .vault-token .config/gcloud/credentials.db", home)
    assert SECRET not in output


# --------------------------------------------------------------------------------------- the file tools


def tools(workspace: Path) -> dict[str, object]:
    return {t.name: t for t in file_tools(Workspace(workspace))}


@pytest.mark.parametrize("path", [".bash_history", ".vault-token", ".config/gcloud/credentials.db",
                                  "config/mylm/config.toml", "data/mylm/sessions/s.jsonl"])
def test_read_file_judges_the_sandbox_floor_not_only_names(isolated_user_state: Path, path: str) -> None:
    """Before: read_file was judged by a short list of names, so in $HOME it read the shell history, vault's
    token, gcloud's credentials, mylm's own config (an MCP server's token) and saved sessions, unasked."""
    home = Path(os.environ["HOME"])
    target = home / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"{SECRET}\n")
    policy = ApprovalPolicy(workspace=home)
    read = tools(home)["read_file"]
    decision = decide(ToolCall("read_file", {"path": path}), read, policy)  # type: ignore[arg-type]
    assert decision.action == "ask", decision.reason
    with pytest.raises(ToolError, match="not read"):
        read.invoke({"path": path}, ToolContext(workspace=home, grant="read-only"))  # type: ignore[attr-defined]
    # Approved by the user, it is read.
    approved = read.invoke({"path": path}, ToolContext(workspace=home))  # type: ignore[attr-defined]
    assert SECRET in approved


def test_read_file_judges_the_object_it_opened(workspace: Path) -> None:
    """A link swapped in after the policy looked (or any name it did not foresee) is judged where it leads:
    the opened descriptor's real path."""
    plant(workspace)
    (workspace / "innocent").symlink_to(".ssh/id_ed25519")
    read, listing = tools(workspace)["read_file"], tools(workspace)["list_dir"]
    context = ToolContext(workspace=workspace, grant="read-only")
    for path in ("innocent", "hard", "sub/../.env"):
        with pytest.raises(ToolError):
            read.invoke({"path": path}, context)  # type: ignore[attr-defined]
    with pytest.raises(ToolError, match="not read"):
        listing.invoke({"path": ".ssh"}, context)  # type: ignore[attr-defined]
    assert "plain notes" in read.invoke({"path": "notes.txt"}, context)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------- the policy


def test_the_policy_resolves_a_link_in_the_commands_directory(workspace: Path) -> None:
    """`sub/s -> /proc/self/cwd/d`: mylm resolved it in its own directory (the workspace root: d/k, a plain
    file), but from `sub` it leads to sub/d/k, here the private key. A link through /proc or /dev/fd is never
    followed on the command's behalf: the command asks."""
    (workspace / "d").mkdir()
    (workspace / "d" / "k").write_text("harmless\n")
    (workspace / ".ssh").mkdir()
    (workspace / ".ssh" / "k").write_text(SECRET)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "d").symlink_to("../.ssh")
    (workspace / "sub" / "s").symlink_to("/proc/self/cwd/d")
    (workspace / "sub" / "u").symlink_to("/dev/fd/../cwd/d")
    (workspace / "sub" / "v").symlink_to("/proc/thread-self/cwd/d")
    policy = ApprovalPolicy(workspace=workspace)
    shell = shell_tool(workspace)
    for command in ("cd sub; cat s/k", "cd sub && cat u/k", "cd sub; head v/k", "cat sub/s/k"):
        decision = decide(ToolCall("execute_command", {"command": command}), shell, policy)
        assert decision.action == "ask", (command, decision.reason)


# --------------------------------------------------------------------------------- as an unprivileged user

UNPRIVILEGED = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from mylm.sandbox import detect
from mylm.sandbox.rulesets import kept_rulesets
from mylm.tools.shell import child_environment, run_command
workspace = Path(sys.argv[2])
sandbox = detect()
env = child_environment()
with sandbox.launch("read-only", workspace, env) as launch:
    result = run_command("id -u; cat .env; cd sub && cat s; cat ../notes.txt", cwd=workspace, timeout=20,
                         env=env, launch=launch)
print(result.stdout)
print("masked", [l.masked for l in kept_rulesets.launchers()])
"""


def test_masks_hold_for_an_unprivileged_user_too() -> None:
    """mylm run by an ordinary user makes the mount namespace inside a user namespace: tried as `nobody`."""
    landlock_sandbox()
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if os.geteuid() != 0 or setpriv is None or not os.access(python, os.X_OK):
        pytest.skip("needs root (to become nobody), setpriv and a system python3")
    probe = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-Urm",
                            "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("unprivileged user namespaces are off here (mylm then keeps Landlock and the policy only)")
    base = Path(tempfile.mkdtemp(prefix="mylm-unpriv-"))
    try:
        workspace, home = base / "ws", base / "home"
        workspace.mkdir()
        home.mkdir()
        plant(workspace)
        for path in (base, *base.rglob("*")):
            os.chown(path, 65534, 65534, follow_symlinks=False)
        os.chmod(base, 0o755)
        done = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", UNPRIVILEGED, str(ROOT),
             str(workspace)],
            cwd=workspace, env={"HOME": str(home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8"},
            capture_output=True, text=True, timeout=120, check=False,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("65534"), done.stdout
    assert SECRET not in done.stdout and "plain notes" in done.stdout
    assert "masked [0]" not in done.stdout, done.stdout



def test_a_workspace_with_thousands_of_secrets_masks_them_all(workspace: Path) -> None:
    """The list travels to the launcher in a memfd: on its command line, 3,000 paths would pass the 128 KiB
    an argument may hold, and no command would start."""
    (workspace / "certs").mkdir()
    for i in range(3000):
        (workspace / "certs" / f"a-long-certificate-file-name-to-fill-the-list-{i:04d}.pem").write_text(SECRET)
    (workspace / "notes.txt").write_text("plain notes\n")
    output = run(landlock_sandbox(), "read-only", "cat certs/*-0007.pem certs/*-2999.pem notes.txt", workspace)
    assert SECRET not in output and "plain notes" in output
