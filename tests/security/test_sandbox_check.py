"""`mylm sandbox --check` runs probe commands and reports what confines them on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sandbox_support import landlock_sandbox


def check(workspace: Path, env: dict[str, str]) -> dict[str, dict[str, str]]:
    done = subprocess.run([sys.executable, "-m", "mylm", "sandbox", "--check", "--json"], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return {fact["what"]: fact for fact in json.loads(done.stdout)}


def test_the_check_reports_what_the_kernel_holds_here(workspace: Path, subprocess_env: dict[str, str]) -> None:
    abi = landlock_sandbox().landlock_abi
    facts = check(workspace, subprocess_env)
    assert facts["landlock"]["status"] == "kernel" and f"ABI {abi}" in facts["landlock"]["detail"]
    for grant in ("read-only", "workspace-write"):
        for what in ("pid namespace", "mnt namespace", "seccomp", "write outside", "user keyring", "descriptors"):
            fact = facts[f"{grant}: {what}"]
            assert fact["status"] == "kernel", fact
    assert facts["read-only: secrets"]["detail"] == "the workspace's .env is masked"
    assert facts["read-only: IP sockets"]["detail"] != "open"


def test_the_check_says_when_masking_falls_back(workspace: Path, subprocess_env: dict[str, str]) -> None:
    landlock_sandbox()
    facts = check(workspace, {**subprocess_env, "MYLM_SANDBOX_MASKS": "off"})
    assert facts["read-only: secrets"]["status"] == "fallback"
    assert "only the approval policy" in facts["read-only: secrets"]["detail"]


def test_the_plain_command_says_which_sandbox(workspace: Path, subprocess_env: dict[str, str]) -> None:
    landlock_sandbox()
    done = subprocess.run([sys.executable, "-m", "mylm", "sandbox"], cwd=workspace, env=subprocess_env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("landlock ABI")
