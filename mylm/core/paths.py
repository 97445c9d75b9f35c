"""mylm's user directories (config, data, cache, state): one implementation, so no two modules disagree.

One rule for every kind: a non-empty `XDG_<KIND>_HOME` wins on any platform but Windows (the user said where);
else the platform's place. Config, data and state follow the platform (`~/.config`, `~/.local/share`,
`~/.local/state` on Linux; `~/Library/Application Support` on macOS; `%APPDATA%` / `%LOCALAPPDATA%` on
Windows). The cache is `~/.cache` everywhere, where pulled models and the engine wheel have always lived.

This module imports nothing of mylm and nothing outside the standard library: every layer may use it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

__all__ = ["APP", "DIR_VARIABLES", "cache_dir", "config_dir", "data_dir", "state_dir", "user_dir"]

#: The directory name under each base.
APP = "mylm"

Kind = Literal["config", "data", "cache", "state"]

#: Under the home directory, per kind, where XDG says and no variable is set (Linux and the other Unixes).
_XDG_DEFAULT: dict[str, tuple[str, ...]] = {
    "config": (".config",),
    "data": (".local", "share"),
    "cache": (".cache",),
    "state": (".local", "state"),
}
#: On Windows, the variable naming each kind's base (config roams with the user; the rest stay on the machine).
_WINDOWS_VAR = {"config": "APPDATA", "data": "LOCALAPPDATA", "cache": None, "state": "LOCALAPPDATA"}


#: Every variable `user_dir` reads, whatever the kind and platform: a caller may keep its answers per their values.
DIR_VARIABLES = ("HOME", "USERPROFILE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                 "APPDATA", "LOCALAPPDATA")


def user_dir(kind: Kind, environ: Mapping[str, str] | None = None, *, platform: str | None = None) -> Path:
    """mylm's directory of one kind; `environ` and `platform` default to this process's (tests pass others)."""
    env = os.environ if environ is None else environ
    system = sys.platform if platform is None else platform
    home = _home(env, system)
    if kind == "cache":
        # The cache keeps its historical place on every platform: moving it would orphan downloaded models.
        return Path(env.get("XDG_CACHE_HOME") or home.joinpath(*_XDG_DEFAULT["cache"])) / APP
    if system == "win32":
        variable = _WINDOWS_VAR[kind]
        base = env.get(variable) if variable else None
        return Path(base or home / "AppData" / ("Roaming" if kind == "config" else "Local")) / APP
    xdg = env.get(f"XDG_{kind.upper()}_HOME")
    if xdg:
        return Path(xdg) / APP
    if system == "darwin":
        return home / "Library" / "Application Support" / APP
    return home.joinpath(*_XDG_DEFAULT[kind]) / APP


def config_dir(environ: Mapping[str, str] | None = None, *, platform: str | None = None) -> Path:
    """Where the user's config.toml, models.toml, prompts/ and evals/ live."""
    return user_dir("config", environ, platform=platform)


def data_dir(environ: Mapping[str, str] | None = None, *, platform: str | None = None) -> Path:
    """Where sessions, the memory store and the chat input history live."""
    return user_dir("data", environ, platform=platform)


def cache_dir(environ: Mapping[str, str] | None = None, *, platform: str | None = None) -> Path:
    """Where pulled models live (re-creatable downloads)."""
    return user_dir("cache", environ, platform=platform)


def state_dir(environ: Mapping[str, str] | None = None, *, platform: str | None = None) -> Path:
    """Where state worth keeping but not worth backing up lives (logs, traces)."""
    return user_dir("state", environ, platform=platform)


def _home(env: Mapping[str, str], system: str) -> Path:
    # The environment given wins over the process's, so a caller's mapping fully decides the answer.
    home = env.get("USERPROFILE") if system == "win32" else env.get("HOME")
    return Path(home) if home else Path.home()
