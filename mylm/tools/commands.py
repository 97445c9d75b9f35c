"""Classify a shell command for approval: read-only (runs unasked), unknown, dangerous, or refused outright.

The read-only list is argument-aware (after Codex's `is_safe_command`): `find -delete`, `sort -o`, `sed -i`
and `git -c` are not read-only even though `find`, `sort`, `sed` and `git` can be. A command is read-only only
when every simple command in it is, nothing is substituted or backgrounded, output goes nowhere but the
terminal, and no argument points outside the workspace or at a secret. Dangerous commands (after Codex's
`is_dangerous_command`, in danger.py) always ask, even when the user approved commands for the run.
"""

from __future__ import annotations

import glob as _glob
import os
import posixpath
import re
import shlex
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from .danger import all_commands, dangerous_reason
from .sensitive import is_secret_path
from .shell_syntax import RESERVED, Script, ShellSyntaxError, Word, parse

Level = Literal["safe", "unknown", "dangerous", "forbidden"]


@dataclass(frozen=True)
class CommandVerdict:
    """How risky a command is, and why, in words a user (and the model) can act on."""

    level: Level
    reason: str


# ------------------------------------------------------------------------------------------- characters

#: Separators, bidi controls, zero-width characters and lone surrogates: they can make a command look
#: different from what runs.
INVISIBLE = frozenset(
    [0x2028, 0x2029, 0x061C, 0xFEFF, *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x206A),
     *range(0xD800, 0xE000)]
)


def _hidden_character(command: str) -> str | None:
    for ch in command:
        code = ord(ch)
        if ch in "\n\t":
            continue
        if code < 0x20 or 0x7F <= code <= 0x9F or code in INVISIBLE:
            name = unicodedata.name(ch, "a control character")
            return f"U+{code:04X} ({name})"
    return None


# ------------------------------------------------------------------------------------- the read-only list

#: Read-only whatever their options; their path arguments are still checked.
_READ_ONLY = frozenset(
    {"ls", "cat", "head", "tail", "wc", "pwd", "echo", "printf", "true", "false", "stat", "du", "df", "nl",
     "cut", "tr", "grep", "egrep", "fgrep", "which", "whoami", "id", "uname", "basename", "dirname",
     "realpath", "readlink", "cmp", "diff", "comm", "md5sum", "sha1sum", "sha256sum", "sha512sum", "seq",
     "expr", "test", "[", "column", "jq", "type", "printenv", "od", "hexdump", "strings", "tac", "rev",
     "paste", "join", "fold", "fmt", "numfmt", "nproc", "locale", "cd", "sleep", "file", "tree", "date",
     "sort", "uniq", "find", "rg", "sed", "git", "env", "hostname", "command"}
)
#: Options that make an otherwise read-only program write, execute or change the system.
_UNSAFE_OPTIONS: dict[str, tuple[str, ...]] = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf"),
    "sort": ("-o", "--output", "--compress-program"),
    "rg": ("--pre", "--hostname-bin", "--search-zip", "-z"),
    "tree": ("-o", "--output"),
    "file": ("-C", "--compile"),
    "date": ("-s", "--set"),
}
#: Programs that read the contents of whole directory trees; secrets beneath them would be shown.
_RECURSIVE = {"grep": ("-r", "-R", "--recursive", "--dereference-recursive")}
_GIT_READ_ONLY = frozenset(
    {"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog", "ls-tree",
     "cat-file", "merge-base", "show-ref", "grep"}
)
_GIT_UNSAFE_OPTIONS = (
    "--output", "--ext-diff", "--textconv", "--exec", "--open-files-in-pager", "-O", "--no-index"
)
_VERSION_QUERY = frozenset(
    {"python", "python3", "node", "npm", "go", "cargo", "rustc", "gcc", "make", "pip", "pip3", "java", "ruby"}
)


# --------------------------------------------------------------------------------------- the classifier


@dataclass(frozen=True)
class _Context:
    workspace: Path | None
    config_dir: Path | None
    allow: tuple[tuple[str, ...], ...]
    deny: tuple[tuple[str, ...], ...]


