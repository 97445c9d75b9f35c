"""Fixtures for the sandbox tests and the exploit battery."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandbox_support import require

from mylm.sandbox import Sandbox, detect


@pytest.fixture(params=["landlock", "bubblewrap"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn (bubblewrap skips where it is not installed: Landlock is the one CI requires)."""
    return str(request.param)


@pytest.fixture
def auto_sandbox() -> Sandbox:
    """What `mylm` itself would pick here; a failure on CI if that is none."""
    found = detect()
    if not found.confines:
        require("no sandbox (Landlock or bubblewrap) on this machine")
    return found


@pytest.fixture
def workspace(isolated_user_state: Path) -> Path:
    """The workspace the autouse fixture made the current directory."""
    return isolated_user_state
