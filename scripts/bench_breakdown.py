"""Benchmark (issue 32 "Speed II"): where one step of a 20-step run goes, seam by seam.

The same run as `bench_stream.py --only steps` (a loopback server answering each request at once with a call of
`echo step N`; read-only, as the policy grants it; confined by the sandbox; the CLI's printer and redaction),
with a timestamp taken at each seam of mylm: the request sent, the answer's headers, the turn read, the
approval decision, the sandbox prepared, the command started, its exit report, the observation rendered, the
next request. Prints the median of each interval over every step of `--runs` runs, and the server's own
measure of the gap between two requests. With `--profile`, a cProfile of one more run (the loop's thread and
the tool's worker thread merged), sorted by own time.

    python scripts/bench_breakdown.py [--runs 5] [--steps 20] [--profile] [--clock cpu]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import itertools
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_stream
from bench_server import serve, stats

from mylm.agent import tool_runner
from mylm.agent.step import ModelStep
from mylm.approval import approval
from mylm.providers import engine
from mylm.sandbox import (
    confine,
    launcher,
    protect_process,
)
from mylm.tools import (
    bounded,
    procs,
    shell,
)

marks: list[tuple[str, float]] = []
#: What a seam is timed with: wall time, or (`--clock cpu`) the process's CPU time, every thread's, which a
#: loaded machine inflates far less (the commands' own CPU is not counted: they are other processes).
clock: Callable[[], float] = time.perf_counter


def mark(tag: str) -> None:
    marks.append((tag, clock()))


def around(owner: Any, name: str, before: str, after: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        mark(before)
        try:
            return original(*args, **kwargs)
        finally:
            mark(after)

    setattr(owner, name, timed)


def instrument() -> None:
    around(engine, "send", "send", "headers")
    around(ModelStep, "judge", "judge", "judged")
    around(approval, "decide", "decide", "decided")
    around(tool_runner, "run_bounded", "bounded", "bounded_done")
    around(shell, "run_command", "command", "command_done")
    around(shell._Launched, "start", "start", "started")
    around(shell, "format_result", "format", "formatted")
    around(tool_runner.ToolRunner, "_observe", "observe", "observed")
    reports = launcher.Child.read_reports

    def read_reports(self: launcher.Child) -> None:
        reports(self)
        if self.returncode is not None:
            mark("exit_report")

    launcher.Child.read_reports = read_reports  # type: ignore[method-assign]
    prepare = confine.Sandbox.launch

    @contextlib.contextmanager
    def launch(self: confine.Sandbox, *args: Any, **kwargs: Any) -> Iterator[Any]:
        mark("prepare")
        with prepare(self, *args, **kwargs) as prepared:
            mark("prepared")
            yield prepared
            mark("release")
        mark("released")

    confine.Sandbox.launch = launch  # type: ignore[method-assign,assignment]


#: (row, from, to) of one step; "next send" is the following request's.
ROWS = [
    ("HTTP: request sent to the answer's headers", "send", "headers"),
    ("the stream read and parsed into a turn", "headers", "judged"),
    ("the turn to the approval decision", "judged", "decide"),
    ("approval decision (policy, tree-sitter parse)", "decide", "decided"),
    ("handing the call to the tool's worker thread", "decided", "prepare"),
    ("sandbox: the kept launcher, the command's layer", "prepare", "prepared"),
    ("the command's pipes, sent to a spare init", "command", "started"),
    ("the confined command: sent to its exit report", "started", "exit_report"),
    ("the exit report to the command's clean-up done", "exit_report", "command_done"),
    ("sandbox released (TMPDIR, ruleset)", "release", "released"),
    ("observation's text (explain, redact)", "released", "formatted"),
    ("back on the loop's thread", "formatted", "bounded_done"),
    ("observation rendered (template)", "observe", "observed"),
    ("events, printer, history, the next request built", "observed", "next send"),
]


def breakdown(url: str, folder: Path, steps: int, runs: int) -> None:
    rows: dict[str, list[float]] = collections.defaultdict(list)
    gaps: list[float] = []
    for _ in range(runs):
        marks.clear()
        before = len(stats(url))
        bench_stream.mylm_steps(url, steps, folder)
        gaps.append(statistics.median(bench_stream.gaps(url, before)))
        seen: list[dict[str, float]] = [{}]
        for tag, at in marks:
            if tag == "send" and seen[-1]:
                seen.append({})
            seen[-1].setdefault(tag, at)
        for step, following in itertools.pairwise(seen[1:]):  # the first request has no step before it
            step = {**step, "next send": following["send"]}
            for name, start, end in ROWS:
                if start in step and end in step:
                    rows[name].append((step[end] - step[start]) * 1e3)
            rows["whole: the turn read to the next request sent"].append((step["next send"] - step["judged"]) * 1e3)
    print(f"{steps}-step run, {runs} runs: server-side gap between two requests, median of the runs' medians "
          f"{statistics.median(gaps) * 1e3:.2f} ms (runs: {', '.join(f'{g * 1e3:.2f}' for g in gaps)})")
    print(f"{'median per step':<58} {'ms':>7}")
    for name, values in rows.items():
        print(f"{name:<58} {statistics.median(values):>7.3f}")


def profile(url: str, folder: Path, steps: int) -> None:
    """cProfile of one run: the loop's thread, and each tool call on its worker thread, merged."""
    profiles: list[cProfile.Profile] = []
    run = bounded._Workers.run

    def profiled(self: bounded._Workers, work: Callable[[], None], name: str) -> None:
        def measured() -> None:
            one = cProfile.Profile()
            profiles.append(one)
            one.runcall(work)

        run(self, measured, name)

    bounded._Workers.run = profiled  # type: ignore[method-assign]
    main = cProfile.Profile()
    main.runcall(bench_stream.mylm_steps, url, steps, folder)
    bounded._Workers.run = run  # type: ignore[method-assign]
    merged = pstats.Stats(main)
    for one in profiles:
        merged.add(one)
    merged.sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one run")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time each seam by the wall clock or by this process's CPU time")
    args = parser.parse_args()
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    procs.become_subreaper()
    protect_process()
    instrument()
    with serve("--mode", "steps", "--steps", str(args.steps)) as url, tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        bench_stream.mylm_steps(url, args.steps, folder)  # warm-up: the launcher, the templates
        breakdown(url, folder, args.steps, args.runs)
        if args.profile:
            profile(url, folder, args.steps)


if __name__ == "__main__":
    main()
