"""One line saying when the sandbox, not the file's permissions, stopped a command, and what to do instead.

Worked out from facts, not guessed: the paths a command's error lines name ("Permission denied", "Operation not
permitted", "Read-only file system") are checked against the profile it ran with, and only a path the profile
forbids while mylm itself (unconfined, same user) could have done the same is reported. A network failure is
reported only when the profile has no network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from .profile import Profile

_DENIED = re.compile(r"permission denied|operation not permitted|read-only file system", re.IGNORECASE)
#: A masked directory is an empty one in the command's mount namespace: what was in it is "not there".
_MISSING = re.compile(r"no such file or directory", re.IGNORECASE)
#: A path in an error line: quoted ('x', "x", ‘x’, `x'), or before ": Permission denied" and its kin.
_QUOTED = re.compile(r"""['"‘`]([^'"’`\n]+)['"’]""")
_BARE = re.compile(
    r"(?:^|\s)([^\s:'\"]+):\s*(?:permission denied|operation not permitted|read-only file system"
    r"|no such file or directory)",
    re.IGNORECASE,
)
_NETWORK = re.compile(
    r"temporary failure in name resolution|could not resolve host|name or service not known"
    r"|network is unreachable"
    r"|failed to connect|connection refused|couldn't connect|failed to establish a new connection"
    r"|socket: permission denied|\[errno 13\] permission denied.*(?:socket|connect)",
    re.IGNORECASE,
)
_MAX_LINES = 200


def worth_a_look(output: str) -> bool:
    """Whether `output` reports a denial or a network failure at all (most commands' does not)."""
    return bool(_DENIED.search(output) or _NETWORK.search(output) or _MISSING.search(output))


def explain(profile: Profile, output: str, cwd: str) -> str:
    """The line for the observation when the sandbox stopped something `output` reports (else "")."""
    lines = [line for line in output.splitlines()[:_MAX_LINES] if line.strip()]
    for line in lines:
        if _DENIED.search(line):
            for path in _paths(line, cwd):
                why = _forbidden(profile, path)
                if why:
                    return _line(profile, *why)
        elif _MISSING.search(line):
            for path in _paths(line, cwd):
                if _under(os.path.realpath(path), profile.hidden) or _under(path, profile.hidden):
                    return _line(profile, *_hidden(path))
    if not profile.network and any(_NETWORK.search(line) for line in lines):
        if profile.grant == "read-only":
            return _line(profile, "it has no network",
                         "a command that needs the network needs the user's approval")
        return _line(profile, "the network is off for commands in this configuration",
                     "do without the network, or ask the user to turn it on")
    return ""


def _paths(line: str, cwd: str) -> Iterable[str]:
    found = [m.group(1) for m in _QUOTED.finditer(line)] + [m.group(1) for m in _BARE.finditer(line)]
    for raw in found:
        raw = raw.strip()
        if not raw or (" " in raw and not raw.startswith("/")):
            continue
        if raw.startswith("~/"):
            raw = os.path.join(os.path.expanduser("~"), raw[2:])
        yield os.path.normpath(os.path.join(cwd, raw))


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _hidden(path: str) -> tuple[str, str]:
    return (f"{path} is hidden from commands (credentials)", "leave it alone, or ask the user if the task needs it")


def _forbidden(profile: Profile, path: str) -> tuple[str, str] | None:
    """(what the sandbox stopped, what to do instead) for an access to `path` that `profile` forbids and mylm
    itself could make; None if it does not."""
    real = os.path.realpath(path)
    if _under(real, profile.hidden) or _under(path, profile.hidden):
        return _hidden(path)
    existing = real
    while not os.path.lexists(existing) and existing != os.sep:
        existing = os.path.dirname(existing)
    readable = _under(real, profile.read) or _under(real, profile.devices_read)
    # A path that is not there was being made: a write, whatever the directory's readability.
    if existing == real and not readable and os.access(existing, os.R_OK):
        return (f"{path} is outside what commands may read",
                "commands read only the workspace, the system and the programs on PATH")
    writable = _under(real, profile.write) or _under(real, profile.devices_write)
    if not writable and os.access(existing, os.W_OK):
        if profile.grant == "read-only":
            return (f"writing {path} was refused (it may write nothing)",
                    ("a command that changes files needs the user's approval, and may write only in the "
                     "workspace and $TMPDIR"))
        return (f"writing {path} was refused (outside the workspace and $TMPDIR)",
                "write inside the workspace or $TMPDIR")
    return None


def _line(profile: Profile, why: str, instead: str) -> str:
    if profile.grant == "read-only":
        grant = "ran read-only (auto-approved)"
    else:
        grant = f"ran with write access to the workspace ({profile.workspace}) and $TMPDIR only"
    return f"[sandbox: the command {grant}; {why}; {instead}]"
