"""Whether one program invocation is read-only: the program, each of its options, and every path it reaches.

Anything not positively understood is a problem (and so asks): a program not on the list, an option not on
its list (abbreviations included), a `cd` that could leave the workspace, a path that leaves it or names a
secret once symlinks are resolved, a recursive read of a tree holding a secret.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from .gitread import git_problem
from .options import Parsed, UnknownOption, parse_args
from .reach import path_problem, resolved, secret_beneath
from .readonly import PROGRAMS, STRING_OPERANDS, VERSION_PINS, VERSION_QUERY
from .shell_syntax import Word

#: Programs that take any arguments as plain strings and read nothing.
_ANY_STRINGS = frozenset({"echo", "true", "false", "test", "[", "expr"})
#: Options that make grep read whole trees (`-d`/`--directories` take any prefix of `recurse`).
_GREP_RECURSIVE = ("-r", "-R", "--recursive", "--dereference-recursive")
_SED_PRINT = re.compile(r"(\d+|\$)(,(\d+|\$))?p")
_JQ_LOADS = re.compile(r"\b(import|include|modulemeta|get_search_list)\b")


def program_problem(
    argv: list[Word], workspace: Path | None, cwds: list[str], *, deadline: float | None = None
) -> str | None:
    """Why `argv` is not a read-only command when run from any of `cwds`, or None."""
    name = argv[0].text
    args = argv[1:]
    for word in args:
        if word.expands:
            return "an argument uses $-expansion, so its value is only known at run time"
        if word.tilde:
            return "an argument refers to a home directory (~), outside the workspace"
        if word.glob:  # the caller passes what bash expands a glob to (expand.py), never the pattern
            return "an argument is a glob that was not expanded"
    texts = [w.text for w in args]
    if "/" in name:
        return f"'{name}' is not on the read-only list"
    if name in VERSION_QUERY and texts == ["--version"]:
        return _version_pin(workspace, cwds)
    if name in ("test", "[") and any(t in ("-v", "-R") for t in texts):
        # bash evaluates the subscript of `-v 'a[...]'` as arithmetic, which runs `$(...)` inside it.
        return f"'{name} -v' looks up a variable, and bash evaluates an array subscript in its name"
    if name in _ANY_STRINGS:
        return None
    if name == "git":
        return git_problem(texts, workspace, cwds, deadline=deadline)
    if name == "cd":
        return _cd_problem(texts, workspace, cwds)
    special = _special(name, texts)
    if special is not None:
        problem, paths = special
        return problem or _paths(name, paths, args, workspace, cwds)
    spec = PROGRAMS.get(name)
    if spec is None:
        return f"'{name}' is not on the read-only list"
    try:
        parsed = parse_args(spec, texts)
    except UnknownOption as error:
        return f"'{name}': {error}"
    problem = _operand_problem(name, parsed)
    if problem:
        return problem
    operands = [] if name in STRING_OPERANDS else parsed.operands
    values = [v for _, v in parsed.options if v is not None]
    problem = _paths(name, operands + values, args, workspace, cwds)
    return problem or _tree_problem(name, parsed, workspace, cwds)


def _special(name: str, texts: list[str]) -> tuple[str | None, list[str]] | None:
    """Programs with their own syntax: (problem or None, the paths to check), or None when not special."""
    if name in ("env", "hostname"):
        return (f"'{name}' with arguments can run or change something" if texts else None), []
    if name == "command":
        ok = len(texts) >= 2 and texts[0] in ("-v", "-V") and not any(t.startswith("-") for t in texts[1:])
        return (None if ok else "'command PROGRAM' runs it; only `command -v NAME` is read-only"), []
    if name == "printf":
        # bash's `printf -v VAR` assigns a variable (PATH, say) for the rest of the line.
        return ("printf options (-v VAR) set variables" if texts and texts[0].startswith("-") else None), []
    if name == "sed":
        print_only = len(texts) >= 2 and texts[0] == "-n" and _SED_PRINT.fullmatch(texts[1]) is not None
        if not print_only or any(t.startswith("-") for t in texts[2:]):
            return "sed is read-only here only as `sed -n 'N,Mp' FILE`", []
        return None, texts[2:]
    if name == "find":
        return find_problem(texts)
    return None


def _operand_problem(name: str, parsed: Parsed) -> str | None:
    ops = parsed.operands
    if name == "uniq" and len(ops) > 1:
        return "'uniq IN OUT' writes its output to a file"
    if name == "date" and (len(ops) > 1 or any(not op.startswith("+") for op in ops)):
        return "'date MMDDhhmm' sets the system clock"
    if name == "jq":
        if parsed.has("-n", "--null-input") and not ops:
            return None
        if not ops or _JQ_LOADS.search(ops[0]):
            return "a jq program that imports modules can read JSON files anywhere"
        parsed.operands = ops[1:]  # the program is not a path; the rest are files
    return None


def _paths(
    name: str, paths: list[str], args: list[Word], workspace: Path | None, cwds: list[str]
) -> str | None:
    """Check every path the command names (operands and option values) from every possible directory."""
    for cwd in cwds:
        for text in paths:
            problem = path_problem(workspace, cwd, text)
            if problem:
                return problem
    return None


def _tree_problem(name: str, parsed: Parsed, workspace: Path | None, cwds: list[str]) -> str | None:
    """For programs that read whole directory trees: the first secret they could reach."""
    ops = parsed.operands
    if name in ("grep", "egrep", "fgrep"):
        directories = parsed.values("-d", "--directories")
        if not (parsed.has(*_GREP_RECURSIVE) or any(v not in ("read", "skip") for v in directories)):
            return None
        files = ops if parsed.has("-e", "--regexp", "-f", "--file") else ops[1:]
        roots = ops + ([] if files else ["."])  # the pattern as a root too: harmless, and never wrong
        follows = parsed.has("-R", "--dereference-recursive")  # follows symlinks met in the tree
    elif name == "rg":
        roots = ops + ["."] if len(ops) <= 1 else ops
        follows = parsed.has("-L", "--follow")
    elif name == "diff" and parsed.has("-r", "--recursive"):
        roots = ops + parsed.values("--from-file", "--to-file")
        follows = True  # unless --no-dereference
    else:
        return None
    for cwd in cwds:
        # The roots are words as bash passes them: `grep -r KEY *` arrives here with its glob expanded.
        secret = secret_beneath(workspace, cwd, roots, into_git=follows)
        if secret:
            return f"it reads a tree that holds the secret {secret}"
    return None


def find_problem(args: list[str]) -> tuple[str | None, list[str]]:
    """`find [-H|-P] [-D x] [-Olevel] START... EXPRESSION` with only tests and printing actions; returns the
    problem, and the start points and reference files to check as paths (not the -name patterns)."""
    i = 0
    while i < len(args) and (args[i] in ("-H", "-P", "-D") or re.fullmatch(r"-O\d", args[i])):
        i += 2 if args[i] == "-D" else 1
    paths = []
    while i < len(args) and not (args[i].startswith("-") or args[i] in ("(", "!", ")", ",")):
        paths.append(args[i])
        i += 1
    while i < len(args):
        word = args[i]
        if word in _FIND_FLAGS:
            i += 1
        elif word in _FIND_VALUED or word in _FIND_FILES or re.fullmatch(r"-newer[aBcmt][aBcmt]", word):
            if i + 1 >= len(args):
                return f"find {word} needs a value", []
            if word not in _FIND_VALUED:
                paths.append(args[i + 1])
            i += 2
        else:
            return f"'find {word}' is not known to be read-only (-exec, -delete, -fprint and -L are not)", []
    return None, paths


_FIND_FLAGS = frozenset(
    {"-depth", "-ignore_readdir_race", "-noignore_readdir_race", "-mount", "-xdev", "-noleaf", "-daystart",
     "-warn", "-nowarn", "-empty", "-executable", "-false", "-true", "-nogroup", "-nouser", "-readable",
     "-writable", "-print", "-print0", "-ls", "-prune", "-quit", "-not", "-and", "-a", "-or", "-o", "!", "(",
     ")", ","}
)
_FIND_VALUED = frozenset(
    {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex", "-lname",
     "-ilname", "-regextype", "-printf", "-fstype", "-user", "-group", "-perm", "-size", "-type", "-xtype",
     "-uid", "-gid", "-links", "-inum", "-amin", "-atime", "-cmin", "-ctime", "-mmin", "-mtime", "-used",
     "-maxdepth", "-mindepth"}
)
_FIND_FILES = frozenset({"-newer", "-anewer", "-cnewer", "-samefile"})


def _cd_problem(texts: list[str], workspace: Path | None, cwds: list[str]) -> str | None:
    # `cd` alone goes home, `cd -` to $OLDPWD, and -P/-L/-e/-@ change how `..` resolves: only `cd DIR`.
    if len(texts) != 1 or not texts[0] or texts[0].startswith("-"):
        return "only `cd DIR` is followed (`cd` alone, `cd -` and cd options can leave the workspace)"
    for cwd in cwds:
        lexical = posixpath.normpath(posixpath.join(cwd, texts[0]))
        if lexical == ".." or lexical.startswith(("../", "/")) or workspace is None:
            return f"cd {texts[0]} leaves the workspace"
        if resolved(workspace, cwd, texts[0]) is None:
            return f"cd {texts[0]} leaves the workspace (through a symbolic link)"
    return None


def cd_targets(workspace: Path | None, cwds: list[str], target: str) -> list[str]:
    """The directories a checked `cd target` leads to from each of `cwds` where it succeeds, as the shell
    tracks them (lexically, as `cd -L` does)."""
    out = []
    for cwd in cwds:
        lexical = posixpath.normpath(posixpath.join(cwd, target))
        path = os.path.join(workspace or "", lexical)
        if workspace is not None and os.path.isdir(path) and os.access(path, os.X_OK):
            out.append(lexical)
    return out


def _version_pin(workspace: Path | None, cwds: list[str]) -> str | None:
    for cwd in cwds:
        for pin in VERSION_PINS:
            if workspace is None or os.path.lexists(os.path.join(workspace, cwd, pin)):
                return f"a version-manager file ({pin}) may choose which program runs"
    return None
