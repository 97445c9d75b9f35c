"""git without surprises: ask git itself which repository a command would use and what its config sets.

Discovery (`.git` files, `commondir`, bare repositories, worktrees, `safe.directory`) is git's own logic, so
git answers it (`git rev-parse`, `git config --list --show-scope`), under a timeout within the run's deadline;
mylm never re-implements it. A repository's own config is not trusted (it can come with the workspace), so
git is read-only only when that config sets nothing but known-harmless keys, the repository lies inside the
workspace and has no submodules. As a second layer, every git a read-only command runs gets the settings in
`NEUTRAL_SETTINGS` forced for that call (through `GIT_CONFIG_COUNT`, which outranks every config file): no
hooks, no fsmonitor, no pager, editor, ssh, credential helper, gpg, and no transport (so no lazy fetch).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.cancel import remaining
from ..tools.environment import NEUTRAL_SETTINGS, child_environment, neutral_env, neutralised
from .sensitive import is_secret_path

# NEUTRAL_SETTINGS and neutralised live with the command environment (mylm.tools.environment), which the shell
# tool builds; they are named here too because they are half of what this module promises (see above).
__all__ = [
    "GIT_TIMEOUT", "HARMLESS_KEYS", "NEUTRAL_SETTINGS", "neutral_env", "neutralised", "repository_problem",
]

#: Repository settings that change nothing a read-only command runs or reads (`*` is a subsection). Not
#: extensions.partialClone or remote.*.promisor: a partial clone fetches missing objects from reads. Not the
#: keys that name a file git reads (blame.ignoreRevsFile, core.excludesFile, mailmap.file, include.path):
#: a repository's own config could point them outside the workspace, or at /dev/tty.
HARMLESS_KEYS = (
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates", "core.ignorecase",
    "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol", "core.safecrlf", "core.quotepath",
    "core.abbrev", "core.compression", "core.loosecompression", "core.sharedrepository", "core.commentchar",
    "core.whitespace", "core.checkstat", "core.trustctime", "core.untrackedcache", "core.splitindex",
    "core.multipackindex", "core.commitgraph", "core.preloadindex", "core.sparsecheckout",
    "core.sparsecheckoutcone", "core.longpaths", "core.fscache", "core.protectntfs", "core.protecthfs",
    "core.hookspath", "remote.*.url", "remote.*.pushurl", "remote.*.fetch",
    "remote.*.push", "remote.*.mirror", "remote.*.tagopt", "remote.*.prune", "remote.*.prunetags",
    "branch.*.remote", "branch.*.merge", "branch.*.rebase", "branch.*.pushremote", "branch.*.description",
    "user.name", "user.email", "user.signingkey", "pull.*", "push.*", "fetch.*", "gui.*", "github.*",
    "gitlab.*", "help.*", "alias.*", "blame.blankboundary", "blame.coloring", "blame.date",
    "blame.showemail", "blame.showroot", "blame.markunblamablelines", "blame.markignoredlines", "status.*",
    "lfs.*", "worktree.*", "init.defaultbranch",
    "extensions.objectformat", "extensions.worktreeconfig", "extensions.preciousobjects", "gc.*", "pack.*",
    "index.*", "feature.*", "maintenance.*", "submodule.*.url", "submodule.*.active", "submodule.*.branch",
    "color.*", "diff.renames", "diff.algorithm", "diff.mnemonicprefix", "diff.noprefix", "diff.colormoved",
    "diff.submodule", "diff.*.xfuncname", "diff.*.funcname", "diff.*.binary", "diff.*.wordregex",
    "merge.conflictstyle", "rerere.enabled", "log.date", "log.decorate", "log.follow", "format.pretty",
    "commit.gpgsign", "commit.template", "tag.gpgsign", "advice.*", "i18n.*", "rebase.autosquash",
    "rebase.autostash", "rebase.updaterefs",
)
#: Hooks that git runs from commands the policy calls read-only (`git status` may rewrite the index).
_READ_HOOKS = ("post-index-change",)
#: The most one question to git may take, within the run's deadline.
GIT_TIMEOUT = 5.0
#: Every other scope ("local", "worktree", anything a newer git adds) is the repository's, and not trusted.
_TRUSTED_SCOPES = frozenset({"system", "global", "command"})


class _NoAnswer(Exception):
    """git could not answer in time, or failed for a reason other than "not a repository"."""


def repository_problem(
    workspace: Path | None,
    cwd: str,
    *,
    deadline: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why git commands run from `cwd` (workspace-relative) are not read-only, or None."""
    if workspace is None:
        return "without a workspace the git repository cannot be checked"
    root = os.path.realpath(workspace)
    here = os.path.realpath(os.path.join(root, cwd))
    if not os.path.isdir(here):
        return None  # the `cd` fails first: git never runs there
    env = _environment(environ)
    try:
        found = _ask(["rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir", "--git-path",
                      "hooks", "--show-toplevel"], here, env, deadline, top_optional=True)
        if found is None:
            return None  # not a repository: git fails and runs nothing
        git_dir, common, hooks, *rest = found.splitlines() + ["", "", ""]
        top = rest[0]
        for what, path in (("git directory", git_dir), ("common git directory", common), ("work tree", top)):
            if path and not _inside(root, path):
                return f"the repository's {what} ({path}) is outside the workspace"
        if not git_dir or not common:
            return "git did not say where the repository is"
        for hook in _READ_HOOKS:
            if os.path.lexists(os.path.join(hooks, hook)):
                return f"the repository has a {hook} hook, which git runs from read-only commands"
        if (top and os.path.lexists(os.path.join(top, ".gitmodules"))) or os.path.lexists(
            os.path.join(common, "modules")
        ):
            return "the repository has submodules, whose own git config is not checked"
        listing = _ask(["config", "--list", "--show-scope", "-z"], here, env, deadline)
    except _NoAnswer as error:
        return str(error)
    return _config_problem(listing or "")


