"""Through the CLI: the run's `--timeout` bounds the start of an MCP server that never answers initialize."""

from __future__ import annotations

import importlib.util
import json
import secrets
import sys
from pathlib import Path

import pytest
from cli_support import invoke

from mylm.testing import ScriptedLLM
from tests.tools.conftest import _processes_with

FAKE = str(Path(__file__).resolve().parents[1] / "tools" / "mcp_fake.py")


@pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="pip install 'mylm[mcp]'")
def test_mylm_ask_stops_a_silent_server_at_the_runs_timeout(tmp_path: Path) -> None:
    marker = f"mcp-cli-{secrets.token_hex(6)}"
    config = tmp_path / "config.toml"
    config.write_text(
        f"[mcp.servers.fake]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps([FAKE, 'silent', marker])}\nstartup_timeout = 30\n"
    )
    result = invoke(["ask", "--timeout", "2", "x"], ScriptedLLM(["y"]), env={"MYLM_CONFIG": str(config)})
    assert result.exit_code != 0
    assert "did not start within" in result.stderr and "(the run's time limit)" in result.stderr
    assert "Traceback" not in result.stderr and _processes_with(marker) == []
