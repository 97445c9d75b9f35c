"""Properties of the parser under hypothesis: chunking invariance, never raising, canonical round trip."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mylm.protocol.canonical import canonical_arguments
from mylm.protocol.jsonrepair import loads
from mylm.protocol.parser import (
    CallParsed,
    ParsedTurn,
    ParseEvent,
    StreamParser,
    TextEvent,
    format_tool_call,
    parse_completion,
)
from mylm.protocol.structure import PLAIN, LineContext
from mylm.core.types import ToolCall

SETTINGS = settings(max_examples=int(os.environ.get("MYLM_HYPOTHESIS_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces that exercise every decision the parser makes: tags (whole and broken), fences, inline code, JSON
# with end tags inside strings, entities, CDATA, drift formats, and hostile characters.
FRAGMENTS = [
    "<tool_code>", "</tool_code>", "<name>", "</name>", "execute_command", "<parameters>", "</parameters>",
    '{"command": "ls"}', '{"c": "</tool_code> \\" \\\\"}', "{'a': 'what's'}", '{"p": "C:\\temp"}', "{", "}", '"',
    "'", "\\", "<think>", "</think>", "<thinking>", "</thinking>", "<observation>", "<final_answer>",
    "</final_answer>", "<tool_call>", "</tool_call>", "<function=read_file>", "<parameter=path>", "</parameter>",
    "</function>", '<invoke name="x">', "</invoke>", "<function_calls>", "```", "```xml", "~~~", "`", "``", "\n",
    " ", "\t", "text", "Hello, world.", "<", ">", "</", "<tool_", "</tool_co", "&amp;", "&lt;", "<![CDATA[", "]]>",
    "<!ENTITY x 'y'>", "<command>", "</command>", "\x00", "\ud800", "é", "😀", "<tool_code><tool_code>",
]

texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
any_text = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(["\ud800", "\udfff", "\x00", "<", ">"])),
    max_size=300,
)


def run(text: str, cuts: list[int], *, coalesce: int) -> tuple[list[tuple[str, Any]], ParsedTurn]:
    """Feed `text` cut at `cuts`; return the merged events and the result."""
    parser = StreamParser(coalesce=coalesce)
    events: list[ParseEvent] = []
    last = 0
    for cut in sorted({min(c, len(text)) for c in cuts}):
        events += parser.feed(text[last:cut])
        last = cut
    events += parser.feed(text[last:])
    events += parser.close()
    assert parser.result is not None
    merged: list[tuple[str, Any]] = []
    for event in events:
        if isinstance(event, CallParsed):
            merged.append(("call", event.call))
            continue
        kind = "text" if isinstance(event, TextEvent) else "reasoning"
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + event.text)
        elif event.text:
            merged.append((kind, event.text))
    return merged, parser.result


@SETTINGS
@given(texts, st.lists(st.integers(min_value=0, max_value=400), max_size=60), st.sampled_from([1, 7, 32]))
def test_property_any_chunking_gives_the_same_events_and_turn(text: str, cuts: list[int], coalesce: int) -> None:
    whole_events, whole = run(text, [], coalesce=1)
    events, turn = run(text, cuts, coalesce=coalesce)
    assert events == whole_events
    assert turn == whole == parse_completion(text)
    assert tuple(e for kind, e in events if kind == "call") == turn.tool_calls


@SETTINGS
@given(any_text, st.lists(st.integers(min_value=0, max_value=300), max_size=30))
def test_property_never_raises_on_arbitrary_text(text: str, cuts: list[int]) -> None:
    _, turn = run(text, cuts, coalesce=1)
    # Exactly one verdict: calls to run, an answer, or an error for the model.
    assert bool(turn.tool_calls) + (turn.final_answer is not None) + (turn.error is not None) == 1
    assert turn == parse_completion(text)


TAGS = ["<tool_code>", "<think>", "</think>", "<observation>", "<final_answer>", "<tool_call>", "<thinking>"]
prose = st.text(alphabet=st.characters(codec="ascii", exclude_characters="<`~"), max_size=30)


@SETTINGS
@given(prose, st.sampled_from(TAGS), texts)
def test_property_a_tag_being_received_is_never_shown(before: str, tag: str, after: str) -> None:
    # In a blockquote or indented code the finished tag is quoted text, and shown (tested in test_parser_markdown).
    assume(LineContext().of([before]) == PLAIN)
    parser = StreamParser(coalesce=1)
    shown = ""
    for ch in before + tag:
        shown += "".join(e.text for e in parser.feed(ch) if isinstance(e, TextEvent))
        assert len(shown) <= len(before), shown
    assert shown == before


STRING_PIECES = st.sampled_from(
    ["</parameters>", "</tool_code>", "<tool_code>", "<observation>", "C:\\temp", "\\", '"', "'", "\b", "\f", "\n",
     "\t", "what's", "</", "&amp;", "<![CDATA[", "]]>", "é", "😀", "\u2028", "\x00", "{", "}"]
)
strings = st.one_of(st.text(max_size=20), st.lists(STRING_PIECES, max_size=6).map("".join))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), strings),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(strings, children, max_size=4)),
    max_leaves=12,
)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:-]{0,30}", fullmatch=True)


@SETTINGS
@given(names, st.dictionaries(strings, json_values, max_size=5))
def test_property_canonical_form_round_trips(name: str, arguments: dict[str, Any]) -> None:
    call = ToolCall(name, arguments)
    turn = parse_completion(format_tool_call(call))
    assert turn.error is None, turn.error
    assert [(c.name, dict(c.arguments)) for c in turn.tool_calls] == [(name, arguments)]


@SETTINGS
@given(st.dictionaries(strings, json_values, max_size=5))
def test_property_canonical_json_reads_back_exactly(arguments: dict[str, Any]) -> None:
    assert loads(canonical_arguments(arguments))[0] == arguments


@SETTINGS
@given(strings, st.sampled_from(FRAGMENTS[:3] + ["Thinking.\n", "```xml\n"]), st.lists(st.integers(1, 9), max_size=80))
def test_property_call_is_emitted_by_the_chunk_that_completes_it(value: str, before: str, sizes: list[int]) -> None:
    block = format_tool_call(ToolCall("write_file", {"content": value}))
    text = ("Thinking.\n" if before.startswith("<") else before) + block
    parser = StreamParser(reasoning_open=False)  # default coalescing: calls must still come out at once
    pos, emitted_at = 0, None
    for size in [*sizes, len(text)]:
        chunk = text[pos : pos + size]
        pos += len(chunk)
        if any(isinstance(e, CallParsed) for e in parser.feed(chunk)):
            emitted_at = pos
            break
    if before.startswith("```"):
        assert emitted_at is None  # a fenced call waits for the fence to be decided
    else:
        assert emitted_at == len(text)


def _track_lines_tick_by_tick(inline: int, line_blank: bool, text: str) -> tuple[int, bool]:
    """The line tracking as first written (every backtick run and newline walked in turn): the reference."""
    import re

    if "`" in text or "\n" in text:
        for match in re.finditer(r"`+|\n", text):
            if match.group() == "\n":
                inline, line_blank = 0, True
            else:
                run = match.end() - match.start()
                inline, line_blank = (0 if inline == run else inline or run), False
        tail = text[text.rfind("\n") + 1 :] if line_blank else ""
        line_blank = line_blank and (not tail or tail.isspace())
    elif not text.isspace():
        line_blank = False
    return inline, line_blank


@given(st.integers(0, 3), st.booleans(), st.text(alphabet="`\n x\t", max_size=40))
def test_line_tracking_from_the_last_newline_matches_walking_every_tick(
    inline: int, line_blank: bool, text: str
) -> None:
    # The parser skips to the text after a chunk's last newline (a hot path: a long answer's every chunk).
    parser = StreamParser()
    parser._inline, parser._line_blank = inline, line_blank
    parser._track_lines(text)
    assert (parser._inline, parser._line_blank) == _track_lines_tick_by_tick(inline, line_blank, text)
