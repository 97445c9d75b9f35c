"""Repositories whose own config makes git run a program, laid out with every discovery trick in the issue.

Each trick builds a workspace where git (not mylm) finds a git directory; `poison` then writes a hostile
setting into the config git really reads, found by asking git, and `poisoned` proves git sees it. A policy
that re-implemented discovery was fooled by each of these layouts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


def _repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "f").write_text("one\n")
    (path / "a.txt").write_text("text\n")
    git(path, "add", "f", "a.txt")
    git(path, "commit", "-qm", "init")
    (path / "f").write_text("two\n")  # a change, so `git diff` has something to show
    (path / "a.txt").write_text("changed\n")


def plain(ws: Path) -> str:
    _repo(ws)
    return "."


def gitfile_two_spaces(ws: Path) -> str:
    """`.git` is a file saying `gitdir:  g`: git reads the path ' g', a reader that strips reads 'g'."""
    _repo(ws)
    shutil.move(ws / ".git", ws / " g")
    shutil.copytree(ws / " g", ws / "g")  # the decoy, left clean
    (ws / ".git").write_text("gitdir:  g\n")
    return "."


def gitfile_trailing_space(ws: Path) -> str:
    """`.git` says `gitdir: g ` (a trailing space): one of 'g' and 'g ' is git's, the other a clean decoy."""
    _repo(ws)
    shutil.move(ws / ".git", ws / "g")
    shutil.copytree(ws / "g", ws / "g ")
    (ws / ".git").write_text("gitdir: g \n")
    return "."


def empty_dotgit_in_subdir(ws: Path) -> str:
    """An empty `.git` directory inside the work tree: git skips it and uses the repository above."""
    _repo(ws)
    (ws / "sub" / ".git").mkdir(parents=True)
    return "sub"


def commondir_leading_space(ws: Path) -> str:
    """A linked worktree whose `commondir` starts with a space."""
    _repo(ws / "main")
    git(ws / "main", "worktree", "add", "-q", str(ws / "wt"))
    admin = Path(git(ws / "wt", "rev-parse", "--absolute-git-dir").rstrip("\n"))
    common = Path(git(ws / "wt", "rev-parse", "--path-format=absolute", "--git-common-dir").rstrip("\n"))
    # `commondir` is relative to the worktree's admin directory; whichever copy git reads gets poisoned.
    shutil.copytree(common, admin / " c", ignore=shutil.ignore_patterns("worktrees"))
    shutil.copytree(common, admin / "c", ignore=shutil.ignore_patterns("worktrees"))
    (admin / "commondir").write_text(" c\n")
    (ws / "wt" / "a.txt").write_text("changed\n")
    return "wt"


def nested_head_commondir(ws: Path) -> str:
    """A directory holding `HEAD` and `commondir` (a plain clone delivers it): git takes it as a git dir."""
    _repo(ws)
    nested = ws / "nested"
    nested.mkdir()
    (nested / "HEAD").write_text("ref: refs/heads/main\n")
    (nested / "commondir").write_text("../.git\n")
    return "nested"


def bare_in_subdir(ws: Path) -> str:
    _repo(ws)
    subprocess.run(["git", "init", "-q", "--bare", str(ws / "vendor")], check=True)
    with open(ws / "vendor" / "config", "a") as f:
        f.write("[core]\n\tbare = false\n\tworktree = ..\n")
    return "vendor"


TRICKS: dict[str, Callable[[Path], str]] = {
    "plain": plain,
    "gitfile-two-spaces": gitfile_two_spaces,
    "gitfile-trailing-space": gitfile_trailing_space,
    "empty-dotgit-in-subdir": empty_dotgit_in_subdir,
    "commondir-leading-space": commondir_leading_space,
    "nested-head-commondir": nested_head_commondir,
    "bare-in-subdir": bare_in_subdir,
}

