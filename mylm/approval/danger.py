"""Dangerous shell commands: those that always ask, even when the user approved commands for the run.

After Codex's `is_dangerous_command`: deleting, privilege, the network, package installs, history rewrites,
writes to mylm's guard rails. The check looks through wrappers (`env`, `timeout`, `setsid`, `busybox`, ...),
`sh -c`, `eval`, `find -exec`, `git -c` and command substitutions (unwrap.py), and reads abbreviated long
options (`rm --r --f`, `git reset --ha`) as what they abbreviate. It is a second line: obfuscation can hide a
dangerous command from it, which is why everything that is not provably read-only asks in the first place.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import re
from pathlib import Path

from .readonly import PROGRAMS
from .shell_syntax import Script, Word
from .unwrap import git_subcommand, strip_reserved, unwrap

_NETWORK = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "rsync", "ftp", "tftp", "telnet",
     "nmap", "aria2c", "http", "https", "xh", "lynx", "w3m", "openssl", "dig", "nslookup", "host", "ping",
     "ping6", "whois", "sendmail", "rclone", "aws", "gcloud", "gsutil", "az", "gh"}
)
_PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudo-rs"})
#: Programs whose danger shows in their arguments; under xargs those arrive only at run time.
_ARGUMENT_GATED = frozenset({"rm", "chmod", "chown", "chgrp", "git", "find", "kill"})
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
#: Programs that cannot write the files they name (`sort`, `tree` and `uniq` can: `-o`, `uniq IN OUT`).
_READERS = (frozenset(PROGRAMS) - {"sort", "tree", "uniq"}) | {"echo", "printf", "test", "[", "cd"}
_RC_FILES = frozenset(
    {".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zprofile", ".zshenv",
     ".zlogin", ".cshrc", ".tcshrc", ".kshrc", "config.fish", ".inputrc"}
)
#: A function definition (`f() {` or `:(){`): no backtracking, so linear on any input.
_FUNCTION = re.compile(r"\(\s*\)\s*\{")


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


# ------------------------------------------------------------------------------------------- the verdict


def dangerous_reason(
    text: str, script: Script, every: list[list[Word]], *, config_dir: Path | None
) -> str | None:
    """Why the command line `text` (parsed as `script`, its programs `every`) is dangerous, or None."""
    if _FUNCTION.search(text) and "|" in text and "&" in text:
        # `:(){ :|:& };:` and its renamings: a function that pipes and backgrounds (a fork bomb's shape).
        return "it defines a function that pipes into itself in the background, like a fork bomb"
    for argv in every:
        reason = _dangerous_argv(argv, config_dir)
        if reason:
            return reason
    for command in script.commands:
        # Piped text, a here-document or a here-string: the program is text the check does not see.
        fed = command.after in ("|", "|&") or any(r.op.startswith("<<") for r in command.redirects)
        if fed and any(_runs_stdin(argv) for argv in unwrap(strip_reserved(command.argv), 1)):
            return f"it feeds text to {command.argv[0].text}, which runs it as a program"
        for redirect in command.redirects:
            target = redirect.target.text
            if target.startswith(("/dev/tcp/", "/dev/udp/")):
                return "it opens a network connection (/dev/tcp)"
            if re.match(r"/dev/(sd|nvme|hd|vd|xvd|mmcblk|disk)", target) and ">" in redirect.op:
                return f"it writes to the raw disk {target}"
            if ">" in redirect.op and is_protected_path(target, config_dir=config_dir):
                return f"it writes to the protected path {target}"
    return None


def _runs_stdin(argv: list[Word]) -> bool:
    """An interpreter with no script file (or `-s`, `-`): the program it runs is its stdin."""
    if posixpath.basename(argv[0].text) not in _INTERPRETERS:
        return False
    args = [w.text for w in argv[1:]]
    stdin = any(a == "-" or re.fullmatch(r"-[a-z]*s[a-z]*", a) for a in args)
    return stdin or all(a.startswith("-") for a in args)


def _dangerous_argv(argv: list[Word], config_dir: Path | None) -> str | None:
    first = argv[0]
    if first.expands:
        return "the program it runs is only known at run time (a $-expansion or substitution names it)"
    if first.glob:  # `r? -rf .` runs rm when the workspace holds a file named `rm`
        return "the program it runs is a glob, so file names decide which program runs"
    name = posixpath.basename(first.text)
    args = [w.text for w in argv[1:]]
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    if any("/dev/tcp/" in a or "/dev/udp/" in a for a in args):
        return "it opens a network connection (/dev/tcp)"
    if name in _PRIVILEGE:
        return f"{name} runs a command with root privileges"
    if name in ("xargs", "parallel") and any(posixpath.basename(a) in _ARGUMENT_GATED for a in args):
        return f"{name} gives the command it runs arguments that are only known at run time"
    if name == "rm" and _rm_forces(args):
        return "rm -r/-f deletes files for good"
    if name in _DESTRUCTIVE or name.startswith("mkfs"):
        return f"{name} can destroy data or stop the system"
    if name in ("chmod", "chown", "chgrp") and ("R" in flags or _gives(args, "--recursive")):
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
        reason = _dangerous_git(*git_subcommand(args))
        if reason:
            return reason
    if name == "find" and "-delete" in args:
        return "find -delete deletes files"
    if name not in _READERS and any(is_protected_path(a, config_dir=config_dir) for a in _and_values(args)):
        return "it may change a protected path (.git/, a shell startup file or mylm's config)"
    return None


def _and_values(args: list[str]) -> list[str]:
    """Arguments, plus the values of `--opt=value`, `key=value` and glued short options
    (`--output=.git/config`, `of=.bashrc`, `-o.git/config`)."""
    out = list(args)
    for a in args:
        if "=" in a:
            out.append(a.partition("=")[2])
        if a.startswith("-") and not a.startswith("--") and len(a) > 2:
            out.append(a[2:])
    return out


def _gives(args: list[str], option: str) -> bool:
    """Whether a long option in `args` is `option` or an abbreviation of it (GNU getopt and git accept any
    unambiguous prefix, so `--r` can be `--recursive`)."""
    return any(
        a.startswith("--") and len(a) > 2 and option.startswith(a.partition("=")[0]) for a in args
    )


#: rm options that neither force nor recurse.
_RM_HARMLESS = frozenset(
    {"--interactive", "--verbose", "--dir", "--one-file-system", "--preserve-root", "--help", "--version"}
)


def _rm_forces(args: list[str]) -> bool:
    for a in args:
        if a == "--":
            return False
        if a.startswith("--") and a.partition("=")[0] not in _RM_HARMLESS:
            return True  # --force, --recursive, --no-preserve-root, or an abbreviation (--r, --f)
        if a.startswith("-") and not a.startswith("--") and set(a[1:]) - set("iIvd"):
            return True
    return False


_GIT_NETWORK = frozenset(
    {"push", "fetch", "pull", "clone", "submodule", "ls-remote", "archive", "send-email", "send-pack"}
)


def _dangerous_git(sub: str, rest: list[str]) -> str | None:
    short = "".join(a[1:] for a in rest if a.startswith("-") and not a.startswith("--"))
    if sub in _GIT_NETWORK:
        return f"git {sub} uses the network (and can publish or overwrite work)"
    if sub == "remote" and not set(rest) <= {"-v", "--verbose"}:
        return "git remote can use the network or change where the repository pushes"
    if sub == "reset" and _gives(rest, "--hard"):
        return "git reset --hard discards uncommitted work"
    if sub == "clean" and ("f" in short or _gives(rest, "--force")):
        return "git clean -f deletes untracked files"
    if sub == "rm" and ("f" in short or _gives(rest, "--force")):
        return "git rm -f deletes files with their uncommitted changes"
    discards = "--" in rest or "." in rest or "f" in short or _gives(rest, "--force")
    if sub in ("checkout", "restore", "switch") and (discards or _gives(rest, "--discard-changes")):
        return f"git {sub} of paths (or --force) discards uncommitted changes"
    if sub == "branch" and ("D" in short or "d" in short or _gives(rest, "--delete")):
        return "git branch -D deletes a branch"
    if sub == "config" and not set(rest) & {"--get", "--get-all", "--get-regexp", "--list", "-l"}:
        return "git config changes the repository's config, a protected path"
    if sub == "stash" and rest[:1] in (["drop"], ["clear"]):
        return "git stash drop/clear deletes stashed work"
    if sub in ("filter-branch", "filter-repo", "update-ref", "reflog") or (
        sub == "gc" and any(a.startswith("--prune") for a in rest)
    ):
        return f"git {sub} rewrites or deletes history"
    return None
