"""Benchmark (PRODUCT.md §6 "Loop overhead"): mylm's own cost per iteration beyond the HTTP exchange.

An agent runs N tool-call iterations against a zero-latency loopback OpenAI server (a no-op tool, so tool time
is ~0). The exact requests it sent are then replayed straight through the provider against the same server;
the difference per iteration is the loop's overhead: parsing, validation, templates, events, history. Also
prints the same loop against the in-memory ScriptedLLM (no HTTP at all). Target: <= 3 ms per iteration.

    python scripts/bench_loop.py [--iterations 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: mylm and the test servers

from mylm import Agent, tool  # noqa: E402
from mylm.llm import LLM, LLMChunk, LLMRequest  # noqa: E402
from mylm.protocol.parser import format_tool_call  # noqa: E402
from mylm.providers import Endpoint, create_llm  # noqa: E402
from mylm.testing import ScriptedLLM  # noqa: E402
from mylm.core.types import ToolCall  # noqa: E402
from tests.providers.servers import OpenAIServer  # noqa: E402


@tool
def noop(value: int) -> str:
    """Return the value."""
    return str(value)


def script(iterations: int) -> list[str]:
    turns = [
        f"Step {i}: checking the value.\n" + format_tool_call(ToolCall("noop", {"value": i}))
        for i in range(iterations - 1)
    ]
    return [*turns, "All values checked."]


class Recording:
    """Wraps an LLM and keeps every request, so the same exchanges can be replayed without the agent."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.requests: list[LLMRequest] = []

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        self.requests.append(request)
        return self.llm.stream(request)


def agent_seconds(llm: LLM, iterations: int) -> float:
    agent = Agent(llm, [noop], max_iterations=iterations, timeout=600)
    started = time.perf_counter()
    result = agent.run("Check every value.")
    elapsed = time.perf_counter() - started
    if result.iterations_used != iterations or result.final_text != "All values checked.":
        raise SystemExit(f"bench: unexpected run {result.stop_reason} after {result.iterations_used}")
    return elapsed


def replay_seconds(llm: LLM, requests: list[LLMRequest]) -> float:
    started = time.perf_counter()
    for request in requests:
        stream = llm.stream(request)
        for _ in stream:
            pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.iterations
    overheads, agent_runs, replays = [], [], []
    with OpenAIServer(delay=0.0, pings=False) as server:
        endpoint = Endpoint(provider="openai", base_url=server.base_url, model="bench")
        for _ in range(args.repeats):
            server.script(script(n))
            recording = Recording(create_llm(endpoint))
            t_agent = agent_seconds(recording, n)
            server.script(script(n))
            t_http = replay_seconds(create_llm(endpoint), recording.requests)
            agent_runs.append(t_agent)
            replays.append(t_http)
            overheads.append((t_agent - t_http) / n)
    memory = [agent_seconds(ScriptedLLM(script(n), chunk_size=4), n) / n for _ in range(args.repeats)]
    print(f"loop overhead: {n} iterations per run, median of {args.repeats} runs")
    print(f"  agent over loopback HTTP:          {statistics.median(agent_runs) / n * 1000:7.2f} ms per iteration")
    print(f"  same requests, provider only:      {statistics.median(replays) / n * 1000:7.2f} ms per iteration")
    print(f"  overhead (agent - provider only):  {statistics.median(overheads) * 1000:7.2f} ms per iteration"
          "  (target: <= 3 ms)")
    print(f"  agent over ScriptedLLM (no HTTP):  {statistics.median(memory) * 1000:7.2f} ms per iteration")


if __name__ == "__main__":
    main()
