"""MCP tools against the real `mcp-server-time` from PyPI, over stdio, through mylm's own Tool protocol."""

from __future__ import annotations

import importlib.util
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from mylm.core.errors import ConfigError
from mylm.tools import ToolContext, run_tool
from mylm.tools.mcp import McpServerConfig, McpServers, open_mcp_servers, parse_mcp_config

_MISSING = [name for name in ("mcp", "mcp_server_time") if importlib.util.find_spec(name) is None]
needs_server = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"{' and '.join(_MISSING)} not installed: pip install 'mylm[mcp]' mcp-server-time",
)
MARKER = f"mylm-mcp-test-{secrets.token_hex(6)}"


@pytest.fixture(scope="module")
def time_server() -> Iterator[McpServers]:
    """One real time server for the module (starting Python and the SDK takes a second or two)."""
    config = McpServerConfig(
        "time",
        sys.executable,
        ("-m", "mcp_server_time", "--local-timezone", "UTC"),
        env={"MYLM_TEST_MARKER": MARKER},
        startup_timeout=60,
    )
    with McpServers([config]) as servers:
        yield servers


@needs_server
def test_mcp_lists_the_servers_tools_with_their_schemas(time_server: McpServers) -> None:
    assert time_server.errors == {}
    tools = {t.name: t for t in time_server.tools}
    assert sorted(tools) == ["time.convert_time", "time.get_current_time"]
    current = tools["time.get_current_time"]
    assert current.risk == "execute" and "from the MCP server 'time'" in current.description
    assert current.parameters["required"] == ["timezone"]


@needs_server
def test_mcp_call_goes_through_validation_and_returns_text(time_server: McpServers) -> None:
    current = next(t for t in time_server.tools if t.name == "time.get_current_time")
    arguments, problems = current.validate({"timezone": "Europe/Paris"})
    assert problems == []
    outcome = run_tool(current, arguments, ToolContext())
    assert not outcome.is_error
    assert json.loads(outcome.output)["timezone"] == "Europe/Paris"
    assert current.validate({})[1][0].startswith("missing required argument 'timezone'")


@needs_server
def test_mcp_server_errors_become_error_observations(time_server: McpServers) -> None:
    convert = next(t for t in time_server.tools if t.name == "time.convert_time")
    outcome = run_tool(
        convert,
        {"source_timezone": "Nowhere/Atlantis", "time": "12:00", "target_timezone": "UTC"},
        ToolContext(),
    )
    assert outcome.is_error and "Nowhere/Atlantis" in outcome.output


@needs_server
def test_mcp_call_respects_the_run_deadline(time_server: McpServers) -> None:
    current = time_server.tools[0]
    outcome = run_tool(current, {"timezone": "UTC"}, ToolContext(deadline=time.monotonic() - 1))
    assert outcome.is_error and "no time is left" in outcome.output


@needs_server
def test_mcp_servers_stop_with_their_owner(processes_with: Callable[[str], list[int]]) -> None:
    marker = f"mylm-mcp-stop-{secrets.token_hex(6)}"
    config = McpServerConfig(
        "t2", sys.executable, ("-m", "mcp_server_time"), env={"MYLM_TEST_MARKER": marker}, startup_timeout=60
    )
    servers = McpServers([config])
    tool_ = servers.start()[0]
    assert processes_with(marker)
    servers.close()
    assert processes_with(marker) == []
    outcome = run_tool(tool_, {"timezone": "UTC"}, ToolContext())
    assert outcome.is_error and "is not running" in outcome.output


@needs_server
def test_mcp_a_server_that_fails_to_start_is_named_with_its_stderr() -> None:
    broken = {
        "servers": {
            "broken": {
                "command": sys.executable,
                "args": ["-c", "import sys; sys.stderr.write('no such database'); sys.exit(3)"],
            }
        }
    }
    with pytest.raises(ConfigError, match=r"'broken' .*no such database"):
        open_mcp_servers(broken)
    missing = {"servers": {"gone": {"command": "/nonexistent/mcp-server"}}}
    with pytest.raises(ConfigError, match="'gone'"):
        open_mcp_servers(missing)


def test_mcp_config_is_checked(tmp_path: Path) -> None:
    [config] = parse_mcp_config(
        {
            "servers": {
                "time": {
                    "command": "uvx",
                    "args": ["mcp-server-time"],
                    "env": {"TZ": "UTC"},
                    "risk": "read",
                    "timeout": 5,
                }
            }
        }
    )
    assert config == McpServerConfig(
        "time", "uvx", ("mcp-server-time",), {"TZ": "UTC"}, None, "read", 5.0, 30.0
    )
    for bad in (
        {"servers": {"x": {"args": []}}},
        {"servers": {"x": {"command": "a", "args": "b"}}},
        {"servers": {"x": {"command": "a", "risk": "none"}}},
        {"servers": {"x y": {"command": "a"}}},
        {"servers": {"x": {"command": "a", "comand": "b"}}},
        {"servers": {"x": {"command": "a", "env": {"A": 1}}}},
        {"servers": {"x": {"command": "a", "timeout": 0}}},
        {"servers": []},
    ):
        with pytest.raises(ConfigError):
            parse_mcp_config(bad)
    assert McpServers([]).start() == []
