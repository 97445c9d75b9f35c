"""mylm's user directories come from one place, so sessions, memory, config, prompts and models agree."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from mylm.core import paths
from mylm.config import config_path
from mylm.evaluation.suite import default_suite_path
from mylm.models.cache import models_dir
from mylm.models.registry import user_registry_path
from mylm.core.paths import cache_dir, config_dir, data_dir, state_dir
from mylm.prompts import default_search_path
from mylm.sessions import sessions_dir
from mylm.tools.memory import default_memory_path


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_paths_sessions_and_memory_agree_under_xdg_data_home(
    platform: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They were computed twice and disagreed on macOS once XDG_DATA_HOME was set (sessions ignored it).
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    expected = tmp_path / "xdg-data" / "mylm"
    assert data_dir() == expected
    assert sessions_dir() == expected / "sessions"
    assert default_memory_path() == expected / "memory.db"


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_paths_every_config_file_is_in_the_one_config_dir(
    platform: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    expected = tmp_path / "xdg-config" / "mylm"
    assert config_dir() == expected
    assert config_path() == expected / "config.toml"
    assert user_registry_path() == expected / "models.toml"
    assert dict(default_search_path(trusted=False))["user"] == expected / "prompts"
    (expected / "evals").mkdir(parents=True)
    (expected / "evals" / "suite.toml").write_text("")
    assert default_suite_path() == expected / "evals" / "suite.toml"


def test_paths_models_are_in_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    assert models_dir() == cache_dir() / "models" == tmp_path / "xdg-cache" / "mylm" / "models"


def test_paths_linux_defaults_without_xdg_variables() -> None:
    env = {"HOME": "/home/me"}
    assert config_dir(env, platform="linux") == Path("/home/me/.config/mylm")
    assert data_dir(env, platform="linux") == Path("/home/me/.local/share/mylm")
    assert state_dir(env, platform="linux") == Path("/home/me/.local/state/mylm")
    assert cache_dir(env, platform="linux") == Path("/home/me/.cache/mylm")


def test_paths_an_empty_xdg_variable_counts_as_unset() -> None:
    # The XDG spec: "If $XDG_DATA_HOME is either not set or empty, a default ... should be used."
    env = {"HOME": "/home/me", "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": ""}
    assert data_dir(env, platform="linux") == Path("/home/me/.local/share/mylm")
    assert config_dir(env, platform="linux") == Path("/home/me/.config/mylm")
    assert cache_dir(env, platform="linux") == Path("/home/me/.cache/mylm")


def test_paths_macos_defaults_and_xdg_overrides() -> None:
    env = {"HOME": "/Users/me"}
    support = Path("/Users/me/Library/Application Support/mylm")
    assert config_dir(env, platform="darwin") == data_dir(env, platform="darwin") == support
    assert cache_dir(env, platform="darwin") == Path("/Users/me/.cache/mylm")
    assert data_dir({**env, "XDG_DATA_HOME": "/x"}, platform="darwin") == Path("/x/mylm")


def test_paths_windows_uses_appdata_and_localappdata() -> None:
    env = {"USERPROFILE": "C:/Users/me", "APPDATA": "C:/roam", "LOCALAPPDATA": "C:/local", "XDG_DATA_HOME": "/x"}
    assert config_dir(env, platform="win32") == Path("C:/roam/mylm")
    assert data_dir(env, platform="win32") == Path("C:/local/mylm")
    assert data_dir({"USERPROFILE": "C:/Users/me"}, platform="win32") == Path("C:/Users/me/AppData/Local/mylm")


def test_paths_config_dir_is_where_click_put_it_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    # The config dir used to be click.get_app_dir("mylm"): existing users' files must still be found.
    import click

    monkeypatch.setattr(sys, "platform", "linux")
    assert config_dir() == Path(click.get_app_dir("mylm"))
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config_dir() == Path(click.get_app_dir("mylm"))


def test_paths_imports_nothing_of_mylm_or_click(subprocess_env: dict[str, str]) -> None:
    tree = ast.parse(Path(paths.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert imported <= {"__future__", "collections.abc", "os", "sys", "pathlib", "typing"}
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
    probe = "import sys, mylm.core.paths; print(sorted(m for m in sys.modules if m == 'click' or m.startswith('mylm.')))"
    out = subprocess.run([sys.executable, "-c", probe], env=subprocess_env, capture_output=True, text=True, check=True)
    # The package root carries only its version beside it: nothing else of mylm, and no click.
    assert out.stdout.strip() == "['mylm._version', 'mylm.core', 'mylm.core.paths']"
