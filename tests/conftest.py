"""Shared test setup: every test runs with a private HOME, config, data and state dir, and no endpoint settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    # The MCP SDK binds `stdio_client`'s default errlog to whatever sys.stderr is when the module is first
    # imported. Imported first inside a CliRunner (a CLI test with MCP servers configured), it keeps click's
    # swapped-out stream, and every later SDK client in the session fails at `stderr.fileno()`. mylm itself
    # passes errlog explicitly; the tests' SDK clients use the default, so it is bound here, to the real stderr.
    import mcp.client.stdio  # noqa: F401
except ImportError:  # the mcp extra is optional; its tests skip without it
    pass

# CI runs each property test on examples fixed by the test's code (hypothesis's own `ci` profile: derandomised, no
# example database), so whether a commit lands depends on the commit alone; runs elsewhere keep drawing new
# examples, which is where new failures are found (and then kept as explicit examples).
if os.environ.get("MYLM_HYPOTHESIS_PROFILE"):
    from hypothesis import settings

    settings.load_profile(os.environ["MYLM_HYPOTHESIS_PROFILE"])

_ENDPOINT_PREFIXES = ("MYLM_", "OPENAI_", "OLLAMA_", "ANTHROPIC_", "GEMINI_", "GOOGLE_API_KEY")


@pytest.fixture(autouse=True)
def isolated_user_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME and the XDG dirs at a temp dir, clear endpoint variables and run from an empty workspace."""
    home = tmp_path / "home"
    for sub in ("config", "data", "state", "cache"):
        (home / sub).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("NO_COLOR", "1")
    for name in list(os.environ):
        if name.startswith(_ENDPOINT_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    return workspace

from tests.support import REPO_ROOT


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for running mylm in a child process: the checkout importable, the isolation kept."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env
