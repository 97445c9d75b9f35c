"""Every program a command line runs, looking through wrappers (`env`, `timeout`, `setsid`, `busybox`, ...),
`sh -c`, `eval`, `find -exec`, `git -c` values and command substitutions, for the danger check and deny rules.

Wrappers take options of their own, some with values, and differ by version; rather than parse each one,
every later word that could start a command is tried as one (`nice -n 5 rm -rf d` yields `nice ...`,
`5 rm -rf d` and `rm -rf d`). That over-approximates, which for a danger check only costs a question.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from .shell_syntax import RESERVED, Script, ShellSyntaxError, Word, parse

#: Programs that run a command given in their arguments.
WRAPPERS = frozenset(
    {"env", "nice", "nohup", "time", "timeout", "command", "builtin", "exec", "stdbuf", "ionice", "xargs",
     "watch", "sudo", "doas", "su", "runuser", "sg", "pkexec", "setsid", "unshare", "chroot", "flock",
     "script",
     "busybox", "toybox", "taskset", "chrt", "prlimit", "nsenter", "strace", "ltrace", "valgrind", "torsocks",
     "proxychains", "proxychains4", "faketime", "fakeroot", "unbuffer", "systemd-run", "firejail", "bwrap",
     "cgexec", "numactl", "dbus-run-session", "xvfb-run", "catchsegv", "parallel", "sem", "chronic", "ifne",
     "caffeinate", "entr", "nocache", "eatmydata", "trickle", "rlwrap", "tmux", "screen", "xterm", "expect"}
)
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh"})
#: Shell options that take the next word as their value.
_SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MAX_DEPTH = 5


def all_commands(script: Script, depth: int) -> Iterator[list[Word]]:
    """Every program invocation in the script, looking through wrappers and nested command lines."""
    if depth > _MAX_DEPTH:
        raise ShellSyntaxError("commands nested too deeply")
    for command in script.commands:
        yield from unwrap(strip_reserved(command.argv), depth)
    for inner in script.substitutions:
        yield from all_commands(parse(inner), depth + 1)


def strip_reserved(argv: list[Word]) -> list[Word]:
    """The argv without leading shell keywords (`if`, `!`, `{`, `time`...)."""
    index = 0
    while index < len(argv) and not argv[index].quoted and argv[index].text in RESERVED:
        index += 1
    return argv[index:]


def unwrap(argv: list[Word], depth: int) -> Iterator[list[Word]]:
    """`argv` itself and everything it runs."""
    if not argv:
        return
    if posixpath.basename(argv[0].text) not in WRAPPERS:
        yield from _inner(argv, depth)
        return
    # Every later word that could name a program starts a candidate; wrappers among them add nothing new.
    for start in range(len(argv)):
        text = argv[start].text
        if start == 0 or not (text.startswith("-") or _ASSIGNMENT.match(text)):
            yield from _inner(argv[start:], depth)
        if start and " " in text.strip():
            # `script -c 'rm -rf d'`, `watch 'rm -rf d'`, `env -S'rm -rf d'`, `flock --command='rm ...'`
            for candidate in (text, text[2:], text.partition("=")[2]):
                yield from _lenient(candidate, depth)


def _inner(argv: list[Word], depth: int) -> Iterator[list[Word]]:
    yield argv
    name = posixpath.basename(argv[0].text)
    rest = argv[1:]
    if name in SHELLS:
        command = shell_command(rest)
        if command is not None:
            yield from all_commands(parse(command), depth + 1)
    elif name == "eval":
        yield from all_commands(parse(" ".join(w.text for w in rest)), depth + 1)
    elif name == "find":
        for i, word in enumerate(rest):
            if word.text in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((j for j in range(i + 1, len(rest)) if rest[j].text in (";", "+")), len(rest))
                yield from unwrap(rest[i + 1 : end], depth)
    elif name == "git":
        for value in _git_config_values([w.text for w in rest]):
            yield from _lenient(value.removeprefix("!"), depth)
    elif name == "trap" and rest:
        yield from _lenient(rest[0].text, depth)  # `trap 'rm -rf d' EXIT` runs it later
    elif name == "alias":
        for word in rest:  # `alias x='rm -rf'` runs later, once aliases are expanded
            yield from _lenient(word.text.partition("=")[2], depth)


def shell_command(args: list[Word]) -> str | None:
    """The command string `sh -c` / `bash -lc` / `bash -o x -ec` runs, or None when not run with -c."""
    with_c, i = False, 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            i += 1
            break
        if not text.startswith(("-", "+")) or text in ("-", "+"):
            break
        if not text.startswith("--") and "c" in text[1:]:
            with_c = True
        i += 2 if text in _SHELL_VALUED else 1
    return args[i].text if with_c and i < len(args) else None


def _lenient(text: str, depth: int) -> Iterator[list[Word]]:
    """The commands in a string that may or may not be a command line (a wrapper's argument)."""
    try:
        commands = list(all_commands(parse(text), depth + 1))
    except ShellSyntaxError:
        return
    yield from commands


def _git_config_values(args: list[str]) -> Iterator[str]:
    """The values of `git -c key=value` (and `--config-env`): aliases, pagers and hooks run them."""
    for i, text in enumerate(args):
        if not text.startswith("-"):
            return
        if text == "-c" and i + 1 < len(args):
            yield args[i + 1].partition("=")[2]
        elif text.startswith("-c") and len(text) > 2:
            yield text[2:].partition("=")[2]


def git_subcommand(args: list[str]) -> tuple[str, list[str]]:
    """git's subcommand and its arguments, skipping the global options and their values (`-C .`, `-c k=v`)."""
    valued = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env",
              "--list-cmds", "--attr-source"}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in valued else 1
    return (args[i], args[i + 1 :]) if i < len(args) else ("", [])
