"""`SSEReader.feed` reads a read's lines in one loop, with a one-line event's data taken as it is (no join) and its
events made as tuples: whatever the lines, split into whatever batches, it must give the events the SSE rules give
reading one line at a time (`reference` below, the reader as it was)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mylm.providers.framing import LineSplitter, SSEEvent, SSEReader


def reference(lines: list[str]) -> list[tuple[str, str]]:
    """The events of `lines`, one line at a time: `data:` lines up to a blank line, `event:` names, `:` pings
    skipped, llama.cpp's `error:` lines as an `error` event; the last event kept without its blank line."""
    events, name, data = [], "", []
    for line in lines:
        if not line:
            if data:
                events.append((name or "message", "\n".join(data)))
                data = []
            name = ""
        elif line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
        elif line[0] != ":":
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "error":
                name = "error"
                data.append(value)
    if data:
        events.append((name or "message", "\n".join(data)))
    return events


_values = st.lists(st.sampled_from(['{"a":1}', "x", " ", ":", "é", "\r", "data", "[DONE]"]), max_size=4).map("".join)
_lines = st.one_of(
    st.just(""),
    st.builds(lambda v: "data: " + v, _values),
    st.builds(lambda v: "data:" + v, _values),
    st.builds(lambda v: "event: " + v, _values),
    st.builds(lambda v: "event:" + v, _values),
    st.builds(lambda v: "error: " + v, _values),
    st.builds(lambda v: ": " + v, _values),
    st.builds(lambda v: "retry: " + v, _values),
    st.builds(lambda v: "id:" + v, _values),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_lines, max_size=40), st.lists(st.integers(0, 40), max_size=6))
def test_the_reader_gives_what_reading_one_line_at_a_time_gives(lines: list[str], cuts: list[int]) -> None:
    reader, got = SSEReader(), []
    at = 0
    for cut in sorted(cuts):
        got += reader.feed(lines[at:cut])
        at = max(at, cut)
    got += reader.feed(lines[at:])
    got += reader.close()
    assert [(e.event, e.data) for e in got] == reference(lines)
    assert all(type(e) is SSEEvent for e in got)


def test_events_are_named_tuples_that_read_by_name() -> None:
    lines = LineSplitter().feed(b'event: ping\ndata: {"a": 1}\n\ndata: x\ndata: y\n\n')
    first, second = SSEReader().feed(lines)
    assert (first.event, first.data) == ("ping", '{"a": 1}') and first == SSEEvent("ping", '{"a": 1}')
    assert (second.event, second.data) == ("message", "x\ny")
