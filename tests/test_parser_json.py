"""Lenient JSON and XML-ish reading: repair what is unambiguous, never corrupt, refuse to guess."""

from __future__ import annotations

from typing import Any

import pytest

from mylm.protocol import markup
from mylm.protocol.jsonrepair import JSONRepairError, loads


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r'{"path": "C:\temp"}', {"path": "C:\\temp"}),
        (r'{"path": "C:\temp\new"}', {"path": "C:\\temp\\new"}),
        (r'{"path": "C:\Users\me\temp"}', {"path": "C:\\Users\\me\\temp"}),
        (r'{"p": "\\server\share"}', {"p": "\\\\server\\share"}),
        ("{'text': 'what's up'}", {"text": "what's up"}),
        ('{"text": "what\'s up"}', {"text": "what's up"}),
        (r'{"code": "print(\"a\\nb\")"}', {"code": 'print("a\\nb")'}),
        (r'{"re": "\bword\b"}', {"re": "\\bword\\b"}),
        (r'{"tex": "\frac{1}{2}"}', {"tex": "\\frac{1}{2}"}),
        (r'{"ok": "tab\there"}', {"ok": "tab\there"}),
        (r'{"ok": "\\d+"}', {"ok": "\\d+"}),
        (r'{"u": "\u00e9\ud83d\ude00"}', {"u": "é😀"}),
    ],
)
def test_json_backslashes_are_never_corrupted(text: str, expected: dict[str, Any]) -> None:
    assert loads(text)[0] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": "x\n\ty"}', {"a": "x\n\ty"}),
        ("{'a': True, 'b': None, 'c': False}", {"a": True, "b": None, "c": False}),
        ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}),
        ('{"a": 1, // note\n "b": /* x */ 2, # py\n "c": 3}', {"a": 1, "b": 2, "c": 3}),
        (r'{"a": 1,\n "b": 2}', {"a": 1, "b": 2}),
        ("{command: 'ls'}", {"command": "ls"}),
        ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}),
        ("{'a': 'it\\'s'}", {"a": "it's"}),
        ("[[[]]]", [[[]]]),
    ],
)
def test_json_unambiguous_breakage_is_repaired(text: str, expected: Any) -> None:
    assert loads(text)[0] == expected


def test_json_valid_input_matches_the_standard_decoder() -> None:
    text = '{"a": [1, 2.5, -3e2, true, false, null], "b": {"c": "d\\u00e9\\n"}, "e": ""}'
    import json

    assert loads(text)[0] == json.loads(text)


def test_json_stops_at_an_end_tag_outside_strings() -> None:
    value, end = loads('{"a": "</x>"}</parameters>')
    assert value == {"a": "</x>"} and end == len('{"a": "</x>"}')


def test_json_autoclose_only_when_asked() -> None:
    with pytest.raises(JSONRepairError) as error:
        loads('{"a": {"b": 1}')
    assert error.value.incomplete and not error.value.in_string
    assert loads('{"a": {"b": 1}', autoclose=True)[0] == {"a": {"b": 1}}


def test_json_unterminated_string_is_incomplete_in_string() -> None:
    with pytest.raises(JSONRepairError) as error:
        loads('{"a": "abc', autoclose=True)
    assert error.value.incomplete and error.value.in_string


@pytest.mark.parametrize(
    ("text", "hint"),
    [('{"a": "say "hi""}', '\\"'), ('{"a" 1}', ""), ("{'a': 'b' 'c'}", "")],
)
def test_json_ambiguous_text_is_refused_with_position(text: str, hint: str) -> None:
    with pytest.raises(JSONRepairError) as error:
        loads(text)
    assert error.value.lineno == 1 and error.value.colno > 1
    assert hint in error.value.hint


def test_json_deep_nesting_does_not_recurse() -> None:
    depth = 50_000
    value, _ = loads("[" * depth + "]" * depth)
    for _ in range(depth - 1):
        value = value[0]
    assert value == []


# ------------------------------------------------------------------------------------------- markup


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ls &amp;&amp; pwd", "ls && pwd"),
        ("a &lt; b &#62; c &#x41;", "a < b > c A"),
        ("<p>a &amp; b</p>", "<p>a &amp; b</p>"),  # literal markup: entities are content
        ("a && b &amp; c", "a && b &amp; c"),  # a bare & shows the text was not escaped
        ("ls &c;", "ls &c;"),  # an undeclared entity is never expanded
        ("&#0; &#xD800;", "&#0; &#xD800;"),  # not characters XML allows
    ],
)
def test_markup_entities_decode_only_when_consistently_escaped(raw: str, expected: str) -> None:
    assert markup.decode_entities(raw) == expected


def test_markup_cdata_is_unwrapped_in_text_but_kept_in_markup() -> None:
    assert markup.text_value("<![CDATA[a < b && c]]>") == "a < b && c"
    assert markup.text_value("x &amp; <![CDATA[<y>]]>") == "x & <y>"
    assert markup.text_value("<root><![CDATA[z]]></root>") == "<root><![CDATA[z]]></root>"
    assert markup.text_value("<![CDATA[unclosed") == "<![CDATA[unclosed"


def test_markup_children_forms() -> None:
    read = markup.read_children('<a>1</a><parameter=b>2</parameter><parameter name="c">3</parameter><d/>')
    assert [(c.key, c.value) for c in read.items] == [("a", "1"), ("b", "2"), ("c", "3"), ("d", "")]
    assert not read.unclosed and not read.stray


def test_markup_children_unclosed_last_value_is_flagged() -> None:
    read = markup.read_children("<a>1</a><b>partial")
    assert read.unclosed and read.items[-1].value == "partial"


def test_markup_children_stray_text_is_reported() -> None:
    assert markup.read_children("ls -la").stray == "ls -la"


def test_markup_trim_value_keeps_inner_layout() -> None:
    assert markup.trim_value("  a.txt ") == "a.txt"
    assert markup.trim_value("\n  def f():\n    pass\n") == "  def f():\n    pass"


def test_markup_dtd_positions_ignore_plain_html_doctype() -> None:
    assert markup.dtd_positions("<!DOCTYPE html><p/>") == []
    assert markup.dtd_positions('<!DOCTYPE r SYSTEM "file:///etc/passwd">') == [0]
    assert markup.dtd_positions("x <!ENTITY a 'b'>") == [2]
