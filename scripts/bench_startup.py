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


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def median_seconds(commands: dict[str, list[str]], runs: int) -> dict[str, float]:
    """Median wall-clock seconds per command; runs are interleaved so machine noise hits every command alike."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        seconds(command)  # warm-up: file caches, pyc files
    for _ in range(runs):
        for name, command in commands.items():
            samples[name].append(seconds(command))
    return {name: statistics.median(values) for name, values in samples.items()}


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
    results = median_seconds(commands, args.runs)
    baseline = next(iter(results.values()))
    print(f"{'command':<40} {'median ms':>10} {'ratio':>7}")
    for name, seconds in results.items():
        print(f"{name:<40} {seconds * 1000:>10.1f} {seconds / baseline:>7.2f}")


if __name__ == "__main__":
    main()