def _rules(patterns: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    rules = []
    for pattern in patterns:
        try:
            words = tuple(shlex.split(pattern))
        except ValueError:
            words = tuple(pattern.split())
        if words:
            rules.append(words)
    return tuple(rules)


def classify(
    command: str,
    *,
    workspace: Path | None = None,
    config_dir: Path | None = None,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
) -> CommandVerdict:
    """Classify `command`; `allow` and `deny` are the user's argv-prefix rules (e.g. `"npm test"`)."""
    hidden = _hidden_character(command)
    if hidden:
        return CommandVerdict(
            "forbidden", f"the command contains the invisible or control character {hidden}, which can hide "
            "what it really does; write the command without it"
        )
    ctx = _Context(workspace, config_dir, _rules(allow), _rules(deny))
    try:
        script = parse(command)
    except ShellSyntaxError as error:
        return CommandVerdict("forbidden", f"the command does not parse ({error}); fix its quoting")
    if not script.commands:
        return CommandVerdict("forbidden", "the command is empty")
    try:
        every = list(all_commands(script, depth=0))
    except ShellSyntaxError as error:
        return CommandVerdict("forbidden", f"a nested command does not parse ({error})")
    for argv in every:
        for rule in ctx.deny:
            if tuple(w.text for w in argv[: len(rule)]) == rule:
                words = " ".join(rule)
                return CommandVerdict("forbidden", f"the user's policy refuses commands that start '{words}'")
    danger = dangerous_reason(command, script, every, config_dir=ctx.config_dir)
    if danger:
        return CommandVerdict("dangerous", danger)
    problem = _not_read_only(script, ctx)
    if problem:
        return CommandVerdict("unknown", problem)
    return CommandVerdict("safe", "a read-only command")


# --------------------------------------------------------------------------------------------- read-only


def _not_read_only(script: Script, ctx: _Context) -> str | None:
    """Why the script is not read-only, or None when every part of it is."""
    if script.substitutions:
        return "it runs nested commands ($(...), backticks or <(...)), which are not checked as read-only"
    if "&" in script.operators:
        return "it starts a background process ('&')"
    if {"(", ")"} & script.operators:
        return "it runs a subshell ('(...)')"
    if script.heredoc:
        return "it uses a here-document"
    cwd = "."
    for command in script.commands:
        if command.assignments:
            return "it sets variables for the program (VAR=value), which can change what runs"
        argv = command.argv
        if not argv:
            return "it only redirects"
        if argv[0].text in RESERVED and not argv[0].quoted:
            return f"it uses shell control flow ('{argv[0].text}')"
        for redirect in command.redirects:
            if not _harmless_redirect(redirect.op, redirect.target.text):
                return f"it redirects {'output to' if '>' in redirect.op else 'input from'} a file"
        if _user_allowed(argv, ctx):
            continue
        problem = _read_only_argv(argv, ctx, cwd)
        if problem:
            return problem
        if argv[0].text == "cd" and len(argv) > 1:
            cwd = posixpath.normpath(posixpath.join(cwd, argv[1].text))
    return None


def _harmless_redirect(op: str, target: str) -> bool:
    if op in (">&", "<&") and (target.isdigit() or target == "-"):
        return True  # 2>&1: joins streams, touches no file
    return op in (">", ">>", "&>", "2>") and target == "/dev/null"


def _user_allowed(argv: list[Word], ctx: _Context) -> bool:
    texts = tuple(w.text for w in argv)
    return any(texts[: len(rule)] == rule for rule in ctx.allow) and not any(w.expands for w in argv)


def _read_only_argv(argv: list[Word], ctx: _Context, cwd: str) -> str | None:
    first = argv[0]
    name = first.text
    args = argv[1:]
    texts = [w.text for w in args]
    if name in _VERSION_QUERY and texts in (["--version"], ["-V"], ["version"]):
        return None
    if name not in _READ_ONLY or "/" in name:
        return f"'{name}' is not on the read-only list"
    if name in ("env", "hostname", "command") and (texts and not (name == "command" and texts[0] == "-v")):
        return f"'{name}' with arguments can run or change something"
    for option in _UNSAFE_OPTIONS.get(name, ()):
        if any(_uses_option(t, option) for t in texts):
            return f"'{name} {option}' writes files, runs programs or changes the system"
    if name == "uniq" and len([t for t in texts if not t.startswith("-")]) > 1:
        return "'uniq IN OUT' writes its output to a file"
    if name == "sed" and not _sed_print_only(texts):
        return "sed is read-only here only as `sed -n 'N,Mp' FILE`"
    if name == "git":
        problem = _git_read_only(texts)
        if problem:
            return problem
    for word in args:
        problem = _argument_problem(word, name, ctx, cwd)
        if problem:
            return problem
    recursive = name == "rg" or (name == "git" and texts[:1] == ["grep"])
    if recursive or (name in _RECURSIVE and any(_has_flag(t, _RECURSIVE[name]) for t in texts)):
        # Positional arguments are the pattern and the roots; checking the pattern as a root costs nothing.
        roots = [t for t in texts if not t.startswith("-") and t != "grep"]
        if len(roots) <= 1:
            roots.append(".")  # only a pattern: the search starts in the current directory
        secret = _secret_beneath(ctx.workspace, cwd, roots if name != "git" else ["."])
        if secret:
            return f"it searches a tree that holds the secret file {secret}"
    return None


def _has_flag(text: str, flags: tuple[str, ...]) -> bool:
    if text in flags:
        return True
    short = [f[1] for f in flags if len(f) == 2]
    return text.startswith("-") and not text.startswith("--") and any(f in text[1:] for f in short)


def _sed_print_only(texts: list[str]) -> bool:
    if len(texts) < 2 or texts[0] != "-n":
        return False
    files = texts[2:]
    return re.fullmatch(r"\d+(,\d+)?p", texts[1]) is not None and not any(t.startswith("-") for t in files)


def _git_read_only(texts: list[str]) -> str | None:
    if not texts or texts[0].startswith("-"):
        return "git options before the subcommand (-c, -C, --git-dir, ...) can run programs"
    sub, rest = texts[0], texts[1:]
    if sub == "branch" and set(rest) <= {"-a", "-r", "-v", "-vv", "--list", "--show-current", "-l"}:
        return None
    if sub in ("remote", "tag") and all(t in ("-v", "-l", "--list") for t in rest):
        return None
    if sub not in _GIT_READ_ONLY:
        return f"'git {sub}' is not on the read-only list"
    for t in rest:
        if any(_uses_option(t, o) for o in _GIT_UNSAFE_OPTIONS):
            return f"'git {sub} {t}' can write files or run programs"
    return None


def _uses_option(text: str, option: str) -> bool:
    """Whether the word `text` gives `option`: exactly, as `--opt=value`, or (for a one-letter option) inside
    a cluster of short options such as `-uo` (when unsure, say yes: the price is one question)."""
    if text == option or text.startswith(option + "="):
        return True
    short = len(option) == 2 and option[0] == "-" and option[1] != "-"
    return short and text.startswith("-") and not text.startswith("--") and option[1] in text[1:]


def _argument_problem(word: Word, name: str, ctx: _Context, cwd: str) -> str | None:
    if word.expands:
        return "an argument uses $-expansion, so its value is only known at run time"
    if word.tilde:
        return "an argument refers to a home directory (~), outside the workspace"
    text = word.text
    values = [text] + ([text.split("=", 1)[1]] if text.startswith("-") and "=" in text else [])
    for value in values:
        if value.startswith("/") and value != "/dev/null":
            return f"it reads outside the workspace ({value})"
        normal = posixpath.normpath(posixpath.join(cwd, value)) if value else "."
        if normal == ".." or normal.startswith("../"):
            return f"it reads outside the workspace ({value})"
        if value and is_secret_path(normal):
            return f"it reads the secret file {value}"
    if word.glob:
        return _glob_problem(text, ctx, cwd)
    return None


def _glob_problem(pattern: str, ctx: _Context, cwd: str) -> str | None:
    """A glob is read-only when what it expands to right now is neither an option nor a secret."""
    if ctx.workspace is None:
        return "a glob is expanded by the shell, and without a workspace its matches cannot be checked"
    root = ctx.workspace / cwd
    matches = _glob.glob(pattern, root_dir=root)
    if len(matches) > 2000:
        return "a glob matches too many files to check"
    for match in matches:
        if match.startswith("-"):
            return f"the glob {pattern!r} matches a file named like an option ({match})"
        if is_secret_path(posixpath.normpath(posixpath.join(cwd, match))):
            return f"the glob {pattern!r} matches the secret file {match}"
    return None


def _secret_beneath(workspace: Path | None, cwd: str, roots: list[str]) -> str | None:
    """The first secret file below `roots` (as the search would visit them), or a reason it cannot be told."""
    if workspace is None:
        return "(unknown: no workspace)"
    budget = 20000
    for root in roots:
        base = workspace / posixpath.normpath(posixpath.join(cwd, root))
        if not base.is_dir():
            continue  # a file argument was checked on its own; a pattern names no directory
        for directory, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if d != ".git"]
            budget -= len(dirs) + len(files)
            if budget < 0:
                return "(too many files to check)"
            rel_dir = os.path.relpath(directory, workspace)
            for name in files + dirs:
                rel = posixpath.normpath(posixpath.join(rel_dir.replace(os.sep, "/"), name))
                if is_secret_path(rel):
                    return rel
    return None
