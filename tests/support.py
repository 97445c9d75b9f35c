"""Plain helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
