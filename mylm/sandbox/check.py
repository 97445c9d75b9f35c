"""What really confines a command on this machine, found by running one (`mylm sandbox --check`).

Not read from a table: a probe command is started through the sandbox in force, read-only and then approved,
in a scratch workspace holding a planted `.env`, and reports what it finds from inside (its namespaces, the
seccomp mode and no_new_privs from /proc/self/status, whether it can open an IP socket, reach the keyring,
read the planted secret, or write outside). Each fact says what stopped something, or that nothing did.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .confine import Sandbox

Status = Literal["kernel", "fallback", "none"]

#: Runs inside the sandbox (python3 if the system has one, else only the shell's facts are known).
_PROBE = r"""
import ctypes, json, os, socket
facts = {}
with open("/proc/self/status") as f:
    status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
facts["seccomp"] = status.get("Seccomp", "?").strip()
facts["no_new_privs"] = status.get("NoNewPrivs", "?").strip()
facts["nspid"] = status.get("NSpid", "").split()
facts["capbnd"] = status.get("CapBnd", "?").strip()
def ns(name):
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError as error:
        return f"?{error.errno}"
facts["ns"] = {n: ns(n) for n in ("pid", "ipc", "mnt", "user", "net")}
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    facts["inet"] = "open"
except OSError as error:
    facts["inet"] = os.strerror(error.errno)
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    facts["unix"] = "open"
except OSError as error:
    facts["unix"] = os.strerror(error.errno)
libc = ctypes.CDLL(None, use_errno=True)
KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING = 0, -4
result = libc.syscall(250 if os.uname().machine == "x86_64" else 219, KEYCTL_GET_KEYRING_ID,
                      KEY_SPEC_USER_KEYRING, 0)
facts["keyring"] = "reachable" if result >= 0 else os.strerror(ctypes.get_errno())
try:
    with open(".env") as f:
        facts["secret"] = "read" if "PROBE" in f.read() else "masked"
except OSError as error:
    facts["secret"] = os.strerror(error.errno)
try:
    with open(os.path.join(os.environ.get("MYLM_CHECK_OUTSIDE", "/nonexistent"), "probe"), "w"):
        facts["outside"] = "written"
except OSError as error:
    facts["outside"] = os.strerror(error.errno)
