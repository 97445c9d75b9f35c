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

import functools
import os
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .bash import MAX_COMMAND, NotPlain, PlainLine, agrees, parse_plain
from .danger import dangerous_reason
from .expand import Unexpandable, expand
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
    # The readings of the text alone (the lexer's, the programs it runs, the bash parser's) are kept per command
    # text (`_lexed`, `_programs`, `_read_plain`); what depends on the user's rules, mylm's config and the file
    # system is judged afresh below, every time.
    script = _lexed(command, parse)
    if isinstance(script, str):
        return CommandVerdict("forbidden", f"the command does not parse ({script}); fix its quoting")
    if not script.commands:
        return CommandVerdict("forbidden", "the command is empty")
    every = _programs(command, parse)
    if isinstance(every, str):
        return CommandVerdict("forbidden", f"a nested command does not parse ({every})")
    for argv in every:
        for rule in ctx.deny:
            if tuple(w.text for w in argv[: len(rule)]) == rule:
                words = " ".join(rule)
                return CommandVerdict("forbidden", f"the user's policy refuses commands that start '{words}'")
    danger = dangerous_reason(command, script, every, config_dir=ctx.config_dir)
    if danger:
        return CommandVerdict("dangerous", danger)
    line = _read_plain(command, parse, parse_plain)
    problem = line if isinstance(line, str) else _not_read_only(script, line, ctx)
    if problem:
        return CommandVerdict("unknown", problem)
    if any(c.argv and c.argv[0].text != "cd" and _user_allowed(c.argv, ctx) for c in script.commands):
        return CommandVerdict("safe", "the user's allow_commands approve it", by_rule=True)
    if any(c.argv and c.argv[0].text == "git" for c in script.commands):
        return CommandVerdict("safe", f"a read-only command; {GIT_NEUTRALISED}")
    return CommandVerdict("safe", "a read-only command")


#: How many command texts' readings are kept (`_lexed`, `_programs`, `_read_plain`): a model repeats commands
#: (`ls`, `git status`, its test run), and reading one anew cost ~0.03-0.06 ms, the bash parser most of it.
_KEPT_READINGS = 128


# Each is a function of the command's text and the parser functions given (passed, so that a parser replaced,
# as a test does, is never answered from another's reading): the same text read by the same parser reads the
# same. Only text-only readings are kept; none of them looks at the rules, the config or the file system. The
# readings are shared between calls, so nothing may change them (nothing does: they are only read).
@functools.lru_cache(maxsize=_KEPT_READINGS)
def _lexed(command: str, lexer: Callable[[str], Script]) -> Script | str:
    """The policy's lexer's reading of `command`, or why it does not parse."""
    try:
        return lexer(command)
    except ShellSyntaxError as error:
        return str(error)


@functools.lru_cache(maxsize=_KEPT_READINGS)
def _programs(command: str, lexer: Callable[[str], Script]) -> list[list[Word]] | str:
    """Every program `command` runs (`all_commands` of its reading, which parses), or why a nested one does
    not parse. Only for a command `_lexed` read."""
    script = _lexed(command, lexer)
    assert not isinstance(script, str)
    try:
        return list(all_commands(script, depth=0))
    except ShellSyntaxError as error:
        return str(error)


@functools.lru_cache(maxsize=_KEPT_READINGS)
def _read_plain(command: str, lexer: Callable[[str], Script], plain: Callable[[str], PlainLine]
                ) -> PlainLine | str:
    """`_plain` of `command` as `lexer` and `plain` read it. Only for a command `_lexed` read."""
    script = _lexed(command, lexer)
    assert not isinstance(script, str)
    return _plain(command, script, plain)


def _plain(command: str, script: Script, plain: Callable[[str], PlainLine]) -> PlainLine | str:
    """The line as the bash parser reads it, cross-checked with the lexer, or why it is not plain syntax."""
    try:
        line = plain(command)
    except NotPlain as error:
        return str(error)
    disagreement = agrees(line, script)
    return f"bash and the policy read it differently ({disagreement})" if disagreement else line


# --------------------------------------------------------------------------------------------- read-only

#: How many working directories a line's `cd`s may leave it in before the policy stops tracking them.
_MAX_CWDS = 16


def _not_read_only(script: Script, line: PlainLine, ctx: _Context) -> str | None:
    """Why the script is not read-only, or None when every part of it is."""
    if script.substitutions:
        return "it runs nested commands ($(...), backticks or <(...)), which are not checked as read-only"
    if "&" in script.operators:
        return "it starts a background process ('&')"
    if {"(", ")"} & script.operators:
        return "it runs a subshell ('(...)')"
    if script.heredoc:
        return "it uses a here-document"
    # Every directory the shell may be in: a `cd` skipped by `&&`/`||`, or run in a pipeline's subshell,
    # leaves it where it was.
    cwds = ["."]
    expansions = _Expansions(script, line, ctx)
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
        if argv[0].glob:
            return f"the program's name ({argv[0].text}) is a glob: which program runs depends on file names"
        targets: list[str] = []
        for where, words in _argvs(index, argv, cwds, expansions):
            if isinstance(words, str):
                return words
            problem = program_problem(words, ctx.workspace, where, deadline=ctx.deadline)
            if problem:
                return problem if words is argv else f"{problem} (bash expands it to: {_shown(words)})"
            for cwd in where:
                problem = _program_in_reach(argv[0].text, ctx.workspace, cwd)
                if problem:
                    return problem
            if argv[0].text == "cd":
                targets += [t for t in cd_targets(ctx.workspace, where, words[1].text) if t not in targets]
        if argv[0].text == "cd":
            later = script.commands[index + 1].after if index + 1 < len(script.commands) else ""
            # Neither skipped by && / || nor run in a pipeline's subshell:
            alone = command.after in ("", ";", "\n") and later not in ("|", "|&")
            certain = alone and len(targets) == len(cwds)
            cwds = targets if certain else cwds + [c for c in targets if c not in cwds]
            if len(cwds) > _MAX_CWDS:
                return "it changes directory too many times to follow"
    return None


