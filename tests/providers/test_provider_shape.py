"""The OpenAI decoder's fast path (`_ContentShape`): an event of the stream's plain text shape gives its chunk from
its content string alone. Whatever the events hold, that must be what decoding each event in full gives."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mylm.core.errors import StreamError
from mylm.providers import Endpoint, create_llm
from mylm.providers.decoder import _coalesced
from mylm.providers.framing import SSEEvent
from mylm.providers.openai import _ContentShape, _shape_of


def _learnt(data: str) -> _ContentShape | None:
    return _shape_of(data, json.loads(data))


def decoder() -> Any:
    return create_llm(Endpoint(provider="openai", base_url="http://127.0.0.1:9/v1", model="m")).new_decoder()


def run(datas: list[str], together: bool, reads: int = 1) -> tuple[Any, ...]:
    """What a decoder makes of `datas`: all read at once (`feed_all`, the reads split `reads` ways), or each event
    fed alone (the slow path the fast one must equal); adjacent text chunks joined, as the provider joins them
    (`_coalesced`: the fast path gives a run of text events as one chunk)."""
    fed = decoder()
    events = [SSEEvent("error" if data.startswith("ERR") else "message", data.removeprefix("ERR")) for data in datas]
    out: list[Any] = []
    failed = None
    try:
        if together:
            size = max(1, len(events) // reads)
            for at in range(0, len(events), size):
                fed.feed_all(events[at:at + size], out)
                if fed.done:
                    break
        else:
            for event in events:
                out.extend(fed.feed(event))
                if fed.done:
                    break
    except StreamError as error:
        failed = str(error)
    return _coalesced(out), fed.reason, fed.usage, fed.done, fed.stop_sequence, failed


def encode(document: Any, compact: bool, ascii_only: bool) -> str:
    return json.dumps(document, separators=(",", ":") if compact else None, ensure_ascii=ascii_only)


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
heads = st.dictionaries(st.sampled_from(["id", "object", "created", "model", "system_fingerprint", "usage", "error",
                                          "type", "content"]), scalars, max_size=4)
choices = st.fixed_dictionaries({"index": st.sampled_from([0, 0, 0, 1, False])}, optional={
    "finish_reason": st.sampled_from([None, None, "stop", ""]), "logprobs": st.none(), "text": st.text(max_size=3),
    "stop_reason": st.sampled_from([None, "x"])})
deltas = st.fixed_dictionaries({"content": st.one_of(st.text(max_size=6), st.text(max_size=6), st.none())},
                               optional={"role": st.sampled_from(["assistant", ""]),
                                         "reasoning_content": st.sampled_from(["", "r"]),
                                         "tool_calls": st.none()})


@st.composite
def streams(draw: Any) -> list[str]:
    """Events of one shape with differing content, and among them anything else: other shapes, the shape's
    bytes around text that is not one string literal, errors, [DONE]."""
    head = draw(heads)
    choice = draw(choices)
    delta = draw(deltas)
    compact, ascii_only = draw(st.booleans()), draw(st.booleans())

    def event(content: Any) -> str:
        return encode({**head, "choices": [{**choice, "delta": {**delta, "content": content}}]}, compact, ascii_only)

    datas = []
    for kind in draw(st.lists(st.sampled_from(["same"] * 6 + ["other", "spliced", "junk", "error", "done"]),
                              max_size=12)):
        if kind == "same":
            datas.append(event(draw(st.text(max_size=6))))
        elif kind == "other":
            datas.append(encode({"choices": [{"index": 0, "delta": draw(deltas), **draw(choices)}],
                                 **draw(heads)}, draw(st.booleans()), draw(st.booleans())))
        elif kind == "spliced":
            # The shape's own bytes with anything where the string should be: a literal cut short, a literal
            # and more JSON, bad escapes, control characters.
            marker = "\x00MARK\x00"
            raw = event(marker)
            quoted = json.dumps(marker, ensure_ascii=ascii_only)
            if quoted in raw:
                inner = draw(st.sampled_from(['"a","role":"b"', '"a" ', '"\\q"', '"\x01"', '"a\\"', '"a"}', '"',
                                              '""', "1", '"\\ud800"']) | st.text(max_size=6).map(json.dumps))
                datas.append(raw.replace(quoted, inner, 1))
        elif kind == "junk":
            datas.append(draw(st.text(max_size=10)))
        elif kind == "error":
            datas.append("ERR" + event(draw(st.text(max_size=3))))
        else:
            datas.append("[DONE]")
    return datas


@settings(max_examples=400, deadline=None)
@given(streams(), st.integers(1, 4))
def test_the_fast_path_gives_what_decoding_each_event_gives(datas: list[str], reads: int) -> None:
    assert run(datas, together=True, reads=reads) == run(datas, together=False)


def test_a_typical_stream_is_read_by_its_shape() -> None:
    """The fast path is taken for what servers send (so the test above proves something)."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    datas = [json.dumps({**head, "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]},
                        separators=(",", ":")) for word in ["Hel", "lo \"wo\"", "rld\n", "é", ""]]
    datas.append(json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    fed = decoder()
    out: list[Any] = []
    fed.feed_all([SSEEvent("message", d) for d in datas], out)
    assert fed.shape is not None and fed.shape.text(datas[2]) == "rld\n"
    assert "".join(c.text for c in out) == 'Hello "wo"rld\né' and fed.reason == "stop"
    assert run(datas, together=True) == run(datas, together=False)


@given(st.text(max_size=20))
def test_a_shape_reads_a_string_as_json_does(text: str) -> None:
    data = json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}}]}, separators=(",", ":"))
    shape = _learnt(data)
    assert shape is not None
    spliced = shape.prefix + text + shape.suffix
    try:
        expected = json.loads(spliced)["choices"][0]["delta"]["content"]
    except (ValueError, KeyError, TypeError, IndexError):
        expected = None
    got = shape.text(spliced)
    assert got is None or got == expected


