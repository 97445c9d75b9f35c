"""Classify a shell command for approval: read-only (runs unasked), unknown, dangerous, or refused outright.

Only plain syntax can be read-only: a real bash parser must show the line to be words, quotes, pipes, `&&`,
`||`, `;` and harmless redirections (bash.py). The read-only list is argument-aware (after Codex's
`is_safe_command`): each program has a list of the options known to be safe (readonly.py, gitread.py), so
`find -delete`, `sort -o`, `sort --o` and `git -c` are not read-only even though `find`, `sort` and `git` can
be. A command is read-only only when every simple command in it is (programs.py), nothing is substituted or
backgrounded, output goes nowhere but the terminal, and no path points outside the workspace or at a secret
once symlinks are followed (reach.py), from any directory its `cd`s may leave the shell in. Dangerous
commands (after Codex's `is_dangerous_command`, in danger.py) always ask, even when the user approved commands
for the run.
"""

from __future__ import annotations

import os
import re
import shlex
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from .bash import MAX_COMMAND, NotPlain, agrees, parse_plain
from .danger import dangerous_reason
from .programs import cd_targets, program_problem
from .shell_syntax import RESERVED, Script, ShellSyntaxError, Word, parse
from .unwrap import all_commands

Level = Literal["safe", "unknown", "dangerous", "forbidden"]
#: What the shell tool changes when it runs an auto-approved git (gitrepo.NEUTRAL_SETTINGS), told to the user.
GIT_NEUTRALISED = (
    "git runs with hooks, fsmonitor, pager, editors, ssh, credential helpers, gpg and transports turned off"
)


@dataclass(frozen=True)
class CommandVerdict:
    """How risky a command is, and why, in words a user (and the model) can act on."""

    level: Level
    reason: str
    #: "safe" only because the user's allow_commands name a program in it: the user approved it in advance,
    #: so it may write (a test run writes caches), unlike a command the policy itself read as a read.
    by_rule: bool = False


# ------------------------------------------------------------------------------------------- characters

#: Separators, bidi controls, zero-width characters and lone surrogates: they can make a command look
#: different from what runs.
INVISIBLE = frozenset(
    [0x2028, 0x2029, 0x061C, 0xFEFF, *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x206A),
     *range(0xD800, 0xE000)]
)


#: One character class, so the scan is a single linear pass in C however long the command is.
HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f" + "".join(re.escape(chr(c)) for c in sorted(INVISIBLE)) + "]"
)


def _hidden_character(command: str) -> str | None:
    found = HIDDEN.search(command)
    if found is None:
        return None
    ch = found.group()
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, 'a control character')})"


# --------------------------------------------------------------------------------------- the classifier


@dataclass(frozen=True)
class _Context:
    workspace: Path | None
    config_dir: Path | None
    allow: tuple[tuple[str, ...], ...]
    deny: tuple[tuple[str, ...], ...]
    deadline: float | None = None


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
    deadline: float | None = None,
) -> CommandVerdict:
    """Classify `command`; `allow` and `deny` are the user's argv-prefix rules (e.g. `"npm test"`). Checks
    that ask another program (git) stop at `deadline` (a `time.monotonic()` value), and the command asks."""
    hidden = _hidden_character(command)
    if hidden:
        return CommandVerdict(
            "forbidden", f"the command contains the invisible or control character {hidden}, which can hide "
            "what it really does; write the command without it"
        )
    ctx = _Context(workspace, config_dir, _rules(allow), _rules(deny), deadline)
    if len(command) > MAX_COMMAND:
        # Checked before any parsing, so the cost stays linear however the text is built.
        size = f"it is {len(command):,} characters long, over the {MAX_COMMAND:,} the policy reads"
        if ctx.deny:
            return CommandVerdict("forbidden", f"{size}, too long to check against the user's deny rules")
        return CommandVerdict("dangerous", size)
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
    problem = _not_plain(command, script) or _not_read_only(script, ctx)
    if problem:
        return CommandVerdict("unknown", problem)
    if any(c.argv and c.argv[0].text != "cd" and _user_allowed(c.argv, ctx) for c in script.commands):
        return CommandVerdict("safe", "the user's allow_commands approve it", by_rule=True)
    if any(c.argv and c.argv[0].text == "git" for c in script.commands):
        return CommandVerdict("safe", f"a read-only command; {GIT_NEUTRALISED}")
    return CommandVerdict("safe", "a read-only command")


