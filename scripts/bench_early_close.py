"""Benchmark (PRODUCT.md §6 "Early close"): a tool-call turn costs the same whether or not the server honours stops.

Three loopback OpenAI servers stream the same tool-call turn at the same token rate: one honours the stop strings,
one ignores them and keeps generating forever, and (for scale) one ignores them and runs on for a finite ramble
that a client without early close reads to the end. Each turn goes through the agent's own turn code
(`mylm.agent.turn.stream_turn`: the parser decides when the call is complete and the stream is closed then).
Prints the median wall time per turn for each, and the ratio the target is about.

    python scripts/bench_early_close.py [--turns 15] [--token-delay 0.002]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Generator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: mylm and the test servers

from mylm.llm import TextChunk  # noqa: E402
from mylm.protocol.parser import parse_completion  # noqa: E402
from mylm.providers import Endpoint, create_llm  # noqa: E402
from mylm.agent.turn import ModelTurn, stream_turn  # noqa: E402
from mylm.core.types import Event  # noqa: E402
from tests.providers.helpers import TOOL_CALL, request  # noqa: E402
from tests.providers.servers import Completion, OpenAIServer  # noqa: E402

TURN = f"I will list the files first.\n{TOOL_CALL}"
RAMBLE = "\n<observation>\nmade-up output line\n</observation>\n" * 40


def one_turn(base_url: str, *, close_early: bool = True, reasoning_open: bool | None = False) -> float:
    """Seconds for one turn: the agent's turn code, or (`close_early=False`) the stream read to its end."""
    llm = create_llm(Endpoint(provider="openai", base_url=base_url, model="bench"))
    started = time.perf_counter()
    if close_early:
        turn = stream_turn(llm, request(timeout=60), multiple_calls=False, shown=[],
                           reasoning_open=reasoning_open)
        parsed = consume(turn).parsed
    else:
        text = "".join(c.text for c in llm.stream(request(timeout=60)) if isinstance(c, TextChunk))
        parsed = parse_completion(text)
    elapsed = time.perf_counter() - started
    if [c.name for c in parsed.tool_calls][:1] != ["execute_command"]:
        raise SystemExit(f"bench: unexpected turn {parsed!r}")
    return elapsed


def consume(turn_events: Generator[Event, None, ModelTurn]) -> ModelTurn:
    """Drain the turn's events and return the turn."""
    while True:
        try:
            next(turn_events)
        except StopIteration as stop:
            return stop.value


def measure(
    server: OpenAIServer, completion: Completion, turns: int, *, close_early: bool = True,
    reasoning_open: bool | None = False,
) -> float:
    """Median seconds per turn over `turns` turns (after one warm-up). `reasoning_open` False is the agent once a
    reply has shown the template does not open `<think>`; None its first turn, which holds a complete call
    until the reply shows whether it was a draft (docs/parser.md, "Reasoning")."""
    server.script([completion] * (turns + 1))
    one_turn(server.base_url)
    return statistics.median(
        one_turn(server.base_url, close_early=close_early, reasoning_open=reasoning_open) for _ in range(turns)
    )


def main() -> None:
    """Run the three scenarios and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--token-delay", type=float, default=0.002, help="seconds between streamed pieces")
    args = parser.parse_args()
    with (
        OpenAIServer(delay=args.token_delay) as honours,
        OpenAIServer(delay=args.token_delay, stop_mode="ignore") as endless,
        OpenAIServer(delay=args.token_delay, stop_mode="ignore") as rambles,
    ):
        t_honours = measure(honours, Completion(TURN), args.turns)
        t_endless = measure(endless, Completion(TURN, endless=True), args.turns)
        t_first = measure(endless, Completion(TURN, endless=True), args.turns, reasoning_open=None)
        t_ramble = measure(rambles, Completion(TURN + RAMBLE), args.turns, close_early=False)
        disconnects = endless.disconnected.is_set()
    print(
        f"early close: {args.turns} turns, {args.token_delay * 1000:g} ms per streamed piece (median per turn)"
    )
    print(f"  server honours stops:              {t_honours * 1000:8.1f} ms")
    print(f"  server ignores stops, endless:     {t_endless * 1000:8.1f} ms  (client closed: {disconnects})")
    print(f"  the same, template not known yet:  {t_first * 1000:8.1f} ms  (a run's first turn holds its call)")
    print(f"  ignores stops, read to the end:    {t_ramble * 1000:8.1f} ms  (what early close saves)")
    print(f"  ratio endless / honours:           {t_endless / t_honours:8.2f}  (target: <= 1.0 plus noise)")


if __name__ == "__main__":
    main()
