"""Benchmark (issue 14): `mylm batch` against a loopback server that answers at 200 tokens/s per stream.

Runs the real command (`python -m mylm batch`) in a child process for each concurrency and reads the child's
own resource usage (os.wait4): wall time, tasks/min, tokens/s (from the usage in the result lines), mylm's CPU
per token (the marginal cost: a one-task run, which pays the start-up and the imports, is measured first and
subtracted) and peak RSS. Prints the speed-up of --concurrency 8 over the same tasks one by one (target >= 4x)
and the scaling table.

    python scripts/bench_batch.py [--tokens 100] [--rate 200] [--levels 1,4,16,64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_server import serve  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run(base_url: str, folder: Path, tasks: int, concurrency: int) -> dict[str, float]:
    """One `mylm batch` run in a child process; its wall time, CPU, peak RSS and tokens."""
    name = f"c{concurrency}-n{tasks}-{time.monotonic_ns()}"
    task_file = folder / f"{name}.jsonl"
    task_file.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"Question {i}?"}) + "\n"
                                 for i in range(tasks)))
    out = folder / f"{name}.out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(folder),
           "XDG_CONFIG_HOME": str(folder / "config"), "XDG_DATA_HOME": str(folder / "data"),
           "XDG_STATE_HOME": str(folder / "state")}
    command = [sys.executable, "-m", "mylm", "batch", str(task_file), "-o", str(out), "--base-url", base_url,
               "--provider", "openai", "-m", "bench", "--concurrency", str(concurrency)]
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench: mylm batch failed: {stderr.decode()[-2000:]}")
    records = [json.loads(line) for line in out.read_text().splitlines()] if tasks else []
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
            "tokens": sum(r["usage"]["completion_tokens"] for r in records), "tasks": len(records)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=100, help="tokens in each answer")
    parser.add_argument("--rate", type=float, default=200.0, help="tokens per second per stream")
    parser.add_argument("--levels", default="1,4,16,64")
    parser.add_argument("--tasks", type=int, default=32, help="tasks for the speed-up comparison")
    args = parser.parse_args()
    with serve("--mode", "rate", "--tokens", str(args.tokens), "--rate", str(args.rate)) as url, \
            tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        startup = run(url, folder, 1, 1)  # start-up and the first task's lazy imports
        print(f"server: {args.tokens} tokens per answer at {args.rate:g} tokens/s per stream "
              f"({args.tokens / args.rate:.2f} s per answer)")
        print(f"mylm batch with one task (start-up, imports): {startup['wall']:.2f} s wall, "
              f"{startup['cpu']:.2f} s CPU")
        one = run(url, folder, args.tasks, 1)
        eight = run(url, folder, args.tasks, 8)
        print(f"\n{args.tasks} tasks one by one: {one['wall']:.2f} s; "
              f"with --concurrency 8: {eight['wall']:.2f} s; speed-up {one['wall'] / eight['wall']:.2f}x "
              "(target >= 4x; whole commands, start-up included)")
        print(f"\n{'concurrency':>11} {'tasks':>6} {'wall s':>7} {'tasks/min':>10} {'tokens/s':>9} "
              f"{'CPU us/token':>13} {'peak RSS MB':>12}")
        for level in (int(x) for x in args.levels.split(",")):
            tasks = max(16, 4 * level)
            got = run(url, folder, tasks, level)
            print(f"{level:>11} {got['tasks']:>6} {got['wall']:>7.2f} "
                  f"{got['tasks'] * 60 / got['wall']:>10.1f} "
                  f"{got['tokens'] / got['wall']:>9.0f} "
                  f"{(got['cpu'] - startup['cpu']) / (got['tokens'] - startup['tokens']) * 1e6:>13.1f} "
                  f"{got['rss_mb']:>12.1f}")
        print("\n(tasks/min and tokens/s over the whole command; CPU per token is the marginal cost: "
              "the one-task run's CPU and tokens subtracted)")


if __name__ == "__main__":
    main()
