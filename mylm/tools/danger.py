"""Dangerous shell commands: those that always ask, even when the user approved commands for the run.

After Codex's `is_dangerous_command`: deleting, privilege, the network, package installs, history rewrites,
writes to mylm's guard rails. The check looks through wrappers (`env`, `timeout`, `xargs`, `sudo`), `sh -c`,
`eval`, `find -exec` and command substitutions. It is a second line: obfuscation can hide a dangerous command
from it, which is why everything that is not provably read-only asks in the first place.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import re
from pathlib import Path
from typing import Iterator

from .shell_syntax import RESERVED, Script, ShellSyntaxError, Word, parse

_NETWORK = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "rsync", "ftp", "telnet", "nmap"}
)
_PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec"})
_DESTRUCTIVE = frozenset(
    {"dd", "mkfs", "fdisk", "parted", "wipefs", "shred", "shutdown", "reboot", "halt", "poweroff",
     "killall", "pkill", "crontab"}
)
_INSTALLERS = {
    "pip": {"install"}, "pip3": {"install"}, "npm": {"install", "i", "add", "ci"}, "yarn": {"add", "install"},
    "pnpm": {"add", "install", "i"}, "gem": {"install"}, "cargo": {"install"}, "go": {"install", "get"},
    "apt": {"install"}, "apt-get": {"install"}, "brew": {"install"}, "uv": {"add"}, "poetry": {"add"},
}
_INTERPRETERS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "fish", "python", "python3", "perl", "ruby", "node", "php"}
)
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
#: Programs that run the command given in their arguments; the policy looks through them.
_WRAPPERS = {
    "env": ("-u", "--unset", "-C", "--chdir", "-S"), "nice": ("-n",), "nohup": (), "time": (),
    "timeout": ("-s", "--signal", "-k", "--kill-after"), "command": (), "builtin": (), "exec": ("-a",),
    "stdbuf": ("-i", "-o", "-e"), "ionice": ("-c", "-n"),
    "xargs": ("-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a"),
    "watch": ("-n",), "sudo": ("-u", "-g"), "doas": ("-u",),
}
_WRITERS = frozenset(
    {"cp", "mv", "tee", "ln", "install", "sed", "truncate", "chmod", "chown", "touch", "rm", "dd"}
)
_RC_FILES = frozenset(
    {".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zprofile", ".zshenv",
     ".zlogin", ".cshrc", ".tcshrc", ".kshrc", "config.fish", ".inputrc"}
)
_FORK_BOMB = re.compile(r"(\w+|:)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*\1\s*&")


def is_protected_path(text: str, *, config_dir: Path | None = None) -> bool:
    """Whether a path (as written in a command or passed to a file tool) is one of mylm's guard rails:
    `.git/`, a shell startup file, or mylm's own config directory."""
    normal = posixpath.normpath(text.replace("\\", "/")) if text else ""
    parts = normal.split("/")
    if ".git" in parts or ".mylm" in parts or parts[-1] in _RC_FILES or parts[-1] == ".mylm.toml":
        return True
    if any(pair == (".config", "mylm") for pair in itertools.pairwise(parts)):
        return True  # ~/.config/mylm as written, wherever the real config dir is
    if config_dir is not None:
        expanded = os.path.expanduser(normal) if normal.startswith("~") else normal
        home_config = os.path.join(os.path.expanduser("~"), ".config", "mylm")
        for base in {str(config_dir), home_config}:
            if expanded == base or expanded.startswith(base.rstrip("/") + "/"):
                return True
    return False


# ------------------------------------------------------------------------------- looking through wrappers


def all_commands(script: Script, depth: int) -> Iterator[list[Word]]:
    """Every program invocation in the script, looking through wrappers, `sh -c`, `eval`, `xargs`,
    `find -exec` and command substitutions (to a depth of 5)."""
    if depth > 5:
        raise ShellSyntaxError("commands nested too deeply")
    for command in script.commands:
        yield from _unwrap(strip_reserved(command.argv), depth)
    for inner in script.substitutions:
        yield from all_commands(parse(inner), depth + 1)


def strip_reserved(argv: list[Word]) -> list[Word]:
    index = 0
    while index < len(argv) and not argv[index].quoted and argv[index].text in RESERVED:
        index += 1
    return argv[index:]


def _unwrap(argv: list[Word], depth: int) -> Iterator[list[Word]]:
    if not argv:
        return
    yield argv
    name = posixpath.basename(argv[0].text)
    rest = argv[1:]
    if name in _WRAPPERS:
        takes_value = _WRAPPERS[name]
        index = 0
        while index < len(rest):
            text = rest[index].text
            if name == "env" and "=" in text and not text.startswith("-"):
                index += 1
            elif text.startswith("-") and text != "-":
                index += 2 if text in takes_value else 1
            else:
                break
        if name == "timeout":
            index += 1  # the duration
        yield from _unwrap(rest[index:], depth)
    elif name in _SHELLS:
        for i, word in enumerate(rest):
            if word.text == "-c" and i + 1 < len(rest):
                yield from all_commands(parse(rest[i + 1].text), depth + 1)
                break
    elif name == "eval":
        yield from all_commands(parse(" ".join(w.text for w in rest)), depth + 1)
    elif name == "find":
        for i, word in enumerate(rest):
            if word.text in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((j for j in range(i + 1, len(rest)) if rest[j].text in (";", "+")), len(rest))
                yield from _unwrap(rest[i + 1 : end], depth)