def test_a_shape_is_not_learnt_from_what_is_not_plain_text() -> None:
    for document in ({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]},
                     {"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": {"prompt_tokens": 1}},
                     {"choices": [{"index": 0, "delta": {"content": "x", "reasoning_content": "r"}}]},
                     {"choices": [{"index": 0, "delta": {"content": "x"}, "text": "t"}]},
                     # The content key twice: the last one wins, so the first is not the one that changes.
                     ):
        assert _learnt(json.dumps(document, separators=(",", ":"))) is None
    twice = '{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}'
    shape = _learnt(twice)
    assert shape is None or shape.text(twice.replace('"b"', '"c"')) == "c"


def _shape_by_two_proofs(data: str, obj: Any) -> _ContentShape | None:
    """`_shape_of` as it was: a place is the content only if both `_PROOFS` decode as they should there."""
    from mylm.providers import openai

    if not openai._plain_text(obj):
        return None
    content = obj["choices"][0]["delta"]["content"]
    at = data.find(openai._CONTENT)
    for _ in range(4):
        if at < 0:
            return None
        start = at + len(openai._CONTENT)
        try:
            value, end = openai._scanstring(data, start, True)
        except ValueError:
            value, end = None, -1
        if value == content:
            shape = _ContentShape(data[:start], data[end:])
            if all(openai._decodes_to(shape, literal, openai._with_content(obj, text))
                   for literal, text in openai._PROOFS):
                return shape
        at = data.find(openai._CONTENT, at + 1)
    return None


#: Contents that are a proof's own string, or hold a key's spelling; keys around them in any order and repeated.
_CONTENTS = st.sampled_from(["é\"x", "y\n", "x", "", "content", '"content":"x"', "é"]) | st.text(max_size=4)


@st.composite
def _events(draw: Any) -> str:
    content = json.dumps(draw(_CONTENTS), ensure_ascii=draw(st.booleans()))
    other = json.dumps(draw(_CONTENTS))
    delta = draw(st.permutations([f'"content":{content}', *draw(st.lists(st.sampled_from(
        [f'"content":{other}', f'"content":{content}', '"role":"assistant"', f'"role":{other}']), max_size=2))]))
    choice = draw(st.permutations(['"index":0', '"delta":{' + ",".join(delta) + "}", *draw(st.lists(st.sampled_from(
        ['"finish_reason":null', '"logprobs":null', f'"finish_reason":{other}']), max_size=1))]))
    top = draw(st.permutations(['"choices":[{' + ",".join(choice) + "}]", *draw(st.lists(st.sampled_from(
        [f'"content":{content}', f'"id":{other}', '"x":{"content":' + content + "}", '"usage":null']),
        max_size=2))]))
    return "{" + ",".join(top) + "}"


@settings(max_examples=500)
@given(_events())
def test_one_proof_learns_the_shape_two_proofs_learn(data: str) -> None:
    obj = json.loads(data)
    assert _shape_of(data, obj) == _shape_by_two_proofs(data, obj)
