"""The invariant of issue 11, under hypothesis: text that looks like an attempted call is never the final answer.

Whatever prose surrounds it and however the stream is chunked, a call written in any form the parser knows (the
protocol's, its drifted cousins, other agents' formats) is run as exactly that call, or the turn is a
correction; a call cut off part-way is a correction. Nothing of it is ever returned as the answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mylm.protocol.canonical import format_tool_call
from mylm.protocol.parsed import ParsedTurn
from mylm.protocol.parser import StreamParser, parse_completion
from mylm.core.types import ToolCall

SETTINGS = settings(max_examples=int(os.environ.get("MYLM_HYPOTHESIS_EXAMPLES", "150")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

TOOLS = {"list_dir": ["path"], "read_file": ["path"], "write_file": ["path", "content"],
         "execute_command": ["command"], "search_memory": ["query", "limit"]}

Form = Callable[[str, dict[str, str]], str]


def _children(args: dict[str, str]) -> str:
    return "".join(f"<{k}>{v}</{k}>\n" for k, v in args.items())


def _json(args: dict[str, str]) -> str:
    return json.dumps(args)


FORMS: dict[str, Form] = {
    "canonical": lambda n, a: format_tool_call(ToolCall(n, a)),
    "space in tag": lambda n, a: f"<tool code>\n<name>{n}</name>\n<parameters>{_json(a)}</parameters>\n</tool code>",
    "padded tag": lambda n, a: f"<Tool_Code >\n<name>{n}</name>\n<parameters>{_json(a)}</parameters>\n</tool_code >",
    "name attribute": lambda n, a: f'<tool_code name="{n}">\n<parameters>{_json(a)}</parameters>\n</tool_code>',
    "quoted name": lambda n, a: f'<tool_code>\n<name>"{n}"</name>\n<parameters>{_json(a)}</parameters>\n</tool_code>',
    "backticked name": lambda n, a: f"<tool_code><name>`{n}`</name><parameters>{_json(a)}</parameters></tool_code>",
    "name after parameters": lambda n, a: f"<tool_code>\n<parameters>{_json(a)}</parameters>\n\n  <name>{n}</name>\n"
                                          "</tool_code>",
    "tool as tag": lambda n, a: f"<{n}>\n{_children(a)}</{n}>",
    "tool as tag, JSON": lambda n, a: f"<{n}>{_json(a)}</{n}>",
    "tool_name element": lambda n, a: f"<tool_name>{n}</tool_name>\n<parameters>{_json(a)}</parameters>",
    "function-name element": lambda n, a: f"<function-name>{n}</function-name>\n<arguments>{_json(a)}</arguments>",
    "react": lambda n, a: f"Action: {n}\nAction Input: {_json(a)}",
    "hermes": lambda n, a: f'<tool_call>\n{{"name": "{n}", "arguments": {_json(a)}}}\n</tool_call>',
    "qwen": lambda n, a: f"<tool_call>\n<function={n}>\n"
                         + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in a.items())
                         + "</function>\n</tool_call>",
    "claude": lambda n, a: f'<function_calls>\n<invoke name="{n}">\n'
                           + "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in a.items())
                           + "</invoke>\n</function_calls>",
    "deepseek tokens": lambda n, a: f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n"
                                    f"{_json(a)}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "harmony": lambda n, a: f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{_json(a)}<|call|>",
    "langchain in block": lambda n, a: f'<tool_code>\n{{"action": "{n}", "action_input": {_json(a)}}}\n</tool_code>',
    "attributes": lambda n, a: f"<{n} " + " ".join(f'{k}="{v}"' for k, v in a.items()) + "/>",
    "name then JSON in block": lambda n, a: f"<tool_code>\n{n}\n{_json(a)}\n</tool_code>",
    "name as JSON key in block": lambda n, a: f'<tool_code>\n{{"{n}": {_json(a)}}}\n</tool_code>',
    "other case": lambda n, a: f"<tool_code><name>functions.{n.upper()}</name><parameters>{_json(a)}</parameters>"
                               "</tool_code>",
}
#: Forms whose every prefix (past a few characters) still shows a call was being written.
TAG_FORMS = [k for k in FORMS if k not in ("react", "deepseek tokens", "harmony")]

_PROSE = st.text(st.sampled_from("abcdefghij klmnopqrstuvwxyz.,!?;ABCDEFG0123456789\n"), max_size=80)
_VALUE = st.text(st.sampled_from("abcdefgh xyz0123456789./_-+=:"), min_size=1, max_size=30).map(str.strip).filter(bool)


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    name = draw(st.sampled_from(sorted(TOOLS)))
    return name, {arg: draw(_VALUE) for arg in TOOLS[name]}


def _stream(text: str, cuts: list[int]) -> ParsedTurn:
    parser = StreamParser(coalesce=1, tools=TOOLS)
    last = 0
    for cut in sorted({min(c, len(text)) for c in cuts}):
        parser.feed(text[last:cut])
        last = cut
    parser.feed(text[last:])
    parser.close()
    assert parser.result is not None
    return parser.result


def _lead(before: str) -> str:
    """Prose before a call ends its line: a ReAct `Action:` (and a tool tag) starts one."""
    return before + "\n" if before and not before.endswith("\n") else before


@SETTINGS
@given(_PROSE, st.sampled_from(sorted(FORMS)), calls(), _PROSE, st.lists(st.integers(0, 600), max_size=20))
def test_property_an_attempted_call_is_run_exactly_never_the_answer(
    before: str, form: str, call: tuple[str, dict[str, str]], after: str, cuts: list[int]
) -> None:
    name, args = call
    text = _lead(before) + FORMS[form](name, args) + ("\n" + after if form != "react" else "")
    turn = _stream(text, cuts)
    assert turn == parse_completion(text, tools=TOOLS)  # however it was chunked
    assert turn.final_answer is None, (form, text)
    if turn.error is None:
        assert [(c.name, dict(c.arguments)) for c in turn.tool_calls][:1] == [(name, args)], (form, text)


@SETTINGS
@given(_PROSE, st.sampled_from(TAG_FORMS), calls(), st.integers(4, 400), st.lists(st.integers(0, 600), max_size=20))
def test_property_a_call_cut_off_part_way_is_never_the_answer(
    before: str, form: str, call: tuple[str, dict[str, str]], keep: int, cuts: list[int]
) -> None:
    written = FORMS[form](*call)
    text = _lead(before) + written[: min(keep, len(written))]
    turn: Any = _stream(text, cuts)
    assert turn.final_answer is None, (form, text)


# ------------------------------------------------------------------------- the invariant in every spelling
# Issue 22: the invariant must not depend on a fixed list of forms. Each spelling below is a transformation
# applied to *every* form above (or to the canonical one where the spelling is a form of its own), and a call in
# any of them is run exactly or corrected, never the answer.

_WIDE = str.maketrans({"<": "＜", ">": "＞"})


def _fullwidth(text: str) -> str:
    return text.translate(_WIDE)


def _fullwidth_letters(text: str) -> str:
    """The tag names in fullwidth letters too (`＜ｔｏｏｌ＿ｃｏｄｅ＞`)."""
    import re

    return re.sub(r"<(/?)([A-Za-z_]+)", lambda m: "＜" + m.group(1) + "".join(
        chr(ord(c) + 0xFEE0) for c in m.group(2)), text).replace(">", "＞")


def _html_escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _numeric_escaped(text: str) -> str:
    return text.replace("&", "&#38;").replace("<", "&#60;").replace(">", "&#62;")


SPELLINGS: dict[str, Callable[[str], str]] = {
    "fullwidth brackets": _fullwidth,
    "fullwidth letters": _fullwidth_letters,
}
#: Escaped spellings: how `neutralise` defuses tool output, so what a model quoting an observation writes. Text.
ESCAPED: dict[str, Callable[[str], str]] = {
    "html-escaped": _html_escaped,
    "numeric entities": _numeric_escaped,
    "half-escaped": lambda text: text.replace("<", "&lt;"),
}
#: Forms whose markup is angle-bracket tags (the spellings above rewrite those).
TAGGED_FORMS = [k for k in FORMS if k not in ("react", "deepseek tokens", "harmony")]
LABELS = ["tool_code", "tool", "tool_call", "function_call", "tool_use", "functions"]
_CHAR_VALUE = st.text(st.sampled_from("abcxyz0123456789./_-+=:&<>\"'"), min_size=1, max_size=20).map(str.strip) \
    .filter(bool)


def _py(name: str, args: dict[str, str]) -> str:
    return f"{name}(" + ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items()) + ")"


OWN_FORMS: dict[str, Form] = {
    "labelled fence, python": lambda n, a: f"```{{label}}\n{_py(n, a)}\n```",
    "labelled fence, gemma print": lambda n, a: f"```{{label}}\nprint(default_api.{_py(n, a)})\n```",
    "labelled fence, json": lambda n, a: f'```{{label}}\n{{"name": "{n}", "arguments": {_json(a)}}}\n```',
    "labelled fence, tags": lambda n, a: f"```{{label}}\n<name>{n}</name>\n<parameters>{_json(a)}</parameters>\n```",
    "python call line": lambda n, a: _py(n, a),
    "phi functools": lambda n, a: f'functools[{{"name": "{n}", "arguments": {_json(a)}}}]',
}


def _stream_checked(text: str, cuts: list[int]) -> ParsedTurn:
    turn = _stream(text, cuts)
    assert turn == parse_completion(text, tools=TOOLS)  # however it was chunked
    return turn


def _check(turn: ParsedTurn, name: str, args: dict[str, str], what: object) -> None:
    assert turn.final_answer is None, what
    if turn.error is None:
        assert [(c.name, dict(c.arguments)) for c in turn.tool_calls][:1] == [(name, args)], what


@SETTINGS
@given(_PROSE, st.sampled_from(sorted(SPELLINGS)), st.sampled_from(TAGGED_FORMS), calls(), _PROSE,
       st.lists(st.integers(0, 900), max_size=12))
def test_property_a_call_in_any_spelling_is_run_exactly_or_corrected(
    before: str, spelling: str, form: str, call: tuple[str, dict[str, str]], after: str, cuts: list[int]
) -> None:
    name, args = call
    text = _lead(before) + SPELLINGS[spelling](FORMS[form](name, args)) + "\n" + after
    _check(_stream_checked(text, cuts), name, args, (spelling, form, text))


@SETTINGS
@given(_PROSE, st.sampled_from(sorted(OWN_FORMS)), st.sampled_from(LABELS), calls(), _PROSE,
       st.lists(st.integers(0, 600), max_size=12))
def test_property_a_call_in_a_form_of_its_own_spelling_is_run_exactly_or_corrected(
    before: str, form: str, label: str, call: tuple[str, dict[str, str]], after: str, cuts: list[int]
) -> None:
    name, args = call
    written = OWN_FORMS[form](name, args).replace("{label}", label)
    solo = form in ("phi functools",)  # a marker form: the whole reply is the calls
    text = written if solo else _lead(before) + written + "\n" + after
    _check(_stream_checked(text, cuts), name, args, (form, label, text))


@SETTINGS
@given(st.lists(calls(), min_size=1, max_size=3))
def test_property_an_array_of_call_objects_is_never_the_answer(items: list[tuple[str, dict[str, str]]]) -> None:
    text = json.dumps([{"name": n, "arguments": a} for n, a in items])
    turn = parse_completion(text, tools=TOOLS)
    assert turn.final_answer is None and (turn.error or turn.tool_calls)


@SETTINGS
@given(_PROSE, st.sampled_from(sorted(ESCAPED)), st.sampled_from(TAGGED_FORMS), calls(), _PROSE,
       st.lists(st.integers(0, 900), max_size=12))
def test_property_escaped_markup_is_text_never_a_call(
    before: str, spelling: str, form: str, call: tuple[str, dict[str, str]], after: str, cuts: list[int]
) -> None:
    """Issue 30: escaped markup (`&lt;tool_code&gt;`, `&#60;name&#62;`, `&lt;tool_code>`) is a quoted observation
    or a copy of one; it never runs, and the answer keeps it as written."""
    name, args = call
    text = _lead(before) + ESCAPED[spelling](FORMS[form](name, args)) + "\n" + after
    turn = _stream_checked(text, cuts)
    assert turn.tool_calls == (), (spelling, form, text)
    if turn.error is None:
        assert turn.final_answer is not None and ESCAPED[spelling](FORMS[form](name, args)).strip() in text
