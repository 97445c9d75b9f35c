"""Fixtures for the exploit battery: the workspace the autouse fixture made the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(isolated_user_state: Path) -> Path:
    return isolated_user_state