def _not_plain(command: str, script: Script) -> str | None:
    """Why the line is not plain syntax, as the bash parser reads it, cross-checked with the lexer."""
    try:
        line = parse_plain(command)
    except NotPlain as error:
        return str(error)
    disagreement = agrees(line, script)
    return f"bash and the policy read it differently ({disagreement})" if disagreement else None


# --------------------------------------------------------------------------------------------- read-only

#: How many working directories a line's `cd`s may leave it in before the policy stops tracking them.
_MAX_CWDS = 16


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
    path = _path_entry_in_reach(ctx.workspace)
    if path is not None:
        return f"PATH holds {path!r}, so a program from the workspace could run instead"
    # Every directory the shell may be in: a `cd` skipped by `&&`/`||`, or run in a pipeline's subshell,
    # leaves it where it was.
    cwds = ["."]
    for index, command in enumerate(script.commands):
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
        if argv[0].text != "cd" and _user_allowed(argv, ctx):  # a cd must be followed, whatever the rules
            continue
        problem = program_problem(argv, ctx.workspace, cwds, deadline=ctx.deadline)
        if problem:
            return problem
        if argv[0].text == "cd":
            targets = cd_targets(ctx.workspace, cwds, argv[1].text)
            later = script.commands[index + 1].after if index + 1 < len(script.commands) else ""
            # Neither skipped by && / || nor run in a pipeline's subshell:
            alone = command.after in ("", ";", "\n") and later not in ("|", "|&")
            certain = alone and len(targets) == len(cwds)
            cwds = targets if certain else cwds + [c for c in targets if c not in cwds]
            if len(cwds) > _MAX_CWDS:
                return "it changes directory too many times to follow"
    return None


def _path_entry_in_reach(workspace: Path | None) -> str | None:
    """A PATH entry that is relative (the empty one is the current directory) or inside the workspace."""
    entries = os.environ.get("PATH", "")
    place = None if workspace is None else os.path.abspath(workspace)
    key = (entries, place)
    stamps = tuple(_identity(path) for path in [*entries.split(os.pathsep), *([place] if place else [])])
    known = _in_reach.get(key)
    if known is not None and known[0] == stamps:
        return known[1]
    found = _entry_in_reach(entries, workspace)
    if len(_in_reach) >= 16:
        _in_reach.clear()
    _in_reach[key] = (stamps, found)
    return found


#: (PATH, workspace) → (the identity of each directory, the answer). Resolving every entry costs ~45
#: lstat()s a command; one stat() each tells whether the answer can have changed: a directory has one place
#: (no hard links), so the same identity means the same real path, unless the directory itself was moved,
#: which a confined command cannot do outside its workspace. A symlink retargeted, a directory made, replaced or
#: removed all change an identity. An entry that is not there has no identity: its real path is the stamp.
_in_reach: dict[tuple[str, str | None], tuple[tuple[object, ...], str | None]] = {}


def _identity(path: str) -> object:
    if not path.startswith("/"):
        return None
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return os.path.realpath(path)
    return info.st_dev, info.st_ino


def _entry_in_reach(entries: str, workspace: Path | None) -> str | None:
    root = os.path.realpath(workspace) if workspace is not None else None
    for entry in entries.split(os.pathsep):
        if not entry.startswith("/"):
            return entry
        real = os.path.realpath(entry)
        if root is not None and (real == root or real.startswith(root.rstrip("/") + "/")):
            return entry
    return None


def _harmless_redirect(op: str, target: str) -> bool:
    if op in (">&", "<&") and (target.isdigit() or target == "-"):
        return True  # 2>&1: joins streams, touches no file
    return op in (">", ">>", "&>", "2>") and target == "/dev/null"


def _user_allowed(argv: list[Word], ctx: _Context) -> bool:
    texts = tuple(w.text for w in argv)
    return any(texts[: len(rule)] == rule for rule in ctx.allow) and not any(w.expands for w in argv)