def _environment(environ: Mapping[str, str] | None) -> dict[str, str]:
    if environ is None:
        environ = child_environment()
    # Not NEUTRAL_SETTINGS: the question is what the repository itself would make git do (its hooks path too).
    return {**environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _ask(args: list[str], cwd: str, env: dict[str, str], deadline: float | None, *,
         top_optional: bool = False, feed: str | None = None) -> str | None:
    """git's stdout for `args` (given `feed` on stdin), None when `cwd` is not in a repository; `_NoAnswer`
    otherwise."""
    budget = min(GIT_TIMEOUT, remaining(deadline))
    if budget <= 0:
        raise _NoAnswer("no time is left in this run to ask git about the repository")
    given = None if feed is None else feed.encode("utf-8", "surrogateescape")
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, timeout=budget, input=given,
            stdin=subprocess.DEVNULL if given is None else None, check=False,
        )
    except subprocess.TimeoutExpired:
        raise _NoAnswer(
            f"git did not answer within {budget:.3g} s about the repository (a FIFO or a hung file system?)"
        ) from None
    except OSError as error:
        raise _NoAnswer(f"git cannot be run to check the repository ({error.strerror})") from None
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode == 0:
        return out
    if "not a git repository" in err:
        return None
    if top_optional and "must be run in a work tree" in err and len(out.splitlines()) == 3:
        return out  # a bare repository, or inside .git: there is no work tree to name
    first = err.splitlines()[0] if err else f"exit {done.returncode}"
    raise _NoAnswer(f"git cannot read the repository ({first})")