# ------------------------------------------------------------------------------------------- the verdict


def dangerous_reason(
    text: str, script: Script, every: list[list[Word]], *, config_dir: Path | None
) -> str | None:
    """Why the command line `text` (parsed as `script`, its programs `every`) is dangerous, or None."""
    if _FORK_BOMB.search(text):
        return "it looks like a fork bomb"
    for argv in every:
        reason = _dangerous_argv(argv, config_dir)
        if reason:
            return reason
    for command in script.commands:
        argv = strip_reserved(command.argv)
        piped = command.after in ("|", "|&") and argv and posixpath.basename(argv[0].text) in _INTERPRETERS
        if piped and all(w.text.startswith("-") for w in argv[1:]):  # no script file: the program is stdin
            return f"it pipes text into {argv[0].text}, which runs it as a program"
        for redirect in command.redirects:
            target = redirect.target.text
            if target.startswith(("/dev/tcp/", "/dev/udp/")):
                return "it opens a network connection (/dev/tcp)"
            if re.match(r"/dev/(sd|nvme|hd|vd|xvd|mmcblk|disk)", target) and ">" in redirect.op:
                return f"it writes to the raw disk {target}"
            if ">" in redirect.op and is_protected_path(target, config_dir=config_dir):
                return f"it writes to the protected path {target}"
    return None


def _dangerous_argv(argv: list[Word], config_dir: Path | None) -> str | None:
    first = argv[0]
    if first.expands:
        return "the program it runs is only known at run time (a $-expansion or substitution names it)"
    name = posixpath.basename(first.text)
    args = [w.text for w in argv[1:]]
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    if any("/dev/tcp/" in a or "/dev/udp/" in a for a in args):
        return "it opens a network connection (/dev/tcp)"
    if name in _PRIVILEGE:
        return f"{name} runs a command with root privileges"
    if name == "rm" and (set(flags) & set("rRf") or {"--recursive", "--force"} & set(args)):
        return "rm -r/-f deletes files for good"
    if name in _DESTRUCTIVE or name.startswith("mkfs"):
        return f"{name} can destroy data or stop the system"
    if name in ("chmod", "chown", "chgrp") and ("R" in flags or "--recursive" in args):
        return f"{name} -R changes permissions of a whole tree"
    if name == "kill" and any(a in ("-1", "0") for a in args if not a.startswith("-") or a == "-1"):
        return "kill -1 signals every process of the user"
    if name in _NETWORK:
        return f"{name} uses the network, which can send workspace data out"
    if name in _INSTALLERS and set(args) & _INSTALLERS[name]:
        return f"{name} install runs the packages' install scripts"
    if name in ("python", "python3") and args[:3] == ["-m", "pip", "install"]:
        return "pip install runs the packages' install scripts"
    if name == "git":
        reason = _dangerous_git(args)
        if reason:
            return reason
    if name == "find" and "-delete" in args:
        return "find -delete deletes files"
    if name in _WRITERS and any(is_protected_path(a, config_dir=config_dir) for a in args):
        return "it changes a protected path (.git/, a shell startup file or mylm's config)"
    return None


def _dangerous_git(args: list[str]) -> str | None:
    sub = next((a for a in args if not a.startswith("-")), "")
    rest = args[args.index(sub) + 1 :] if sub else []
    if sub in ("push", "fetch", "pull", "clone", "remote", "submodule", "ls-remote", "archive", "send-email"):
        return f"git {sub} uses the network (and can publish or overwrite work)"
    if sub == "reset" and "--hard" in rest:
        return "git reset --hard discards uncommitted work"
    if sub == "clean" and any(a.startswith("-") and not a.startswith("--") and "f" in a for a in rest):
        return "git clean -f deletes untracked files"
    if sub in ("checkout", "restore") and ("--" in rest or "." in rest):
        return f"git {sub} of paths discards uncommitted changes"
    if sub == "branch" and any(a in ("-D", "--delete", "-d") for a in rest):
        return "git branch -D deletes a branch"
    if sub == "stash" and rest[:1] in (["drop"], ["clear"]):
        return "git stash drop/clear deletes stashed work"
    if sub in ("filter-branch", "filter-repo", "update-ref", "reflog") or (sub, "--prune=now") in (
        ("gc", a) for a in rest
    ):
        return f"git {sub} rewrites or deletes history"
    return None
