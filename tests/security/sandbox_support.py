"""Helpers for the sandbox tests: the backends this machine has; `MYLM_REQUIRE_SANDBOX=1` (CI) fails what would skip."""

from __future__ import annotations

import os

import pytest

from mylm.sandbox import Sandbox, landlock
from mylm.sandbox import bwrap as bwrap_module


def require(reason: str) -> None:
    """Skip for `reason`, or fail when the machine is meant to have a sandbox (CI sets MYLM_REQUIRE_SANDBOX=1)."""
    if os.environ.get("MYLM_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"MYLM_REQUIRE_SANDBOX=1 but {reason}")
    pytest.skip(reason)


def landlock_sandbox(network: bool = True) -> Sandbox:
    abi = landlock.abi_version()
    if abi < 1:
        require("this kernel has no Landlock (Linux 5.13+ with Landlock enabled)")
    return Sandbox("landlock", network, landlock_abi=abi)


def bubblewrap_sandbox(network: bool = True) -> Sandbox:
    program = bwrap_module.find()
    if program is None:
        pytest.skip("bubblewrap is not installed or cannot create namespaces here (the fallback backend)")
    return Sandbox("bubblewrap", network, bwrap_program=program)


def make(backend: str, network: bool = True) -> Sandbox:
    return landlock_sandbox(network) if backend == "landlock" else bubblewrap_sandbox(network)
