"""Kernel confinement for the commands mylm runs: Landlock, else bubblewrap, else none (all commands ask)."""

from __future__ import annotations

from .confine import BACKEND_ENV, Launch, Mode, Sandbox, detect
from .process import protect_process

__all__ = ["BACKEND_ENV", "Launch", "Mode", "Sandbox", "detect", "protect_process"]
