"""git shows what the policy calls secret: history, the index, objects by hash, and files its config names.

A `.env` committed and deleted since still prints from `git log -p`, `git show`, `git diff REV`, `git grep
PATTERN REV` and `git cat-file -p HASH`; those forms ask when git says what they can reach holds a secret
(gitrepo.history_problem), and stay auto-approved in a repository whose history holds none. A repository's
config that names a file (blame.ignoreRevsFile, core.excludesFile) asks. URL credentials print redacted.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from mylm.approval.commands import classify
from mylm.tools.shell import shell_tool
from tests.security.gitscenes import git
from tests.tools.test_tool_policy_exploits import run

SECRET = "HISTORYSECRET=9f8e7d6c5b4a"


def level(ws: Path, command: str) -> str:
    return classify(command, workspace=ws, deadline=time.monotonic() + 30).level


@pytest.fixture
def history(workspace: Path) -> Path:
    """A repository whose second commit deleted the `.env` its first commit added."""
    git(workspace, "init", "-q")
    (workspace / ".env").write_text(SECRET + "\n")
    (workspace / "a.txt").write_text("text\n")
    git(workspace, "add", ".env", "a.txt")
    git(workspace, "commit", "-qm", "one")
    git(workspace, "rm", "-q", ".env")
    (workspace / "a.txt").write_text("more text\n")
    git(workspace, "commit", "-qam", "two")
    return workspace


@pytest.mark.parametrize("command", [
    "git log -p", "git log --patch -3", "git log -p -- a.txt", "git log --all -U1", "git show", "git show HEAD~1",
    "git diff HEAD~1", "git diff HEAD~1 HEAD", "git grep HISTORY HEAD~1", "git log -p HEAD~1..HEAD",
    # The pickaxe prints no contents but confirms a guessed secret: `git log -S9f8e --oneline` lists the commits
    # whose files gained or lost that string.
    "git log -S HISTORYSECRET", "git log -G 9f8e --oneline", "git log -S9f8e --all --format=%H",
])
def test_contents_from_a_history_holding_a_secret_ask(history: Path, command: str) -> None:
    assert level(history, command) == "unknown"
    assert run(history, command) is None


def test_a_blob_by_its_hash_asks(history: Path) -> None:
    blob = git(history, "rev-parse", "HEAD~1:.env").strip()
    assert level(history, f"git cat-file -p {blob}") == "unknown"
    assert level(history, f"git show {blob[:12]}") == "unknown"
    assert level(history, f"git cat-file -t {blob}") == "safe"  # the type prints nothing of the file


@pytest.mark.parametrize("command", [
    "git log --oneline", "git log --stat", "git log --grep=one", "git show HEAD:a.txt", "git diff", "git grep text", "git status",
    "git blame a.txt",
])
def test_forms_that_print_no_history_contents_stay_auto_approved(history: Path, command: str) -> None:
    assert level(history, command) == "safe"


def test_a_clean_history_keeps_log_p_and_show_auto_approved(workspace: Path) -> None:
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("one\n")
    git(workspace, "add", "a.txt")
    git(workspace, "commit", "-qm", "one")
    (workspace / "a.txt").write_text("two\n")
    for command in ("git log -p", "git show", "git diff HEAD", "git grep one HEAD", "git log -S one --oneline"):
        assert level(workspace, command) == "safe", command
    assert "+two" in (run(workspace, "git diff HEAD") or "")


def test_a_secret_staged_then_removed_from_disk_makes_diff_ask(workspace: Path) -> None:
    git(workspace, "init", "-q")
    (workspace / "id_rsa").write_text("KEY\n")
    git(workspace, "add", "id_rsa")
    (workspace / "id_rsa").unlink()
    assert level(workspace, "git diff") == "unknown"  # the deletion prints the staged key
    assert level(workspace, "git grep --cached KEY") == "unknown"


@pytest.mark.parametrize("key", ["blame.ignoreRevsFile", "core.excludesFile", "mailmap.file"])
def test_repository_config_that_names_a_file_asks(history: Path, outside: Path, key: str) -> None:
    git(history, "config", key, str(outside / "secret.txt"))
    assert level(history, "git blame a.txt") == "unknown"
    assert level(history, "git status") == "unknown"


def test_remote_url_credentials_print_redacted(history: Path) -> None:
    token = "ghtoken0123456789abcdef"
    git(history, "remote", "add", "origin", f"https://{token}@git.example.com/r.git")
    git(history, "remote", "add", "other", "https://user:pa55word99@git.example.com/r.git")
    assert level(history, "git remote -v") == "safe"
    out = str(shell_tool(history).function(command="git remote -v"))
    assert "git.example.com" in out and token not in out and "pa55word99" not in out
    assert "[REDACTED]@git.example.com" in out


def test_no_time_left_asks(history: Path) -> None:
    assert classify("git log -p", workspace=history, deadline=time.monotonic() - 1).level == "unknown"
    assert subprocess.run(["git", "log", "-p"], cwd=history, capture_output=True, text=True).stdout.count(SECRET)
