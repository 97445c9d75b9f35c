"""Benchmark the streaming parser: MB/s for 10 KB, 100 KB and 1 MB completions, whole and in 4-character chunks.

Usage: python scripts/bench_parser.py [--quick] [--repair]

Three completion shapes: `answer` (a Markdown answer with inline code and fences, no call), `call` (a short
thought, then one write_file call whose JSON content is source code, escapes and quotes included) and
`openers` (nothing but unclosed `<tool_code>` openers, the ReDoS shape from THREATS T6). Beside each, a naive
baseline re-scans the accumulated text with a regex on every chunk; it is quadratic, so it runs under a time
budget and larger sizes are extrapolated from the measured size (marked `~`).

A second table parses whole completions with `tools=` (the agent's case: drifted formats are read against the
registry once the reply is complete), adding two floods of drifted openers, to show that recovery stays linear.

`--repair` also measures the json-repair package (if installed) against our reader on the cases that must not
be corrupted and the cases that should be repaired.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mylm.protocol.parser import StreamParser, parse_completion

SIZES = (10_000, 100_000, 1_000_000)
CHUNK = 4
BASELINE_BUDGET = 2.0  # seconds of naive re-scanning per shape before extrapolating

_PROSE = (
    "The build fails because `make` runs the `lint` target first, and `ruff` finds an unused import in "
    "`mylm/cli.py`. Here is the relevant part of the log:\n\n```text\nmylm/cli.py:3:1: F401 `os` imported but "
    "unused\n```\n\nThere are three ways to fix it:\n\n1. Remove the import (the simplest).\n2. Use it, if it "
    "was meant for `os.environ`.\n3. Mark it with `# noqa: F401` when a re-export is intended.\n\n"
)
_CODE = 'def handler(event):\n\tif event["kind"] == "x" and "\\\\" in event["path"]:\n\t\treturn f"{event!r}"\n'


def completion(shape: str, size: int) -> str:
    """A synthetic completion of about `size` characters."""
    if shape == "answer":
        return (_PROSE * (size // len(_PROSE) + 1))[:size]
    if shape == "openers":
        return ("<tool_code>" * (size // 11 + 1))[:size]
    head = "I will write the handler now.\n<tool_code>\n<name>write_file</name>\n<parameters>\n"
    content = (_CODE * (size // len(_CODE) + 1))[: max(0, size - len(head) - 60)]
    args = json.dumps({"path": "src/handler.py", "content": content})
    return f"{head}{args}\n</parameters>\n</tool_code>"


def parse_whole(text: str) -> None:
    parse_completion(text)


TOOLS = {"write_file": ["path", "content"], "list_dir": ["path"], "read_file": ["path"]}
DRIFT_UNITS = {"tooltags": "<list_dir>\n<path>src</path>\n", "react": "Action: list_dir\nAction Input: {}\n"}


def parse_with_tools(text: str) -> None:
    parse_completion(text, tools=TOOLS)


def run_tools(quick: bool) -> None:
    """Whole-text MB/s with the registry given, including drift recovery at the end of the reply."""
    sizes = SIZES[:2] if quick else SIZES
    print(f"{'tools=':8} {'size':>9} {'whole MB/s':>11}")
    for shape in ("answer", "call", "openers", *DRIFT_UNITS):
        for size in sizes:
            unit = DRIFT_UNITS.get(shape)
            text = unit * (size // len(unit)) if unit else completion(shape, size)  # whole units: no cut-off tag
            whole = best_of(parse_with_tools, text, 5 if size <= 100_000 else 3)
            print(f"{shape:8} {size:>9,} {mbps(size, whole):>11.1f}")


def parse_chunked(chunks: list[str]) -> None:
    parser = StreamParser()
    feed = parser.feed
    for chunk in chunks:
        feed(chunk)
    parser.close()


_NAIVE = re.compile(r"<tool_code>(.*?)</tool_code>|<think>(.*?)</think>", re.DOTALL)


def naive_chunked(text: str, budget: float) -> float | None:
    """Re-scan everything received so far on each chunk; None when it exceeds the budget."""
    start = time.perf_counter()
    received = ""
    for i in range(0, len(text), CHUNK):
        received += text[i : i + CHUNK]
        _NAIVE.findall(received)
        if time.perf_counter() - start > budget:
            return None
    return time.perf_counter() - start


def best_of(fn: Callable[[Any], None], text: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t)
    return min(times)


def mbps(size: int, seconds: float) -> float:
    return size / seconds / 1e6


def run(quick: bool) -> None:
    sizes = SIZES[:2] if quick else SIZES
    print(f"{'shape':8} {'size':>9} {'whole MB/s':>11} {'4-char MB/s':>12} {'ratio':>6} {'naive 4-char MB/s':>18}")
    for shape in ("answer", "call", "openers"):
        measured: tuple[int, float] | None = None
        for size in sizes:
            text = completion(shape, size)
            repeat = 7 if size <= 100_000 else 3
            whole = best_of(parse_whole, text, repeat)
            # The chunks arrive from the network already cut; cutting them is not the parser's work.
            chunks = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
            chunked = best_of(parse_chunked, chunks, repeat)
            naive = naive_chunked(text, BASELINE_BUDGET)
            if naive is not None:
                measured, naive_text = (size, naive), f"{mbps(size, naive):.2f}"
            elif measured is not None:  # quadratic: time grows with the square of the size
                estimate = measured[1] * (size / measured[0]) ** 2
                naive_text = f"~{mbps(size, estimate):.4f}"
            else:
                naive_text = "> budget"
            print(f"{shape:8} {size:>9,} {mbps(size, whole):>11.1f} {mbps(size, chunked):>12.1f} "
                  f"{chunked / whole:>6.2f} {naive_text:>18}")


REPAIR_CASES: list[tuple[str, str, object]] = [
    # (what, input, expected decoded object); the first group must not be corrupted
    ("windows path", r'{"path": "C:\temp\new"}', {"path": "C:\\temp\\new"}),
    ("windows path, invalid escape", r'{"path": "C:\Users\me\temp"}', {"path": "C:\\Users\\me\\temp"}),
    ("apostrophe in single quotes", "{'text': 'what's up'}", {"text": "what's up"}),
    ("apostrophe in double quotes", '{"text": "what\'s up"}', {"text": "what's up"}),
    ("literal \\n inside code", r'{"code": "print(\"a\\nb\")"}', {"code": 'print("a\\nb")'}),
    ("regex with \\d", r'{"pattern": "\d+\.\d+"}', {"pattern": r"\d+\.\d+"}),
    ("raw newline and tab", '{"code": "a\n\tb"}', {"code": "a\n\tb"}),
    ("trailing comma", '{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
    ("python literals", "{'a': True, 'b': None}", {"a": True, "b": None}),
    ("comment", '{"a": 1, // why\n "b": 2}', {"a": 1, "b": 2}),
    ("stray closing brace", '{"a": 1}}', {"a": 1}),
    ("literal \\n between tokens", r'{"a": 1,\n "b": 2}', {"a": 1, "b": 2}),
    ("unquoted key", '{command: "ls"}', {"command": "ls"}),
]


def run_repair() -> None:
    """Score our reader and json-repair on the repair cases: decoded exactly as expected, or not."""
    from mylm.protocol.jsonrepair import JSONRepairError, loads

    readers: dict[str, Callable[[str], object]] = {"mylm.protocol.jsonrepair": lambda s: loads(s)[0]}
    try:
        import json_repair  # type: ignore[import-not-found]

        readers["json-repair " + getattr(json_repair, "__version__", "")] = lambda s: json_repair.loads(s)
    except ImportError:
        print("json-repair is not installed (pip install json-repair); measuring ours only")
    for label, read in readers.items():
        ok = 0
        for what, text, expected in REPAIR_CASES:
            try:
                got = read(text)
            except (JSONRepairError, ValueError) as error:
                got = f"error: {error}"
            ok += got == expected
            if got != expected:
                print(f"  {label}: {what}: {text!r} -> {got!r}")
        print(f"{label}: {ok}/{len(REPAIR_CASES)} exact")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 KB and 100 KB only")
    parser.add_argument("--repair", action="store_true", help="also compare JSON repair against json-repair")
    args = parser.parse_args()
    run(args.quick)
    print()
    run_tools(args.quick)
    if args.repair:
        print()
        run_repair()


if __name__ == "__main__":
    main()
