"""Whether the git repository a command would use is one whose read-only commands really only read.

A repository's own config can make `git status` or `git diff` run programs (`core.fsmonitor`, `diff.external`,
a textconv or clean filter, `gpg.program` with `log.showSignature`) or read elsewhere (`core.worktree`,
`include.path`), and a `post-index-change` hook runs when `git status` refreshes the index. That config is not
trusted (it can come with the workspace), so only settings known to be harmless are accepted; anything else
makes git commands ask. The user's global and system config are trusted and not read.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

#: Repository settings that change nothing a read-only command runs or reads (`*` is a subsection). Not
#: extensions.partialClone or remote.*.promisor: a partial clone fetches missing objects from reads.
HARMLESS_KEYS = (
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates", "core.ignorecase",
    "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol", "core.safecrlf", "core.quotepath",
    "core.abbrev", "core.compression", "core.loosecompression", "core.sharedrepository", "core.commentchar",
    "core.whitespace", "core.checkstat", "core.trustctime", "core.untrackedcache", "core.splitindex",
    "core.multipackindex", "core.commitgraph", "core.preloadindex", "core.sparsecheckout",
    "core.sparsecheckoutcone", "core.longpaths", "core.fscache", "core.protectntfs", "core.protecthfs",
    "core.excludesfile", "remote.*.url", "remote.*.pushurl", "remote.*.fetch", "remote.*.push",
    "remote.*.mirror", "remote.*.tagopt", "remote.*.prune", "remote.*.prunetags",
    "branch.*.remote", "branch.*.merge", "branch.*.rebase", "branch.*.pushremote", "branch.*.description",
    "user.name", "user.email", "user.signingkey", "pull.*", "push.*", "fetch.*", "gui.*", "github.*",
    "gitlab.*", "help.*", "alias.*", "blame.*", "status.*", "lfs.*", "worktree.*", "init.defaultbranch",
    "extensions.objectformat", "extensions.worktreeconfig", "extensions.preciousobjects", "gc.*", "pack.*",
    "index.*", "feature.*", "maintenance.*", "submodule.*.url", "submodule.*.active", "submodule.*.branch",
    "color.*", "diff.renames", "diff.algorithm", "diff.mnemonicprefix", "diff.noprefix", "diff.colormoved",
    "diff.submodule", "diff.*.xfuncname", "diff.*.funcname", "diff.*.binary", "diff.*.wordregex",
    "merge.conflictstyle", "rerere.enabled", "log.date", "log.decorate", "log.follow", "format.pretty",
    "commit.gpgsign", "commit.template", "tag.gpgsign", "advice.*", "i18n.*", "rebase.autosquash",
    "rebase.autostash", "rebase.updaterefs",
)
#: Hooks that git runs from commands the policy calls read-only (`git status` may write the index).
_READ_HOOKS = ("post-index-change",)
_MAX_CONFIG = 256 * 1024
_MAX_SUBMODULES = 100


def repository_problem(workspace: Path | None, cwd: str) -> str | None:
    """Why git commands run from `cwd` (workspace-relative) are not read-only, or None."""
    if workspace is None:
        return "without a workspace the git repository cannot be checked"
    start = Path(os.path.realpath(os.path.join(workspace, cwd)))
    root = Path(os.path.realpath(workspace))
    found = _discover(start)
    if found is None:
        return None  # not in a repository: git fails and runs nothing
    top, gitdir = found
    if root != top and root not in top.parents:
        return f"the git repository at {top} reaches beyond the workspace"
    problem = _gitdir_problem(gitdir, top)
    if problem:
        return problem
    # `git status` recurses into submodules, each with a git dir (and config) of its own.
    submodules = _submodule_gitdirs(top, _common(gitdir))
    if len(submodules) >= _MAX_SUBMODULES:
        return "the repository has too many submodules to check"
    for sub in submodules:
        problem = _gitdir_problem(sub, sub)
        if problem:
            return f"a submodule: {problem}"
    return None


def _common(gitdir: Path) -> Path:
    """The directory holding the shared config and hooks (a linked worktree's git dir names it)."""
    try:
        return (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    except OSError:
        return gitdir


def _gitdir_problem(gitdir: Path, top: Path) -> str | None:
    common = _common(gitdir)
    for hook in _READ_HOOKS:
        if os.path.lexists(common / "hooks" / hook):
            return f"the repository has a {hook} hook, which git runs from read-only commands"
    for config in {common / "config", gitdir / "config.worktree"}:
        problem = _config_problem(config, top)
        if problem:
            return problem
    return None


def _submodule_gitdirs(top: Path, common: Path) -> list[Path]:
    found: list[Path] = []
    stack = [common / "modules"]  # absorbed submodules: modules/NAME (NAME may hold '/'), nested ones below
    while stack and len(found) < _MAX_SUBMODULES:
        try:
            children = [c for c in stack.pop().iterdir() if c.is_dir() and c.name not in ("objects", "refs")]
        except OSError:
            continue
        for child in children:
            if (child / "config").is_file():
                found.append(child)
                stack.append(child / "modules")
            else:
                stack.append(child)
    try:
        text = (top / ".gitmodules").read_text(errors="replace")
    except OSError:
        return found
    for path in re.findall(r"^\s*path\s*=\s*(.+?)\s*$", text, flags=re.MULTILINE)[: _MAX_SUBMODULES + 1]:
        dot_git = top / path.strip('"') / ".git"
        if dot_git.is_dir():
            found.append(dot_git)
    return found


def _discover(start: Path) -> tuple[Path, Path] | None:
    """(work tree top, git dir) as git finds them from `start`: a `.git` entry, else a bare repository."""
    for directory in (start, *start.parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return directory, dot_git
        if dot_git.is_file():
            try:
                text = dot_git.read_text(errors="replace")
            except OSError:
                return directory, dot_git
            line = text.strip().removeprefix("gitdir:").strip()
            return directory, Path(os.path.realpath(directory / line))
        if (directory / "HEAD").is_file() and all((directory / d).is_dir() for d in ("objects", "refs")):
            return directory, directory  # a bare repository (git also finds those, in the work tree too)
    return None


def _config_problem(path: Path, top: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_CONFIG + 1)
    except FileNotFoundError:
        return None
    except OSError:
        return f"the git config {path} cannot be read"
    if len(data) > _MAX_CONFIG:
        return f"the git config {path} is too large to check"
    entries = config_entries(data.decode("utf-8", "replace"))
    if entries is None:
        return f"the git config {path} cannot be parsed"
    for key, value in entries:
        if key == "core.hookspath":
            problem = _hooks_problem(top, value)
            if problem:
                return problem
        elif not any(fnmatch.fnmatchcase(key, pattern) for pattern in HARMLESS_KEYS):
            return f"the repository's git config sets {key}, which can make git run programs or read files"
    return None


def _hooks_problem(top: Path, value: str) -> str | None:
    """core.hooksPath (husky sets it) is fine unless it holds a hook that read-only commands run."""
    if not value or any(ch in value for ch in "\\\"#;~$"):
        return f"the repository's git config sets core.hooksPath to {value!r}, which cannot be checked"
    for hook in _READ_HOOKS:
        if os.path.lexists(top / value / hook):
            return f"the repository's hooks ({value}) include {hook}, which git runs from read-only commands"
    return None


def config_keys(text: str) -> list[str] | None:
    """Every key a git config file sets, as `section.key` or `section.*.key`; None if it does not parse."""
    entries = config_entries(text)
    return None if entries is None else [key for key, _ in entries]


def config_entries(text: str) -> list[tuple[str, str]] | None:
    """(key, raw value text) for every setting in a git config file; None if it does not parse."""
    keys: list[tuple[str, str]] = []
    section: str | None = None
    i, n = (1 if text.startswith("\ufeff") else 0), len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c in "#;":
            i = _line_end(text, i)
        elif c == "[":
            end = _header_end(text, i)
            if end is None:
                return None
            section, i = _section_name(text[i + 1 : end]), end + 1
            if section is None:
                return None
        elif c.isalpha():
            j = i
            while j < n and (text[j].isalnum() or text[j] == "-"):
                j += 1
            if section is None:
                return None
            key = f"{section}.{text[i:j].lower()}"
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "=":
                i = _value_end(text, j + 1)
                if i < 0:
                    return None
                keys.append((key, text[j + 1 : i].strip()))
            elif j >= n or text[j] in "\r\n#;":
                keys.append((key, ""))
                i = j
            else:
                return None
        else:
            return None
    return keys


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end == -1 else end


def _header_end(text: str, i: int) -> int | None:
    """The index of the `]` closing the header at `i`, honouring a quoted subsection with escapes."""
    j, quoted = i + 1, False
    while j < len(text) and text[j] != "\n":
        if quoted and text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            quoted = not quoted
        elif text[j] == "]" and not quoted:
            return j
        j += 1
    return None


def _section_name(header: str) -> str | None:
    name, _, sub = header.partition('"')
    name = name.strip()
    if sub:
        return f"{name.lower()}.*" if name and not name.endswith(".") else None
    section, dot, _ = name.partition(".")
    if not section or not all(ch.isalnum() or ch in "-." for ch in name):
        return None
    return f"{section.lower()}.*" if dot else section.lower()


def _value_end(text: str, i: int) -> int:
    """Where the value starting at `i` ends (at its newline), following git's quoting and continuations."""
    quoted = False
    while i < len(text):
        c = text[i]
        if c == "\n":
            return -1 if quoted else i
        if c == "\\":
            i += 2  # an escape, or a backslash-newline continuation
            continue
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            return _line_end(text, i)
        i += 1
    return i
