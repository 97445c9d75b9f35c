"""`mylm mcp` driving a real small model (SmolLM2-135M-Instruct) served by llama-cpp-python, under the grammar.

What the tiny model answers is not asserted; that the delegated run keeps the protocol every turn, ends cleanly
and reports it through the MCP SDK is. Models and engine come from scripts/install_models.sh and
scripts/install_engine.sh; without them the test skips with the reason (MYLM_REQUIRE_MODELS=1 makes it fail)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.delegate.mcp_support import child_env, mcp_sessions, stdio
from tests.providers.engine_support import SERVER_NEEDS, EngineServer
from tests.support import REQUIRE_MODELS, need_real_model

pytestmark = [pytest.mark.engine, pytest.mark.slow]

MODEL = "smollm2-135m"


def test_a_delegated_task_on_a_real_model_under_the_grammar_ends_cleanly(isolated_user_state: Path) -> None:
    if importlib.util.find_spec("mcp") is None:
        why = "the mcp SDK is not installed: pip install 'mylm[mcp]'"
        pytest.fail(why) if REQUIRE_MODELS else pytest.skip(why)
    model = need_real_model(MODEL, needs=SERVER_NEEDS)
    import anyio
    from mcp import Client

    (isolated_user_state / "notes.txt").write_text("The launch code is 4417.\n")
    server = EngineServer(model, n_ctx=4096, threads=2)
    try:
        server.wait_ready(timeout=180)
        args = ["--base-url", server.base_url, "--provider", "openai", "-m", "smollm2", "--constrain", "grammar",
                "--max-iterations", "2", "--timeout", "900"]
        progress: list[str | None] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(message)

        async def main() -> Any:
            # A small output limit, as the other real-model tests use: two shared cores run this model slowly.
            env = child_env(MYLM_MAX_TOKENS="96")
            async with Client(stdio(args, env, isolated_user_state), read_timeout_seconds=1200) as client:
                return await client.call_tool(
                    "run_task", {"prompt": "Read notes.txt and tell me the launch code."},
                    progress_callback=on_progress)

        result = anyio.run(main)
    finally:
        server.stop()
    report = result.structured_content
    print(report)
    assert not result.is_error
    # The run ends by itself (two shared cores may spend the whole budget on this model: a timeout is a clean
    # ending too), and under the grammar every turn the model finished was a call or an answer, never a format
    # error sent back.
    # An answer cut at the 96-token cap is a clean ending too (the tiny model often writes long ones).
    assert report["stop_reason"] in ("final_answer", "max_iterations", "max_tokens", "timeout"), report
    assert report["tool_calls"] or report["answer"], report
    assert 1 <= report["iterations"] <= 2 and progress[0] == "iteration 1/2"
    (records,) = mcp_sessions(Path(os.environ["XDG_DATA_HOME"]))
    assert records[-1]["stop_reason"] == report["stop_reason"]
    # The grammar lets a call name a tool that is not offered, with any object for its arguments (the model says
    # what it wanted, and is corrected), so a "Format error" about what a call holds (a JSON Schema written as
    # its arguments) may follow: never one about its form. Each one answers a complete block whose parameters
    # are a JSON object.
    messages = [r for r in records if r.get("type") == "message"]
    for before, after in itertools.pairwise(messages):
        if "Format error" in after["content"]:
            assert before["role"] == "assistant", after
            block = _BLOCK.search(before["content"])
            assert block is not None, before["content"]
            assert isinstance(json.loads(block.group(2)), dict), before["content"]


#: One call as the grammar writes it: its name, then its parameters (the JSON between the tags).
_BLOCK = re.compile(r"<tool_code>\n<name>([^<]*)</name>\n<parameters>\n(.*?)\n</parameters>\n</tool_code>", re.DOTALL)