def _argvs(
    index: int, argv: list[Word], cwds: list[str], expansions: _Expansions
) -> Iterator[tuple[list[str], list[Word] | str]]:
    """The words command `index` runs with, and the directories it runs them from: as written from all of
    `cwds` when nothing in it expands, else from each directory as bash expands them there (or why they
    cannot be known)."""
    if not any(w.glob for w in argv):
        yield cwds, argv
        return
    for cwd in cwds:
        yield [cwd], expansions.argv(index, cwd)


class _Expansions:
    """What bash makes of each command's globs, asked once per directory the line may be in (expand.py)."""

    def __init__(self, script: Script, line: PlainLine, ctx: _Context) -> None:
        self._ctx = ctx
        # The lexer and the bash parser agree on every word (checked before); bash is given the parser's
        # source text of each word, quotes and all, so it reads exactly what the shell tool will run.
        self._sources = {
            i: [w.source for w in plain.argv]
            for i, (plain, lexed) in enumerate(zip(line.commands, script.commands, strict=True))
            if any(w.glob for w in lexed.argv)
        }
        self._done: dict[str, dict[int, list[str]] | str] = {}

    def argv(self, index: int, cwd: str) -> list[Word] | str:
        workspace = self._ctx.workspace
        if workspace is None:
            return "a glob is expanded by the shell, and without a workspace its matches cannot be checked"
        if cwd not in self._done:
            order = sorted(self._sources)
            try:
                words = expand([self._sources[i] for i in order], os.path.join(workspace, cwd),
                               deadline=self._ctx.deadline)
                self._done[cwd] = dict(zip(order, words, strict=True))
            except Unexpandable as error:
                self._done[cwd] = str(error)
            except OSError as error:  # the directory went away, or is not one
                self._done[cwd] = f"the glob cannot be expanded in {cwd} ({error.strerror})"
        done = self._done[cwd]
        if isinstance(done, str):
            return done
        return [Word(text, quoted=True) for text in done[index]]


def _shown(words: list[Word], limit: int = 160) -> str:
    text = shlex.join(w.text for w in words)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Builtins of bash among the read-only programs: bash runs them without searching PATH.
_BUILTINS = frozenset({"cd", "echo", "printf", "test", "[", "true", "false", "command", "pwd", "type"})


def _program_in_reach(name: str, workspace: Path | None, cwd: str) -> str | None:
    """Why running `name` from the workspace-relative `cwd` would run a program inside the workspace, or None.

    A program the model can rewrite is no longer the one the allowlist describes: a `.venv/bin/ls` planted
    by an earlier approved command would read `.env` under an auto-approved `ls`. So each program is looked up
    as bash will (the first executable file of that name along PATH; an empty or relative entry is the
    command's directory) and asks only when it is found inside the workspace. A virtual environment on PATH
    holds `python` and `pip`, not `find` or `wc`, so `find . -name '*.py' | wc -l` still runs unasked. The
    answer cannot go stale before the command runs: nothing auto-approved can write (its grant is read-only,
    enforced by the kernel), so the program found is the program that runs; a command the user approves
    runs with whatever PATH finds, which the question then covers."""
    if workspace is None or name in _BUILTINS or "/" in name:
        return None
    root = os.path.realpath(workspace)
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        base = entry if entry.startswith("/") else os.path.join(workspace, cwd, entry or ".")
        found = os.path.join(base, name)
        if not (os.path.isfile(found) and os.access(found, os.X_OK)):
            continue
        for path in (os.path.abspath(found), os.path.realpath(found)):
            if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
                shown, held = os.path.relpath(path, root), entry or "."
                return (f"'{name}' would run {shown}, a program inside the workspace (PATH holds {held!r}), "
                        "which could have been rewritten since it was installed")
        return None
    return None


def _harmless_redirect(op: str, target: str) -> bool:
    if op in (">&", "<&") and (target.isdigit() or target == "-"):
        return True  # 2>&1: joins streams, touches no file
    return op in (">", ">>", "&>", "2>") and target == "/dev/null"


def _user_allowed(argv: list[Word], ctx: _Context) -> bool:
    texts = tuple(w.text for w in argv)
    return any(texts[: len(rule)] == rule for rule in ctx.allow) and not any(w.expands for w in argv)
