"""`mylm eval --mode protocol,protocol-hermes`: two tool dialects in one table, against a loopback OpenAI-compatible
server streaming scripted replies in small delayed chunks (what each mode sends, what it reads back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mylm.core.types import ToolCall
from mylm.protocol.parser import format_tool_call
from tests.cli.cli_support import invoke
from tests.providers.servers import OpenAIServer

DATA = Path(__file__).resolve().parent.parent / "data" / "bfcl"
MYLM = format_tool_call(ToolCall("calculate_triangle_area", {"base": 10, "height": 5}))
#: As Qwen2.5-Coder 0.5B wrote it under the hermes grammar: the call's JSON at once, its tag left out.
HERMES = '{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}\n</tool_call>'


def test_protocol_and_protocol_hermes_compare_the_dialects_in_one_table() -> None:
    with OpenAIServer([MYLM, HERMES, MYLM]) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "m", "--bfcl-data", str(DATA), "--category",
                         "simple_python", "--limit", "1", "--mode", "protocol,protocol-hermes,protocol-mylm",
                         "--json"])
        bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    items = [line for line in lines if line["type"] == "item"]
    assert [(i["mode"], i["passed"]) for i in items] == [
        ("protocol", True), ("protocol-hermes", True), ("protocol-mylm", True)]
    assert items[1]["detail"]["calls"] == [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}]
    mylm, hermes, named = (b["messages"][0]["content"] for b in bodies)
    assert "<tool_code>" in mylm and "<tools>" not in mylm and named == mylm
    assert "<tools>\n{\"type\": \"function\"" in hermes and "<tool_code>" not in hermes
    assert "<tool_call>" in bodies[1]["grammar"] and "<tool_code>" not in bodies[1]["grammar"]
    rows = {(r["category"], r["mode"]) for r in lines if r["type"] == "row"}
    assert {("simple_python", "protocol"), ("simple_python", "protocol-hermes")} <= rows


def test_tool_dialect_sets_what_protocol_speaks_and_all_keeps_its_four_modes() -> None:
    with OpenAIServer([HERMES]) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "m", "--bfcl-data", str(DATA), "--category",
                         "simple_python", "--limit", "1", "--mode", "protocol", "--tool-dialect", "hermes",
                         "--json"])
        (body,) = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.exit_code == 0, result.stderr
    assert "<tools>" in body["messages"][0]["content"]
    item: dict[str, Any] = next(json.loads(x) for x in result.stdout.splitlines() if '"item"' in x)
    assert item["passed"]
    from mylm.cli.eval import MODE_NAMES

    assert MODE_NAMES == ("protocol", "protocol-nogrammar", "native", "serve")
    bad = invoke(["eval", "--base-url", "http://127.0.0.1:9", "-m", "m", "--bfcl-data", str(DATA), "--mode",
                  "protocol-json"])
    assert bad.exit_code != 0 and "protocol-hermes" in bad.stderr and "Traceback" not in bad.stderr
