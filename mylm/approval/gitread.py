"""Read-only git: the subcommands and options that only print, and when the repository makes them unsafe.

Options are listed per subcommand (git 2.39's manual) and must be written in full: git's option parser takes
abbreviations (`git grep --open` is `--open-files-in-pager`). Even `git status` runs programs when the
repository says so (`core.fsmonitor`, a clean filter, a `post-index-change` hook), and the repository's own
config is not trusted, so git is read-only only in a repository whose config (as git itself reads it) holds
nothing but known-harmless settings and which lies inside the workspace (gitrepo.py).
"""

from __future__ import annotations

from pathlib import Path

from .gitrepo import history_problem, repository_problem
from .options import Parsed, Spec, UnknownOption, parse_args
from .reach import path_problem, secret_beneath

#: What `git log`, `git show` and `git shortlog` accept for choosing and showing commits. Not --output
#: (writes), --ext-diff / --textconv (run drivers), -O (reads an order file), --show-signature (runs gpg).
_REVS = (
    "all branches? tags? remotes? since= after= until= before= author= committer= grep= invert-grep "
    "all-match regexp-ignore-case extended-regexp fixed-strings max-count= skip= reverse first-parent "
    "no-merges merges topo-order date-order author-date-order left-right cherry-pick cherry-mark boundary "
    "full-history simplify-by-decoration ancestry-path not "
)
_DIFF = (
    "patch no-patch stat? shortstat numstat name-only name-status unified= ignore-all-space "
    "ignore-space-change ignore-blank-lines ignore-space-at-eol ignore-cr-at-eol word-diff? color? no-color "
    "color-words? diff-filter= find-renames? find-copies? no-renames raw summary compact-summary dirstat? "
    "full-index binary no-ext-diff no-textconv minimal patience histogram diff-algorithm= relative? "
    "no-relative function-context abbrev? src-prefix= dst-prefix= no-prefix text stat-width= "
)
_LOG = (
    "oneline graph decorate? no-decorate abbrev-commit no-abbrev-commit format= pretty? date= relative-date "
    "follow source parents children log-size mailmap no-mailmap use-mailmap full-diff encoding= notes? "
    "no-notes cc "
)
_DIFF_SHORT = "puszU:wbM::C::RaW"
_LOG_SHORT = "n:iEFS:G:cm"

GIT: dict[str, Spec] = {
    "status": Spec("sbvzu::", "short branch porcelain? long verbose untracked-files? ignored? "
                   "ignore-submodules? column? no-column ahead-behind no-ahead-behind renames no-renames "
                   "find-renames? show-stash null"),
    "log": Spec(_DIFF_SHORT + _LOG_SHORT, _REVS + _DIFF + _LOG, numeric=True),
    "show": Spec(_DIFF_SHORT + _LOG_SHORT, _REVS + _DIFF + _LOG, numeric=True),
    "diff": Spec(_DIFF_SHORT + "123", _DIFF + "cached staged exit-code quiet check merge-base base ours "
                 "theirs"),
    "shortlog": Spec("nsecw::", "numbered summary email committer group= format= " + _REVS),
    "rev-parse": Spec("q", "show-toplevel git-dir abbrev-ref? short? verify quiet is-inside-work-tree "
                      "is-inside-git-dir is-bare-repository is-shallow-repository show-prefix show-cdup "
                      "absolute-git-dir git-common-dir symbolic symbolic-full-name all branches? tags? "
                      "remotes? revs-only no-revs flags no-flags default= since= after= until= before= "
                      "show-object-format? show-superproject-working-tree"),
    "ls-files": Spec("cdmoisukztvfx:", "cached deleted modified others ignored stage unmerged killed "
                     "directory no-empty-directory eol exclude-standard exclude= full-name "
                     "recurse-submodules abbrev? "
                     "debug deduplicate error-unmatch format="),
    "blame": Spec("L:ltsewM::C::pbnfc", "porcelain line-porcelain incremental root show-stats show-name "
                  "show-number abbrev= date= color-lines color-by-age minimal since= ignore-rev="),
    "describe": Spec("", "tags all long abbrev= always exact-match candidates= match= exclude= first-parent "
                     "contains dirty? broken?"),
    "ls-tree": Spec("drtlz", "long name-only name-status object-only full-name full-tree abbrev? format="),
    "cat-file": Spec("tspe", ""),
    "merge-base": Spec("a", "all octopus independent is-ancestor fork-point"),
    "show-ref": Spec("dsq", "head tags heads verify dereference hash? abbrev? quiet"),
    "grep": Spec(
        "iIwvhHEGFPnlLcoqzpWe:f:A:B:C:",
        "ignore-case word-regexp invert-match full-name extended-regexp basic-regexp fixed-strings "
        "perl-regexp line-number column files-with-matches name-only files-without-match count only-matching "
        "quiet null show-function function-context heading break color? no-color max-depth= max-count= "
        "untracked cached exclude-standard no-exclude-standard recurse-submodules all-match and or not "
        "context= after-context= before-context= threads= text",
        numeric=True,
    ),
    # Listing forms only: an operand names a branch or tag to create, unless --list says it is a pattern.
    "branch": Spec("arvlic", "all remotes verbose list show-current ignore-case contains= no-contains= "
                   "merged= no-merged= sort= format= points-at= color? no-color column? no-column abbrev="),
    "tag": Spec("ln::i", "list sort= contains= no-contains= merged= no-merged= points-at= format= "
                "ignore-case column? no-column"),
    "remote": Spec("v", "verbose"),
}
#: Subcommands whose operands create something unless a listing option is given.
_LISTING = {"branch": ("-l", "--list", "-a", "--all", "-r", "--remotes"), "tag": ("-l", "--list"),
            "remote": ()}


