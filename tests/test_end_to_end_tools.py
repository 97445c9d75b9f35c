"""The builtin tools and an MCP server's tools, used by a model through `mylm ask`, really run."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mylm.cli import cli
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM
from mylm.core.types import ToolCall


def call(name: str, **arguments: object) -> str:
    return f"Using {name}.\n" + format_tool_call(ToolCall(name, arguments))


def ask(llm: ScriptedLLM, *args: str) -> str:
    result = CliRunner().invoke(cli, ["ask", *args, "do it"], obj={"llm": llm, "terminal": lambda: None},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_end_to_end_every_builtin_tool_through_ask() -> None:
    llm = ScriptedLLM([
        call("write_file", path="notes/a.txt", content="alpha\nbeta\n"),
        call("edit_file", path="notes/a.txt", old="beta", new="gamma"),
        call("read_file", path="notes/a.txt"),
        call("list_dir", path="notes"),
        call("remember", text="the deploy host is web-7"),
        call("search_memory", query="deploy host"),
        call("execute_command", command="wc -l < notes/a.txt"),
        "All seven tools worked.",
    ])
    assert ask(llm, "--yes") == "All seven tools worked.\n"
    observations = [r.messages[-1].content for r in llm.requests[1:]]
    assert Path("notes/a.txt").read_text() == "alpha\ngamma\n"
    assert "alpha" in observations[2] and "gamma" in observations[2]
    assert "a.txt" in observations[3]
    assert "web-7" in observations[5]
    assert "2" in observations[6].split("\n", 2)[-1]
    assert not any("Error from" in o for o in observations), observations


def test_end_to_end_reads_run_without_approval_but_writes_are_refused_without_a_terminal() -> None:
    Path("data.txt").write_text("payload-123\n")
    llm = ScriptedLLM([call("read_file", path="data.txt"), call("write_file", path="out.txt", content="x"), "ok"])
    ask(llm)
    assert "payload-123" in llm.requests[1].messages[-1].content
    assert "no one can be asked" in llm.requests[2].messages[-1].content and not Path("out.txt").exists()


def test_end_to_end_file_tools_stay_in_the_workspace() -> None:
    secret = Path(os.environ["HOME"]) / "secret.txt"
    secret.write_text("outside-secret")
    llm = ScriptedLLM([call("read_file", path=str(secret)), call("read_file", path="../home/secret.txt"), "no"])
    ask(llm, "--yes")
    for request in llm.requests[1:]:
        assert "outside-secret" not in request.messages[-1].content


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mcp_server_time") is None,
                    reason="mcp-server-time is not installed (pip install -e '.[test]')")
def test_end_to_end_mcp_server_tool_through_ask() -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'[mcp.servers.time]\ncommand = "{sys.executable}"\nargs = ["-m", "mcp_server_time", "--local-timezone", "UTC"]\n'
    )
    llm = ScriptedLLM([call("time.get_current_time", timezone="Asia/Tokyo"), "It is known."])
    assert ask(llm, "--yes") == "It is known.\n"
    assert "time.get_current_time" in llm.requests[0].messages[0].content  # listed in the system prompt
    observation = llm.requests[1].messages[-1].content
    assert "Asia/Tokyo" in observation and "datetime" in observation, observation
