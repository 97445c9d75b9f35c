"""Commands running at once in one mylm (a batch, several agents): one's clean-up spares the others."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

# The script runs in a fresh interpreter that becomes a subreaper, as `mylm ask` and `mylm batch` do.
# Sequencing is by FIFOs, never by time: a writer's open() returns only once the reader has the FIFO open,
# so the test knows each process is running before it lets the first command end.
PROBE = r"""
import os, subprocess, sys, threading
from mylm.tools import procs
from mylm.tools.shell import run_command
assert procs.become_subreaper()
here = sys.argv[1]
for name in ("a", "b", "own"):
    os.mkfifo(f"{here}/{name}")
results = {}

def run(name, command):
    results[name] = run_command(command, cwd=here, timeout=60)

first = threading.Thread(target=run, args=("a", "read x < a; echo A-$x"))
first.start()
gate_a = open(f"{here}/a", "w")  # the first command is running
second = threading.Thread(target=run, args=("b", "read x < b; echo B-$x"))
second.start()
gate_b = open(f"{here}/b", "w")  # the second command, started after the first, is running
own = subprocess.Popen(["/bin/sh", "-c", "read x < own; exit 3"])  # mylm's own child, as the policy's git is
gate_own = open(f"{here}/own", "w")
gate_a.write("1\n"); gate_a.close()
first.join()  # the first command ends and cleans up while the other two run
gate_b.write("2\n"); gate_b.close()
gate_own.write("3\n"); gate_own.close()
second.join()
a, b = results["a"], results["b"]
print(a.exit_code, a.stdout.strip(), b.exit_code, b.stdout.strip(), own.wait())
"""


def test_a_command_ending_spares_the_commands_and_children_started_after_it(
    workspace: Path, run_python: Callable[..., str]
) -> None:
    """The sweep after a command takes this process's descendants started since as its orphans; another
    command started meanwhile (and a child mylm started itself) were killed, and mylm's own child's exit
    status could be reaped from under its Popen."""
    assert run_python(PROBE, workspace, str(workspace)).split() == ["0", "A-1", "0", "B-2", "3"]
