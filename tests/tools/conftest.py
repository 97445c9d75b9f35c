"""Fixtures for the tool tests: a workspace beside an outside directory, and a /proc scan for survivors."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

CANARY = "OUTSIDE-CANARY-7f3a"
#: The worktree root, so a fresh interpreter imports this checkout of mylm.
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(isolated_user_state: Path) -> Path:
    """The empty workspace the autouse fixture made the current directory."""
    return isolated_user_state


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding files that no file tool may read or write."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(CANARY)
    (path / "victim.txt").write_text(CANARY)
    return path


@pytest.fixture
def marker() -> str:
    """A unique number to put in spawned processes' argv (e.g. as a sleep duration) to find them in /proc."""
    return f"{secrets.randbelow(9 * 10**5) + 10**5}.{secrets.randbelow(9 * 10**5) + 10**5}"


def _processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line or environment contains `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except (OSError, IndexError):
            continue
        if marker.encode() in cmdline or marker.encode() in environ:
            found.append(int(name))
    return found


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll `condition` until it holds or `timeout` passes (a bound that only catches hangs)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(name="processes_with")
def processes_with_fixture() -> Callable[[str], list[int]]:
    """`processes_with(marker)`: the live processes carrying `marker` in their argv or environment."""
    return _processes_with


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> Callable[..., bool]:
    """`wait_for(condition, timeout=10)`: poll a condition with a bound that only catches hangs."""
    return _wait_for


def python_env() -> dict[str, str]:
    """The environment for a fresh interpreter that imports this checkout of mylm."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(name="run_python")
def run_python_fixture() -> Callable[..., str]:
    """`run_python(code, cwd, *argv)`: run `code` in a fresh interpreter and return its stdout.

    For what must be measured or changed process-wide (peak RSS, being a subreaper) without touching pytest.
    """

    def run(code: str, cwd: Path, *argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            cwd=cwd,
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    return run


@pytest.fixture(name="python_env")
def python_env_fixture() -> dict[str, str]:
    """See `python_env`."""
    return python_env()
