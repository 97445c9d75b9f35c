"""Real broken model outputs (tests/data/parser/, one quirk per file) parse as the file says, however chunked.

File format: `# key: value` header lines, then `# ---`, then the completion verbatim (one trailing newline,
added by the file, is not part of it). Keys: `quirk` and `source` (where the quirk comes from), `expect` (call,
answer or error), `call` (JSON {"name", "arguments"}, one line per expected call, in order), `answer` (a JSON
string, the exact final answer), `error` (a JSON string the error must contain), `reasoning_open` (true when
the prompt ended inside <think>), `tools` (JSON: the tool names, or name to argument names, in play; drifted
formats are read against them), `multiple_calls` (false for one call per turn).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mylm.protocol.parser import (
    CallParsed,
    ParsedTurn,
    ReasoningEvent,
    StreamParser,
    TextEvent,
    parse_completion,
)

CORPUS = Path(__file__).parent / "data" / "parser"


@dataclass(frozen=True)
class Case:
    name: str
    quirk: str
    source: str
    expect: str
    text: str
    calls: tuple[dict[str, Any], ...] = ()
    answer: str | None = None
    error: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def load(path: Path) -> Case:
    raw = path.read_text(encoding="utf-8")
    head, sep, text = raw.partition("# ---\n")
    assert sep, f"{path.name}: no '# ---' line"
    text = text.removesuffix("\n")
    fields: dict[str, list[str]] = {}
    for line in head.splitlines():
        key, _, value = line.removeprefix("# ").partition(": ")
        fields.setdefault(key, []).append(value)
    return Case(
        name=path.stem,
        quirk=fields["quirk"][0],
        source=fields["source"][0],
        expect=fields["expect"][0],
        text=text,
        calls=tuple(json.loads(c) for c in fields.get("call", [])),
        answer=json.loads(fields["answer"][0]) if "answer" in fields else None,
        error=json.loads(fields["error"][0]) if "error" in fields else None,
        options=_options(fields),
    )


def _options(fields: dict[str, list[str]]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if "reasoning_open" in fields:
        options["reasoning_open"] = fields["reasoning_open"][0] == "true"
    if "tools" in fields:
        options["tools"] = json.loads(fields["tools"][0])
    if "multiple_calls" in fields:
        options["multiple_calls"] = fields["multiple_calls"][0] == "true"
    return options


CASES = [load(p) for p in sorted(CORPUS.glob("*.txt"))]


def test_corpus_is_present_and_documented() -> None:
    assert len(CASES) >= 40
    for case in CASES:
        assert case.quirk and case.source, case.name
        assert case.expect in ("call", "answer", "error"), case.name
        assert (case.expect == "call") == bool(case.calls), case.name


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_parses_as_recorded(case: Case) -> None:
    turn = parse_completion(case.text, **case.options)
    if case.expect == "call":
        assert turn.error is None, turn.error
        got = [{"name": c.name, "arguments": dict(c.arguments)} for c in turn.tool_calls]
        assert got == list(case.calls)
        assert turn.final_answer is None
    elif case.expect == "answer":
        assert turn.tool_calls == () and turn.error is None, turn.error
        if case.answer is not None:
            assert turn.final_answer == case.answer
    else:
        assert turn.tool_calls == () and turn.final_answer is None
        assert turn.error is not None and case.error is not None
        assert case.error in turn.error
        assert "nothing" in turn.error.lower() or "empty" in turn.error.lower()  # it says what happened


def _stream(text: str, sizes: list[int], options: dict[str, Any]) -> tuple[list[tuple[str, Any]], ParsedTurn]:
    parser = StreamParser(coalesce=1, **options)
    events = []
    pos = 0
    for size in sizes:
        events += parser.feed(text[pos : pos + size])
        pos += size
    events += parser.feed(text[pos:])
    events += parser.close()
    assert parser.result is not None
    merged: list[tuple[str, Any]] = []
    for event in events:
        if isinstance(event, CallParsed):
            merged.append(("call", (event.call.name, dict(event.call.arguments))))
            continue
        kind = "text" if isinstance(event, TextEvent) else "reasoning"
        assert isinstance(event, (TextEvent, ReasoningEvent))
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + event.text)
        elif event.text:
            merged.append((kind, event.text))
    return merged, parser.result


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_is_chunking_invariant(case: Case) -> None:
    whole_events, whole = _stream(case.text, [], case.options)
    assert whole == parse_completion(case.text, **case.options)
    rng = random.Random(case.name)
    splits = [[1] * len(case.text), [3] * len(case.text), [rng.randint(0, 9) for _ in range(len(case.text))]]
    for sizes in splits:
        events, turn = _stream(case.text, sizes, case.options)
        assert events == whole_events
        assert turn == whole