facts["fds"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(json.dumps(facts))
"""


@dataclass(frozen=True)
class Fact:
    """One line of the report: what is checked, by what it is held ("kernel"), held by a weaker mechanism
    ("fallback"), or not held here ("none"), and the detail seen."""

    what: str
    status: Status
    detail: str


def _own_namespaces() -> dict[str, str]:
    found = {}
    for name in ("pid", "ipc", "mnt", "user", "net"):
        try:
            found[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            found[name] = "?"
    return found


def probe(sandbox: Sandbox, grant: Literal["read-only", "workspace-write"]) -> dict[str, object] | str:
    """Run the probe command under `sandbox` with `grant`; its facts, or why it did not run."""
    from ..tools.environment import child_environment
    from ..tools.shell import run_command

    python = shutil.which("python3")
    if python is None:
        return "no python3 on PATH to probe with"
    base = Path(tempfile.mkdtemp(prefix="mylm-check-"))
    try:
        workspace, outside = base / "workspace", base / "outside"
        workspace.mkdir()
        outside.mkdir()
        (workspace / ".env").write_text("TOKEN=PROBE\n")
        (workspace / "probe.py").write_text(_PROBE)
        env = {**child_environment(), "MYLM_CHECK_OUTSIDE": str(outside)}
        with sandbox.launch(grant, workspace, env) as launch:
            result = run_command(f"{python} probe.py", cwd=workspace, timeout=30, env=env, launch=launch)
        try:
            facts: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"the probe failed: {(result.stderr or result.stdout).strip()[-300:]}"
        return facts
    finally:
        shutil.rmtree(base, ignore_errors=True)


def report(sandbox: Sandbox) -> list[Fact]:
    """What confines a command here, fact by fact (starts two probe commands)."""
    from . import bwrap, landlock, seccomp

    facts: list[Fact] = []
    abi = landlock.abi_version()
    scopes = "signals and abstract sockets scoped" if abi >= 6 else "signals and abstract sockets NOT scoped (ABI < 6)"
    tcp = "TCP rules" if abi >= 4 else "no TCP rules (ABI < 4: seccomp refuses IP sockets instead)"
    facts.append(Fact("backend", "kernel" if sandbox.confines else "none", sandbox.describe()))
    if abi:
        facts.append(Fact("landlock", "kernel" if sandbox.backend == "landlock" else "fallback",
                          f"ABI {abi}: files, {tcp}, {scopes}"))
    else:
        facts.append(Fact("landlock", "none", "not available (Linux 5.13+ with Landlock enabled)"))
    program = bwrap.find()
    if program:
        facts.append(Fact("bubblewrap", "kernel" if sandbox.backend == "bubblewrap" else "fallback", program))
    else:
        needed: Status = "none" if sandbox.backend != "landlock" else "kernel"
        facts.append(Fact("bubblewrap", needed, "not installed, or cannot make namespaces here"
                          + (" (not needed: Landlock is in force)" if needed == "kernel" else "")))
    facts.append(Fact("seccomp", "kernel" if seccomp.supported() else "none",
                      "filter for this machine" if seccomp.supported() else "no system call numbers for it"))
    if not sandbox.confines:
        facts.append(Fact("commands", "none", "unconfined: every command asks unless you approve commands"))
        return facts
    own = _own_namespaces()
    grants: tuple[Literal["read-only", "workspace-write"], ...] = ("read-only", "workspace-write")
    for grant in grants:
        seen = probe(sandbox, grant)
        if isinstance(seen, str):
            facts.append(Fact(grant, "none", seen))
            continue
        facts += _judge(grant, seen, own)
    return facts


def _judge(grant: str, seen: dict[str, object], own: dict[str, str]) -> list[Fact]:
    ns = seen.get("ns", {})
    assert isinstance(ns, dict)
    out = []
    for name, meaning in (("pid", "its own processes only"), ("ipc", "its own SysV IPC"),
                          ("mnt", "secrets masked by mounts"), ("user", "unprivileged namespaces"),
                          ("net", "an empty network")):
        fresh = ns.get(name) not in (None, own.get(name)) and not str(ns.get(name)).startswith("?")
        if name == "user" and os.geteuid() == 0:
            status: Status = "kernel"
            detail = "not needed (mylm runs as root)" if not fresh else "own"
        elif name == "net":
            status = "kernel" if fresh else "fallback"
            detail = "own" if fresh else "shared (Landlock and seccomp decide what it may open)"
        else:
            status = "kernel" if fresh else "fallback"
            detail = f"own ({meaning})" if fresh else "shared"
        out.append(Fact(f"{grant}: {name} namespace", status, detail))
    out.append(Fact(f"{grant}: seccomp", "kernel" if seen.get("seccomp") == "2" else "none",
                    f"mode {seen.get('seccomp')}, no_new_privs {seen.get('no_new_privs')}"))
    secret = seen.get("secret")
    if grant == "read-only":
        status = "kernel" if secret != "read" else "fallback"
        detail = ("the workspace's .env is masked" if status == "kernel"
                  else "the workspace's .env is readable: only the approval policy keeps it from commands")
    else:
        status, detail = "kernel", f"the workspace's .env is {secret} (an approved command may read it)"
    out.append(Fact(f"{grant}: secrets", status, detail))
    inet = seen.get("inet")
    out.append(Fact(f"{grant}: IP sockets", "kernel", str(inet)))
    out.append(Fact(f"{grant}: UNIX sockets", "kernel", str(seen.get("unix"))))
    keyring = seen.get("keyring")
    out.append(Fact(f"{grant}: user keyring", "kernel" if keyring != "reachable" else "none", str(keyring)))
    outside = seen.get("outside")
    out.append(Fact(f"{grant}: write outside", "kernel" if outside != "written" else "none", str(outside)))
    fds = seen.get("fds", [])
    extra = [fd for fd in fds if isinstance(fd, int) and fd > 3] if isinstance(fds, list) else []
    out.append(Fact(f"{grant}: descriptors", "kernel" if not extra else "none",
                    "0-2 only" if not extra else f"also holds {extra}"))
    return out