def git_problem(
    args: list[str], workspace: Path | None, cwds: list[str], *, deadline: float | None = None
) -> str | None:
    """Why `git ARGS` is not read-only from any of the directories `cwds`, or None."""
    if args == ["--version"]:
        return None
    if not args or args[0].startswith("-"):
        return "git options before the subcommand (-c, -C, --git-dir, ...) can run programs"
    sub = args[0]
    spec = GIT.get(sub)
    if spec is None:
        return f"'git {sub}' is not on the read-only list"
    try:
        parsed = parse_args(spec, args[1:])
    except UnknownOption as error:
        return f"'git {sub}': {error}"
    if sub in _LISTING and parsed.operands and not parsed.has(*_LISTING[sub]):
        return f"'git {sub} NAME' creates or changes a {sub}"
    values = [v for _, v in parsed.options if v is not None]
    for cwd in cwds:
        for word in parsed.operands + values:
            for path in _paths_in(word):
                problem = path_problem(workspace, cwd, path)
                if problem:
                    return problem
        problem = repository_problem(workspace, cwd, deadline=deadline)
        if problem:
            return problem
    problem = _contents_problem(sub, parsed, workspace, cwds, deadline)
    if problem:
        return problem
    if sub == "grep":
        # Tracked files, or untracked ones too, anywhere in the repository (`:/`): check the whole workspace.
        secret = secret_beneath(workspace, ".", ["."], into_git=False)
        if secret:
            return f"it searches a tree that holds the secret {secret}"
    return None


#: Options that make `git log` reveal file contents: the ones that print diffs, and the pickaxe (`-S`, `-G`),
#: which prints nothing of a file but answers whether a guessed string was ever in it (an oracle that confirms
#: a secret's value one guess at a time).
_PATCH = frozenset({"-p", "-u", "-U", "-W", "-c", "--patch", "--unified", "--word-diff", "--color-words",
                    "--cc", "--binary", "--function-context", "--text", "--full-diff", "-S", "-G"})
#: `git log` options that choose the revisions to walk, handed to `git rev-list` as they are.
_REF_SETS = ("--all", "--branches", "--tags", "--remotes")


def _contents_problem(
    sub: str, parsed: Parsed, workspace: Path | None, cwds: list[str], deadline: float | None
) -> str | None:
    """For the forms that print file contents from git's objects, not the work tree: whether what they can
    reach holds a secret (a `.env` committed and deleted since still prints from `git log -p`)."""
    ops = parsed.operands
    if sub == "log" and any(option in _PATCH for option, _ in parsed.options):
        head, index, operands = True, False, ops
    elif sub == "show":  # `git show REV:path` alone prints that path, checked as a path already
        head, index, operands = not (ops and all(":" in op for op in ops)), False, ops
    elif sub == "diff":
        # The index against the work tree, or (--cached) HEAD against the index: a file deleted from the index
        # but still in HEAD prints whole as a removal.
        head, index, operands = parsed.has("--cached", "--staged"), True, ops
    elif sub == "grep" and (parsed.has("--cached") or len(ops) > 1):
        pattern = 0 if parsed.has("-e", "--regexp", "-f", "--file") else 1
        head, index, operands = False, parsed.has("--cached"), ops[pattern:]
    elif sub == "cat-file" and not parsed.has("-t", "-s", "-e"):
        head, index, operands = False, False, ops[-1:]  # `-p OBJECT` or `TYPE OBJECT`
    else:
        return None
    if workspace is None:
        return "without a workspace the git repository cannot be checked"
    sets = [o if v is None else f"{o}={v}" for o, v in parsed.options if o.partition("=")[0] in _REF_SETS]
    for cwd in cwds:
        problem = history_problem(workspace, cwd, operands, rev_options=sets, head=head, index=index,
                                  deadline=deadline)
        if problem:
            return problem
    return None


def _paths_in(word: str) -> list[str]:
    """The paths a revision or pathspec may name: `HEAD:.env`, `:0:.env`, `:(top).env`, `:!x` as well."""
    paths = [word]
    for i, ch in enumerate(word):
        if ch == ":":
            paths.append(word[i + 1 :])
    if word.startswith(":(") and ")" in word:
        paths.append(word[word.index(")") + 1 :])
    if word.startswith(":") and len(word) > 1 and word[1] in "/!^":
        paths.append(word[2:])
    return [p for p in paths if p]
