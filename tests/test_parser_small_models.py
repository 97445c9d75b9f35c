"""What the first capable small models (Qwen2.5-Coder 0.5B/1.5B Instruct) write when no grammar holds them, and
how the parser reads it (issues 27, 30, 31). The texts are the models' own, quoted from the issues or recorded
in tests/data/parser/ (the corpus files name where each was seen)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mylm.protocol import CallParsed, StreamParser, parse_completion
from mylm.protocol.parsed import ParsedTurn
from mylm.core.types import TextEvent
from tests.test_parser_reasoning import _chunked

SETTINGS = settings(max_examples=int(os.environ.get("MYLM_HYPOTHESIS_EXAMPLES", "150")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
TOOLS = {"read_file": ["path"], "list_dir": ["path"], "write_file": ["path", "content"],
         "execute_command": ["command"], "search_memory": ["query", "limit"]}


def streamed(text: str, size: int = 3, **options: object) -> ParsedTurn:
    return _chunked(text, size, **options)


def events(text: str, cuts: list[int], **options: object) -> tuple[list[object], ParsedTurn]:
    """Every event, feeding `text` cut at `cuts`; the turn after close (checked against the whole text)."""
    parser = StreamParser(coalesce=1, tools=TOOLS, **options)  # type: ignore[arg-type]
    out: list[object] = []
    pos = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(text))):
        out += parser.feed(text[pos:cut])
        pos = cut
    out += parser.feed(text[pos:])
    out += parser.close()
    assert parser.result == parse_completion(text, tools=TOOLS, **options)  # type: ignore[arg-type]
    return out, parser.result


def shown(items: list[object]) -> str:
    return "".join(e.text for e in items if isinstance(e, TextEvent))


# ------------------------------------------------------------------- a reply that opens with <observation>


@pytest.mark.parametrize("text", [
    # Issue 27 item 5: with `<observation>` a stop string, the server cut the reply at its first characters.
    "",
    "<observation",
    "<observation>",
    "<observation>\nhello.txt contains: Hello, world!\n</observation>\nThe file says Hello, world!",
])
def test_a_reply_that_opens_with_an_invented_observation_says_so(text: str) -> None:
    turn = parse_completion(text, tools=TOOLS)
    assert turn.tool_calls == () and turn.error is not None
    assert turn.invented_observation == (text != "")
    assert turn.discarded == text  # what the model wrote, for a correction that quotes it
    assert streamed(text, tools=TOOLS) == turn


def test_an_invented_result_after_a_call_is_flagged_and_kept_aside() -> None:
    text = ('<tool_code>\n<name>read_file</name>\n<parameters>{"path": "hello.txt"}</parameters>\n</tool_code>\n'
            "Observation: Hello, world!\nThe file says hello.")
    turn = parse_completion(text, tools=TOOLS)
    assert [c.name for c in turn.tool_calls] == ["read_file"]
    assert turn.invented_observation and turn.discarded == "Observation: Hello, world!\nThe file says hello."
    assert streamed(text, tools=TOOLS) == turn


def test_an_ordinary_reply_invents_nothing() -> None:
    turn = parse_completion("The file says hello.", tools=TOOLS)
    assert not turn.invented_observation and turn.discarded == ""


# ------------------------------------------------------------------------- JSON calls after prose (issues 27, 31)

_PROSE = st.sampled_from([
    "", "To see what the file holds, I will read it.", "I'll use the read_file tool.\n",
    "Sure! Let me check.\n\n", "First I need the listing:", "Okay.\nI will call the tool now:\n",
])
_ARGS = st.fixed_dictionaries({"path": st.text(st.sampled_from("abcxyz0123./_- {}[]\"'`<>"), min_size=1, max_size=24)})
#: The shapes the field writes a call in, as (the object, the arguments as the call carries them).
SHAPES = {
    "name/arguments": lambda n, a: {"name": n, "arguments": a},
    "name/parameters": lambda n, a: {"name": n, "parameters": a},
    "name/args": lambda n, a: {"name": n, "args": a},
    "name/input": lambda n, a: {"name": n, "input": a},
    "function": lambda n, a: {"type": "function", "function": {"name": n, "arguments": a}},
    "function, string arguments": lambda n, a: {"function": {"name": n, "arguments": json.dumps(a)}},
    "tool/tool_input": lambda n, a: {"tool": n, "tool_input": a},
    "tool/args": lambda n, a: {"tool": n, "args": a},
}
WRAPS = {
    "```json fence": lambda body: f"```json\n{body}\n```",
    "``` fence": lambda body: f"```\n{body}\n```",
    "~~~json fence": lambda body: f"~~~json\n{body}\n~~~",
    "pretty fence": lambda body: "```json\n" + json.dumps(json.loads(body), indent=2) + "\n```",
    "bare line": lambda body: body,
}


@SETTINGS
@given(_PROSE, st.sampled_from(sorted(SHAPES)), st.sampled_from(sorted(WRAPS)), st.sampled_from(["read_file", "list_dir"]),
       _ARGS, st.sampled_from(["", "\n", "\n\n  \n"]), st.lists(st.integers(0, 300), max_size=12))
def test_property_a_json_call_ending_the_reply_runs_and_is_never_shown_as_text(
    prose: str, shape: str, wrap: str, name: str, args: dict[str, str], tail: str, cuts: list[int]
) -> None:
    body = json.dumps(SHAPES[shape](name, args))
    if wrap == "bare line" and not prose.strip():
        prose = "I will call it."  # a reply of nothing but bare JSON stays a correction (see the next test)
    text = prose + ("\n" if prose and not prose.endswith("\n") else "") + WRAPS[wrap](body) + tail
    items, turn = events(text, cuts)
    assert [(c.name, dict(c.arguments)) for c in turn.tool_calls] == [(name, args)], text
    assert turn.final_answer is None and turn.error is None
    assert turn.thought == prose.strip()
    assert '"' + name + '"' not in shown(items)  # the call was never displayed as the answer's text
    assert isinstance(items[-1], CallParsed)


def test_a_reply_of_nothing_but_unfenced_json_stays_a_correction() -> None:
    """What an echoed tool output looks like (THREATS T1): `neutralise` cannot defuse plain JSON."""
    turn = parse_completion('{"name": "read_file", "arguments": {"path": "a"}}', tools=TOOLS)
    assert turn.tool_calls == () and turn.error is not None and "<tool_code>" in turn.error


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(sorted(WRAPS)), st.sampled_from(["read_file", "list_dir"]), _ARGS),
                min_size=2, max_size=3),
       st.booleans(), st.lists(st.integers(0, 400), max_size=12))
def test_property_several_json_calls_count_as_multiple_calls_says(
    calls: list[tuple[str, str, dict[str, str]]], multiple: bool, cuts: list[int]
) -> None:
    text = "I need these.\n" + "\n\n".join(
        WRAPS[w](json.dumps({"name": n, "arguments": a})) for w, n, a in calls)
    _, turn = events(text, cuts, multiple_calls=multiple)
    got = [(c.name, dict(c.arguments)) for c in turn.tool_calls]
    assert got == [(n, a) for _, n, a in calls][: None if multiple else 1]


@pytest.mark.parametrize("text", [
    # an example: prose follows the fence
    'A call looks like this:\n```json\n{"name": "read_file", "arguments": {"path": "a"}}\n```\nmylm runs it.',
    # not a tool in play
    'Here:\n```json\n{"name": "open_url", "arguments": {"url": "https://example.com"}}\n```',
    # an argument the tool does not take: data
    'The record:\n```json\n{"name": "read_file", "arguments": {"path": "a", "mode": "rb"}}\n```',
    # a key no call has: data answering the user
    'Your package.json:\n```json\n{"name": "list_dir", "version": "1.0.0", "arguments": {"path": "."}}\n```',
    # a fence of another language
    'In Python:\n```python\n{"name": "read_file", "arguments": {"path": "a"}}\n```',
    # inside a sentence
    'Write {"name": "read_file", "arguments": {"path": "a"}} to call it.',
    # in a blockquote, and in an indented code block
    'The page says:\n\n> ```json\n> {"name": "read_file", "arguments": {"path": "a"}}\n> ```',
    'Like so:\n\n    {"name": "read_file", "arguments": {"path": "a"}}',
    # presented as what a file or the user wrote, or refused
    'The file notes.md contains:\n```json\n{"name": "execute_command", "arguments": {"command": "rm -rf ~"}}\n```',
    'You pasted this call:\n```json\n{"name": "execute_command", "arguments": {"command": "id"}}\n```',
    'I will not run this:\n```json\n{"name": "execute_command", "arguments": {"command": "id"}}\n```',
])
@pytest.mark.parametrize("cuts", [[], [1, 2, 3, 5, 8, 13, 21, 34, 55, 89], list(range(1, 200, 4))])
def test_a_json_call_shown_quoted_or_as_data_stays_text_and_is_all_shown(text: str, cuts: list[int]) -> None:
    items, turn = events(text, cuts)
    assert turn.tool_calls == () and turn.error is None
    assert turn.final_answer == text.strip()
    assert shown(items) == text  # held back while undecided, then shown: nothing lost, nothing twice


def test_without_the_tools_a_json_fence_is_read_as_before() -> None:
    text = 'I will read it.\n```json\n{"name": "read_file", "arguments": {"path": "a"}}\n```'
    assert parse_completion(text).final_answer == text


def test_the_issue_31_reply_streams_no_call_text_before_the_call() -> None:
    """Issue 31 item 1: every client got the fenced call as `content`. Now the prose streams, the fence is held,
    and the call follows it, however the stream is cut."""
    text = ('To read hello.txt, I will use the read_file tool.\n'
            '```json\n{"name": "read_file", "arguments": {"path": "hello.txt"}}\n```')
    for size in (1, 2, 5, 64):
        items, turn = events(text, list(range(size, len(text), size)))
        assert shown(items) == "To read hello.txt, I will use the read_file tool.\n"
        assert [e.call.name for e in items if isinstance(e, CallParsed)] == ["read_file"]


# --------------------------------------------------------------- a block presented as quoted or refused (issue 30)

BLOCK = '<tool_code>\n<name>execute_command</name>\n<parameters>{"command": "rm -rf build"}</parameters>\n</tool_code>'


@pytest.mark.parametrize("before, after", [
    ("The block you pasted asks me to delete the build directory:\n", "\nI have not run it; tell me if you want me to."),
    ("Your message contains this:\n", "\n"),
    ("The README.md says:\n", "\nThat would delete your build, so ask me first."),
    ("The tool output asked me to run this:\n", ""),
    ("I will not execute the following:\n", ""),
    ("Here is what it wanted:\n", "\nI did not run it."),
    ("", "\nI have not run this block, because it deletes files."),
])
def test_a_block_presented_as_quoted_or_refused_is_text_and_the_answer_keeps_it(before: str, after: str) -> None:
    text = before + BLOCK + after
    turn = parse_completion(text, tools=TOOLS)
    assert turn.tool_calls == () and turn.error is None
    assert turn.final_answer == text.strip()
    assert streamed(text, 2, tools=TOOLS) == turn


@pytest.mark.parametrize("before, after", [
    ("I'll run:\n", ""),
    ("Let me clean the build first:\n", "\n"),
    ("As the README says, I'll run:\n", ""),
    ("I have not run the tests yet. Let me run them:\n", ""),
    ("The file contains a bug. I will rebuild:\n", "\nThis may take a minute."),
    ("You asked me to clean the build, so here it is:\n", ""),
])
def test_a_block_the_model_announces_still_runs(before: str, after: str) -> None:
    text = before + BLOCK + after
    for turn in (parse_completion(text, tools=TOOLS), streamed(text, 2, tools=TOOLS),
                 parse_completion(text, tools=TOOLS, reasoning_open=False)):
        assert [c.name for c in turn.tool_calls] == ["execute_command"], text


def test_a_refusal_after_a_call_already_emitted_cannot_take_it_back() -> None:
    """With `reasoning_open=False` a call is emitted the moment its end tag arrives (the stream may be closed
    there): a refusal written after it is read only while calls are held back. Documented in docs/parser.md."""
    text = BLOCK + "\nI have not run it."
    assert parse_completion(text, tools=TOOLS).tool_calls == ()
    assert [c.name for c in parse_completion(text, tools=TOOLS, reasoning_open=False).tool_calls] == ["execute_command"]


def _says_by_the_patterns(sentence: str) -> bool:
    """`quoting._says(sentence, attribution=True)` without its word filter: the patterns alone decide."""
    from mylm.protocol import quoting

    marks = [m.start() for m in quoting._REFUSAL.finditer(sentence)]
    marks += [m.start() for m in quoting._ATTRIBUTION.finditer(sentence)]
    intents = [m.start() for m in quoting._INTENT.finditer(sentence)]
    return bool(marks) and (not intents or max(marks) >= max(intents))


def _ascii_match_of(pattern: str) -> st.SearchStrategy[str]:
    from mylm.protocol import quoting

    return st.from_regex(getattr(quoting, pattern), alphabet=st.characters(max_codepoint=127))


@settings(max_examples=400)
@given(st.one_of(_ascii_match_of("_REFUSAL"), _ascii_match_of("_ATTRIBUTION")))
def test_every_ascii_match_of_the_quoting_patterns_holds_one_of_their_words(text: str) -> None:
    # The word filter before the patterns' search may skip only text that none of them matches.
    from mylm.protocol import quoting

    refusal, attribution = quoting._REFUSAL.search(text), quoting._ATTRIBUTION.search(text)
    assert refusal or attribution
    assert not refusal or quoting._may_hold(text, quoting._REFUSAL_WORDS)
    assert not attribution or quoting._may_hold(text, quoting._ATTRIBUTION_WORDS)


_QUOTING_WORDS = ["I ", "We ", "you ", "the user ", "your ", "It ", "this ", "The file ", "notes.txt ", "README.md ",
                  "have not ", "won't ", "N'T ", "never ", "refuse to ", "ignored ", "without ", "run ", "running ",
                  "it", "this block", "pasted ", "gave me ", "contains", ":", "says ", "asked ", "has ", "I'll ",
                  "let me ", ". ", "\n\n", "ſ", "\u212a", "İ", "x", " "]


@given(st.lists(st.sampled_from(_QUOTING_WORDS), max_size=14).map("".join),
       st.lists(st.sampled_from(_QUOTING_WORDS), max_size=14).map("".join))
@example("you paſted this:\n", "")  # `ſ` is an `s` to the patterns' case-insensitive match, not to `str.lower`
@example("Here:\n", "\nI ſkipped it.")
def test_the_quoting_word_filter_changes_no_verdict(before: str, after: str) -> None:
    from mylm.protocol import quoting

    sentence = quoting._last_sentence(before)
    assert quoting._says(sentence, attribution=True) == _says_by_the_patterns(sentence)
    paragraph = quoting._first_paragraph(after)
    expected = _says_by_the_patterns(sentence) or bool(after) and quoting._REFUSAL.search(paragraph) is not None
    assert quoting.presented_as_quoted(before, after) == expected
