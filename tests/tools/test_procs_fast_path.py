"""The cheap "nothing left" check a subreaper makes after each command, instead of scanning every process."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def test_a_subreaper_skips_the_scan_only_when_no_process_can_be_left(
    workspace: Path, marker: str, processes_with: Callable[[str], list[int]], run_python: Callable[..., str]
) -> None:
    probe = (
        "import subprocess\n"
        "from mylm.tools import procs\n"
        "assert procs.become_subreaper()\n"
        "scans = []\n"
        "real = procs.process_table\n"
        "procs.process_table = lambda: scans.append(1) or real()\n"
        "def command(script):\n"
        "    p = subprocess.Popen(['/bin/sh', '-c', script], start_new_session=True)\n"
        "    return p, procs.Command('t', group=p.pid, root=p.pid, since=procs.start_time(p.pid))\n"
        "p, clean = command('true')\n"
        "while procs._stat(p.pid)[2] != 'Z':\n"
        "    pass\n"
        "print(procs._nothing_left(clean), procs.stop_all(clean, grace=1), len(scans))\n"
        "p.wait()\n"
        f"p, messy = command('(setsid /bin/sleep {marker} &)')\n"
        "while procs._stat(p.pid)[2] != 'Z':\n"
        "    pass\n"
        "print(procs._nothing_left(messy), procs.stop_all(messy, grace=1), len(scans) > 0)\n"
        "p.wait()\n"
    )
    assert run_python(probe, workspace).split() == ["True", "0", "0", "False", "0", "True"]
    assert processes_with(marker) == []
