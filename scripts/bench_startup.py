"""Benchmark: `mylm --help` start-up time against `python -c "import click"`, measured in the same run.

Target (PRODUCT.md §6): within 1.3x of importing click. Prints medians over N runs of each command.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def median_seconds(command: list[str], runs: int) -> float:
    """Median wall-clock seconds of `runs` executions of `command` (after one warm-up run)."""
    subprocess.run(command, check=True, capture_output=True)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    commands = {
        "python -c 'import click' (baseline)": [sys.executable, "-c", "import click"],
        "python -m mylm --help": [sys.executable, "-m", "mylm", "--help"],
        "python -m mylm ask --help": [sys.executable, "-m", "mylm", "ask", "--help"],
    }
    script = shutil.which("mylm")
    if script:
        commands["mylm --help (console script)"] = [script, "--help"]
    results = {name: median_seconds(cmd, args.runs) for name, cmd in commands.items()}
    baseline = next(iter(results.values()))
    print(f"{'command':<40} {'median ms':>10} {'ratio':>7}")
    for name, seconds in results.items():
        print(f"{name:<40} {seconds * 1000:>10.1f} {seconds / baseline:>7.2f}")


if __name__ == "__main__":
    main()
