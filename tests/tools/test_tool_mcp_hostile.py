"""Broken and hostile MCP servers (tests/tools/mcp_fake.py, raw JSON-RPC over stdio): a server that never
answers `initialize` is stopped at the run's deadline and killed, a server printing non-JSON gives one clean
line (no traceback on the terminal), and whatever a server returns reaches the model redacted."""

from __future__ import annotations

import importlib.util
import secrets
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from mylm.core.errors import ConfigError
from mylm.tools import ToolContext, run_tool
from mylm.tools.mcp import open_mcp_servers

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="pip install 'mylm[mcp]'")
FAKE = str(Path(__file__).with_name("mcp_fake.py"))


def config(mode: str, marker: str = "") -> dict[str, object]:
    args = [FAKE, mode, *([marker] if marker else [])]
    return {"servers": {"fake": {"command": sys.executable, "args": args, "startup_timeout": 60}}}


def test_a_server_that_never_answers_initialize_stops_at_the_runs_deadline_and_is_killed(
    processes_with: Callable[[str], list[int]],
) -> None:
    marker = f"mcp-silent-{secrets.token_hex(6)}"
    with pytest.raises(ConfigError, match=r"did not start within .* \(the run's time limit\)"):
        open_mcp_servers(config("silent", marker), deadline=time.monotonic() + 1)
    assert processes_with(marker) == []  # it ignores its stdin closing: only the kill ended it


def test_a_server_printing_non_json_gives_one_clean_line(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        open_mcp_servers(config("garbage"), deadline=time.monotonic() + 1)
    message = str(raised.value)
    assert "\n" not in message and "Invalid JSON" in message and "this is not JSON-RPC at all" in message
    assert "Traceback" not in capfd.readouterr().err


def test_non_json_lines_around_answers_do_not_stop_a_server(capfd: pytest.CaptureFixture[str]) -> None:
    with open_mcp_servers(config("noisy"), deadline=time.monotonic() + 60) as servers:
        assert [t.name for t in servers.tools] == ["fake.leak"]
    assert "Traceback" not in capfd.readouterr().err


def test_mcp_results_reach_the_model_redacted() -> None:
    with open_mcp_servers(config("leaky"), deadline=time.monotonic() + 60) as servers:
        outcome = run_tool(servers.tools[0], {}, ToolContext())
    assert not outcome.is_error
    assert "PRIVATE KEY" not in outcome.output and "b3BlbnNzaC1rZXktdjEAAAAA" not in outcome.output
    assert "hunter2pass" not in outcome.output and "smtp_password: [REDACTED]" in outcome.output

