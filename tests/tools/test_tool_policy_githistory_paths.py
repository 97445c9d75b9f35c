"""The history check covers every object git can reach under every path it ever had: a secret renamed, a
secret deleted from the index but still in HEAD, one reachable only through a tag or the stash."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mylm.approval.commands import classify
from tests.security.gitscenes import git

SECRET = "RENAMEDSECRET=41c7b2"


def level(ws: Path, command: str) -> str:
    return classify(command, workspace=ws, deadline=time.monotonic() + 30).level


def repo(ws: Path) -> Path:
    git(ws, "init", "-q")
    (ws / "a.txt").write_text("text\n")
    git(ws, "add", "a.txt")
    git(ws, "commit", "-qm", "start")
    return ws


@pytest.fixture
def renamed(workspace: Path) -> Path:
    """`.env` committed, then `git mv .env notes.txt`: HEAD holds the secret as notes.txt."""
    repo(workspace)
    (workspace / ".env").write_text(SECRET + "\n")
    git(workspace, "add", ".env")
    git(workspace, "commit", "-qm", "env")
    git(workspace, "mv", ".env", "notes.txt")
    git(workspace, "commit", "-qm", "rename")
    return workspace


@pytest.mark.parametrize("command", ["git show HEAD:notes.txt", "git log -p -1", "git show", "git diff HEAD~2",
                                     "git grep RENAMED HEAD", "git log -p --all -- notes.txt"])
def test_a_renamed_secret_still_asks(renamed: Path, command: str) -> None:
    """Before: rev-list named each blob once, by its newest path (notes.txt), so `git log -p` and `git show`
    printed the secret unasked."""
    assert level(renamed, command) == "unknown", command


def test_a_secret_removed_from_the_index_but_in_head_asks(workspace: Path) -> None:
    """`git rm --cached .env`: `git diff --cached` prints the whole file as a removal from HEAD."""
    repo(workspace)
    (workspace / ".env").write_text(SECRET + "\n")
    git(workspace, "add", ".env")
    git(workspace, "commit", "-qm", "env")
    git(workspace, "rm", "-q", "--cached", ".env")
    for command in ("git diff --cached", "git diff --staged", "git diff --cached --stat -p"):
        assert level(workspace, command) == "unknown", command


def test_a_secret_only_a_tag_reaches_asks(workspace: Path) -> None:
    """A tag pointing at the secret's blob (or at a tree holding it) is reachable by `--tags` and `--all`."""
    repo(workspace)
    loose = workspace.parent / "loose.txt"
    loose.write_text(SECRET)
    blob = git(workspace, "hash-object", "-w", str(loose)).strip()
    git(workspace, "tag", "tb", blob)
    for command in ("git show --tags", "git log --all -p", "git show tb", "git log --tags -p"):
        assert level(workspace, command) == "unknown", command


def test_a_secret_in_the_stash_asks(workspace: Path) -> None:
    repo(workspace)
    (workspace / "a.txt").write_text(SECRET + "\n")
    git(workspace, "add", "a.txt")
    (workspace / ".env").write_text(SECRET + "\n")
    git(workspace, "add", ".env")
    git(workspace, "stash", "-q")
    git(workspace, "mv", "a.txt", "b.txt")
    git(workspace, "commit", "-qm", "move")
    assert level(workspace, "git show stash@{0}") == "unknown"
    assert level(workspace, "git log --all -p") == "unknown"


def test_a_clean_history_stays_auto_approved(workspace: Path) -> None:
    repo(workspace)
    git(workspace, "mv", "a.txt", "b.txt")
    git(workspace, "commit", "-qm", "move")
    for command in ("git log -p", "git show", "git diff --cached", "git diff", "git log --all -p"):
        assert level(workspace, command) == "safe", command


def test_an_empty_repository_diff_stays_auto_approved(workspace: Path) -> None:
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("x\n")
    git(workspace, "add", "a.txt")
    assert level(workspace, "git diff --cached") == "safe"
