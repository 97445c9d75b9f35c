"""The OpenAI decoder's runs of plain text events read straight from a read's text (`feed_text`): whatever the
bytes, however they are split into reads, the chunks, the finish and the failure must be what splitting lines,
making events and `feed_all` give (the way every other decoder reads)."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mylm.core.errors import StreamError
from mylm.providers.decoder import _coalesced
from mylm.providers.framing import LineSplitter, SSEReader
from tests.providers.test_provider_shape import decoder, streams


def by_events(reads: list[bytes]) -> tuple[Any, ...]:
    """As `HTTPProvider._decode` reads a decoder without `feed_text`."""
    lines, reader, fed, out, failed = LineSplitter(), SSEReader(), decoder(), [], None
    try:
        for data in [*reads, None]:
            items = reader.feed(lines.close() if data is None else lines.feed(data))
            if data is None:
                items += reader.close()
            fed.feed_all(items, out)
            if fed.done:
                break
    except StreamError as error:
        failed = str(error)
    return _coalesced(out), fed.reason, fed.usage, fed.done, fed.stop_sequence, failed


def by_text(reads: list[bytes]) -> tuple[Any, ...]:
    """As `HTTPProvider._decode` reads the OpenAI decoder: `feed_text` on each read's text."""
    return _by_reads(reads, lambda fed, text, reader, out: fed.feed_text(text, reader, out))


def by_lead(reads: list[bytes]) -> tuple[Any, ...]:
    """As `HTTPProvider._decode` reads the OpenAI decoder: `feed_text(..., lead=True)` on each read's text, fed
    again from where it stopped until it has read all of it (the chunks of each part passed on before the next)."""

    def feed(fed: Any, text: str, reader: SSEReader, out: list[Any]) -> None:
        if text == "":
            fed.feed_text(text, reader, out, lead=True)  # one blank line
        while text:
            before = len(out)
            used = fed.feed_text(text, reader, out, lead=True)
            assert 0 < used <= len(text)
            if used < len(text):
                assert len(out) > before  # it stops only after a run it read
            text = text[used:]

    return _by_reads(reads, feed)


def _by_reads(reads: list[bytes], feed: Any) -> tuple[Any, ...]:
    lines, reader, fed, out, failed = LineSplitter(), SSEReader(), decoder(), [], None
    try:
        for data in [*reads, None]:
            text = lines.close_text() if data is None else lines.feed_text(data)
            if text is not None:
                feed(fed, text, reader, out)
            if data is None and not fed.done:
                fed.feed_all(reader.close(), out)
            if fed.done:
                break
    except StreamError as error:
        failed = str(error)
    return _coalesced(out), fed.reason, fed.usage, fed.done, fed.stop_sequence, failed


@st.composite
def wires(draw: Any) -> bytes:
    """The events of `streams()` as a server frames them, with what servers and the SSE rules allow besides:
    CRLF ends, `data:` without its space, comments, named and error events, extra blank lines, data on two
    lines, a last event without its blank line."""
    crlf = draw(st.integers(0, 5)) == 0
    parts = []
    for data in draw(streams()):
        kind = draw(st.sampled_from(["plain"] * 8 + ["nospace", "comment", "named", "blank", "split"]))
        if data.startswith("ERR"):
            parts.append(f"event: error\ndata: {data[3:]}\n\n")
        elif kind == "nospace":
            parts.append(f"data:{data}\n\n")
        elif kind == "comment":
            parts.append(f": ping\n\ndata: {data}\n\n")
        elif kind == "named":
            parts.append(f"event: message\ndata: {data}\n\n")
        elif kind == "blank":
            parts.append(f"\n\ndata: {data}\n\n\n")
        elif kind == "split":
            cut = len(data) // 2
            parts.append(f"data: {data[:cut]}\ndata: {data[cut:]}\n\n")
        else:
            parts.append(f"data: {data}\n\n")
    text = "".join(parts)
    if draw(st.booleans()) and text.endswith("\n\n"):
        text = text[:-1]  # the last blank line not sent
    if crlf:
        text = text.replace("\n", "\r\n")
    return text.encode()


@settings(max_examples=500, deadline=None)
@given(wires(), st.lists(st.integers(0, 2000), max_size=8))
# A run of empty contents gives no chunk: `lead` reads on past it (it stopped there once, with nothing to pass on).
@example(b'data: {"choices":[{"index":0,"delta":{"content":""}}]}\n\n' * 2
         + b'data: {"choices":[{"index":0,"delta":{"content":""}}]}\n', [])
def test_reading_runs_from_the_text_gives_what_reading_events_gives(wire: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(wire)) for c in cuts})
    reads = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)]) if b > a]
    assert by_text(reads) == by_events(reads)
    assert by_lead(reads) == by_events(reads)


def test_a_servers_stream_is_read_as_runs() -> None:
    """What servers send takes the run (so the test above proves something): one chunk for the whole reply."""
    head = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
    wire = "".join(f'data: {head}{{"content":"{word}"}},"finish_reason":null}}]}}\n\n'
                   for word in ["He", "llo", ' \\"w\\"', "\\u00e9"])
    wire += f'data: {head}{{}},"finish_reason":"stop"}}]}}\n\ndata: [DONE]\n\n'
    fed, out = decoder(), []
    lines, reader = LineSplitter(), SSEReader()
    text = lines.feed_text(wire.encode())
    assert text is not None
    fed.feed_text(text, reader, out)
    assert fed.shape is not None and fed.done and fed.reason == "stop"
    assert [c.text for c in out] == ["He", 'llo "w"é']  # the first event learnt alone, then one run
    assert by_text([wire.encode()]) == by_events([wire.encode()])
    # With `lead`, the read stops after the run, at the finish event, which the next feed reads.
    fed, out, lines, reader = decoder(), [], LineSplitter(), SSEReader()
    text = lines.feed_text(wire.encode())
    assert text is not None
    used = fed.feed_text(text, reader, out, lead=True)
    assert text[used:].startswith('data: {"id"') and '"finish_reason":"stop"' in text[used:].splitlines()[0]
    assert [c.text for c in out] == ["He", 'llo "w"é'] and not fed.done and fed.reason is None
    assert fed.feed_text(text[used:], reader, out, lead=True) == len(text) - used
    assert fed.done and fed.reason == "stop"