def history_problem(
    workspace: Path,
    cwd: str,
    operands: list[str],
    *,
    rev_options: Sequence[str] = (),
    head: bool = True,
    index: bool = False,
    deadline: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why a git command that prints file contents (`log -p`, `show`, `diff`, `grep REV`, `cat-file -p`) could
    print a secret: a file the policy calls secret anywhere in what it can reach, committed and deleted since
    included, or a blob named by its hash (no path to judge it by). git says which objects the command's
    revisions reach (`rev-list --objects`, plus the index when `index`); with no revision among the operands,
    HEAD when `head`."""
    here = os.path.realpath(os.path.join(workspace, cwd))
    env = _environment(environ)
    candidates = [c for op in operands for c in _positive_revisions(op)]
    try:
        revs: list[str] = []
        if candidates:
            found = _ask(["cat-file", "--batch-check=%(objectname) %(objecttype)"], here, env, deadline,
                         feed="".join(f"{c}^{{}}\n" for c in candidates)) or ""
            for line in found.splitlines():
                name, _, kind = line.partition(" ")
                if kind == "blob":
                    return "it prints a file by its object name, which the policy cannot tie to a path"
                if kind in ("commit", "tree"):
                    revs.append(name)
        revs += list(rev_options)
        if head and not revs:
            revs = ["HEAD"]
        # `REV:path` prints that blob: its path is checked as a path, and its contents against the history
        # (`git show HEAD:notes.txt` after `git mv .env notes.txt`).
        named = [op for op in operands if ":" in op and not op.startswith("-")]
        blobs = set()
        if named:
            found = _ask(["cat-file", "--batch-check=%(objectname) %(objecttype)"], here, env, deadline,
                         feed="".join(f"{op}\n" for op in named)) or ""
            blobs = {line.split()[0] for line in found.splitlines() if line.endswith(" blob")}
        if not revs and not index and not blobs:
            return None
        if not revs and not index:
            secret_blobs = _secret_blobs(here, env, deadline)
            hit = next((b for b in sorted(blobs) if b in secret_blobs), None)
            return None if hit is None else (
                f"it prints a file whose content was the secret file {secret_blobs[hit]} (renamed, or kept under "
                "another name, in the history, the index, the stash or a reflog)")
        listing = _ask(["rev-list", "--objects", "--ignore-missing", *(["--indexed-objects"] if index else []),
                        *revs, "--"],
                       here, env, deadline) or ""
        secret_blobs = _secret_blobs(here, env, deadline)
    except _NoAnswer as error:
        return str(error)
    pathless: list[str] = []
    for line in listing.splitlines():
        name, space, path = line.partition(" ")
        if path and is_secret_path(path):
            return (f"git can show the secret file {path} (in the repository's history or index), and this "
                    "command prints file contents")
        if name in secret_blobs:
            was = secret_blobs[name]
            return (f"git can show {path or name}, whose content was the secret file {was} (renamed, or kept "
                    "under another name, in the history, the index, the stash or a reflog)")
        if space and not path:
            pathless.append(name)  # a root tree, or what a tag names directly (a blob has no path then)
    if pathless:
        try:
            kinds = _ask(["cat-file", "--batch-check=%(objecttype)"], here, env, deadline,
                         feed="".join(f"{name}\n" for name in pathless)) or ""
        except _NoAnswer as error:
            return str(error)
        if "blob" in kinds.split():
            return "a ref or tag names a file's contents directly, which the policy cannot tie to a path"
    return None


def _secret_blobs(here: str, env: dict[str, str], deadline: float | None) -> dict[str, str]:
    """Every blob that was ever a secret file, under any path it had, as git says: each commit any ref, the
    reflogs (the stash's included) or HEAD reach, diffed against each parent (and the root against nothing),
    and every entry of the index; blob name -> the secret path it was at."""
    found: dict[str, str] = {}
    log = _ask(["log", "--all", "--reflog", "--root", "-m", "--raw", "--no-renames", "--no-abbrev",
                "--format=", "--no-ext-diff", "--no-textconv"], here, env, deadline) or ""
    for line in log.splitlines():
        if not line.startswith(":"):
            continue
        fields, _, path = line.partition("\t")
        parts = fields.split()
        if len(parts) >= 4 and is_secret_path(path):
            for blob in parts[2:4]:
                if blob.strip("0"):
                    found.setdefault(blob, path)
    staged = _ask(["ls-files", "--stage", "-z"], here, env, deadline) or ""
    for entry in staged.split("\0"):
        fields, _, path = entry.partition("\t")
        parts = fields.split()
        if len(parts) >= 2 and is_secret_path(path):
            found.setdefault(parts[1], path)
    return found


def _positive_revisions(operand: str) -> list[str]:
    """The revisions an operand adds (`A..B` adds B, `A...B` both, `^A` nothing); `REV:path` is a path, which
    the caller checks as one. A path operand comes back too: git says it is no object."""
    if ":" in operand or operand.startswith(("^", "-")) or not operand:
        return []
    if "..." in operand:
        return [side or "HEAD" for side in operand.split("...", 1)]
    if ".." in operand:
        return [operand.split("..", 1)[1] or "HEAD"]
    return [operand]


def _inside(root: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _config_problem(listing: str) -> str | None:
    """The first repository-scope key (from `git config --list --show-scope -z`) not known to be harmless."""
    fields = listing.split("\0")
    for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
        if scope in _TRUSTED_SCOPES:
            continue  # the user's own config; "command" is NEUTRAL_SETTINGS
        key = entry.partition("\n")[0].lower()
        if not any(fnmatch.fnmatchcase(key, pattern) for pattern in HARMLESS_KEYS):
            return f"the repository's git config sets {key}, which can make git run programs or read files"
    return None
