"""A command cannot signal, trace or inspect mylm, not even the thread that confined itself to start it."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the probe uses x86-64 system call numbers")

# Run by the command: every way to reach a process or one of its threads by id, aimed at mylm (its parent)
# and each of its threads. SIGURG's default action is to do nothing, so even a call that got through would
# not hurt; mylm records whether one arrived.
PROBE = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])  # mylm's pid, as a command would find it in /proc (it is not its parent)
tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
buffer = ctypes.create_string_buffer(256)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
results = []
def call(name, *args):
    done = libc.syscall(*args)
    results.append(f"{name}={'ok' if done >= 0 else errno.errorcode.get(ctypes.get_errno())}")
call("kill", 62, pid, 23)
call("rt_sigqueueinfo", 129, pid, 23, buffer)
for tid in tids:
    call("tkill", 200, tid, 23)
    call("tgkill", 234, pid, tid, 23)
    call("kill-tid", 62, tid, 23)
    call("rt_tgsigqueueinfo", 297, pid, tid, 23, buffer)
    call("pidfd_open", 434, tid, 0o200 if tid != pid else 0)
    call("ptrace-attach", 101, 16, tid, 0, 0)
    call("prlimit", 302, tid, 7, None, buffer)
    call("process_vm_readv", 310, tid, iov, 1, iov, 1, 0)
print(len(tids), " ".join(results))
"""

# mylm as the CLI runs it: non-dumpable (so read-only commands start from a kept confined thread), a
# subreaper, a SIGURG handler counting arrivals.
HOST = r"""
import os, signal, sys
from pathlib import Path
from mylm.sandbox import detect, protect_process
from mylm.sandbox.rulesets import kept_rulesets
from mylm.tools import procs
from mylm.tools.shell import child_environment, run_command
arrived = []
signal.signal(signal.SIGURG, lambda *_: arrived.append(1))
if sys.argv[2] == "kept":
    assert protect_process()
procs.become_subreaper()
workspace = Path(sys.argv[1])
sandbox = detect()
env = child_environment()
for grant in ("read-only", "workspace-write"):
    with sandbox.launch(grant, workspace, env) as launch:
        result = run_command(f"python3 probe.py {os.getpid()}", cwd=workspace, timeout=60, env=env, launch=launch)
    print(grant, result.stdout.strip(), result.stderr.strip()[-300:])
print("launchers", len(kept_rulesets.launchers()), "arrived", len(arrived))
"""


@pytest.mark.parametrize("mode", ["kept", "one-shot"])
def test_a_command_reaches_no_thread_of_mylm(workspace: Path, mode: str, subprocess_env: dict[str, str]) -> None:
    """Mylm in a child process, as the CLI runs it (non-dumpable: read-only commands start from a kept confined
    thread), or as a library that did not protect its process (a thread confines itself per command)."""
    landlock_sandbox()
    (workspace / "probe.py").write_text(PROBE)
    done = subprocess.run([sys.executable, "-c", HOST, str(workspace), mode], cwd=workspace, env=subprocess_env,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    summary = lines[-1].split()
    assert summary[3] == "0", "a signal reached mylm"
    assert int(summary[1]) == 2  # one launcher per grant, whether mylm's process is dumpable or not
    for line in lines[:-1]:
        grant, threads, *results = line.split()
        assert int(threads) >= 1, line
        assert results and not [r for r in results if r.endswith("=ok")], line