#: Settings that make git run `{cmd}`; `attributes` is written to .gitattributes when the driver needs it.
HOOKS: dict[str, tuple[str, str]] = {
    "core.fsmonitor": ("[core]\n\tfsmonitor = {cmd}\n", ""),
    "diff.external": ("[diff]\n\texternal = {cmd}\n", ""),
    "textconv": ('[diff "x"]\n\ttextconv = {cmd}\n', "*.txt diff=x\n"),
    "diff-driver-command": ('[diff "x"]\n\tcommand = {cmd}\n', "*.txt diff=x\n"),
    "filter-clean": ('[filter "x"]\n\tclean = {cmd}\n\tsmudge = {cmd}\n', "*.txt filter=x\n"),
    "filter-process": ('[filter "x"]\n\tprocess = {cmd}\n', "*.txt filter=x\n"),
    "core.pager": ("[core]\n\tpager = {cmd}\n[pager]\n\tlog = {cmd}\n\tdiff = {cmd}\n", ""),
    "gpg": ("[gpg]\n\tprogram = {cmd}\n[log]\n\tshowSignature = true\n", ""),
    "core.sshCommand": ("[core]\n\tsshCommand = {cmd}\n", ""),
    "credential.helper": ("[credential]\n\thelper = !{cmd}\n", ""),
    "core.editor": ("[core]\n\teditor = {cmd}\n", ""),
    "include.path": ("[include]\n\tpath = evil.inc\n", ""),
    "includeIf": ('[includeIf "gitdir:/"]\n\tpath = evil.inc\n', ""),
    "uploadpack.packObjectsHook": ("[uploadpack]\n\tpackObjectsHook = {cmd}\n", ""),
    "protocol.ext": ("[protocol \"ext\"]\n\tallow = always\n[remote \"o\"]\n\turl = ext::{cmd}\n", ""),
    "core.worktree": ("[core]\n\tworktree = {out}\n", ""),
    "hooksPath": ("[core]\n\thooksPath = {hooks}\n", ""),
}


def common_dir(ws: Path, cwd: str) -> Path:
    # Only the newline: git's paths may end in a space (the trailing-space trick); stripping it is the bug.
    return Path(git(ws / cwd, "rev-parse", "--path-format=absolute", "--git-common-dir").rstrip("\n"))


def poison(ws: Path, cwd: str, hook: str, cmd: str, out: Path) -> None:
    """Write `hook` into the config git reads from `ws/cwd`, running `cmd`."""
    config, attributes = HOOKS[hook]
    common = common_dir(ws, cwd)
    hooks = _top(ws, cwd) / "myhooks"
    text = config.replace("{cmd}", cmd).replace("{out}", str(out)).replace("{hooks}", str(hooks))
    with open(common / "config", "a") as f:
        f.write(text)
    (common / "evil.inc").write_text(f"[core]\n\tfsmonitor = {cmd}\n")
    if hook == "hooksPath":
        hooks.mkdir(parents=True, exist_ok=True)
        (hooks / "post-index-change").write_text(f"#!/bin/sh\n{cmd}\n")
        (hooks / "post-index-change").chmod(0o755)
    if attributes:
        top = _top(ws, cwd)
        (top / ".gitattributes").write_text(attributes)
    for name in ("a.txt", "f"):
        for target in {_top(ws, cwd), ws / cwd}:
            if (target / name).exists():
                os.utime(target / name, (1, 1))  # stale stat data: git status refreshes the index


def _top(ws: Path, cwd: str) -> Path:
    done = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=ws / cwd, capture_output=True, text=True
    )
    return Path(done.stdout.rstrip("\n")) if done.returncode == 0 else ws / cwd


def poisoned(ws: Path, cwd: str, needle: str) -> bool:
    """Whether git itself, from `ws/cwd`, reads a repository setting holding `needle` (the trick worked)."""
    listing = git(ws / cwd, "config", "--list", "--show-scope")
    return any(line.startswith(("local\t", "worktree\t")) and needle in line for line in listing.splitlines())
