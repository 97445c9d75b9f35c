"""The protocol grammar in the hermes tool dialect (`<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>`): the
same rules as mylm's (a bare answer may end the turn, calls are bounded, no tool is forced under tool_choice auto),
what it accepts parses to schema-valid calls, every call mylm writes in the dialect is accepted, and llama.cpp
takes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mylm.constrain import ToolSpec, compile_protocol, select_constraints
from mylm.core.types import ToolCall
from mylm.protocol.canonical import format_tool_call
from mylm.protocol.dialects import format_call
from mylm.protocol.parser import parse_completion
from mylm.tools.validation import validate
from tests.constrain.gbnf_support import accepts, parse_gbnf, sample
from tests.constrain.test_grammar_properties import TOOLS, _builtin_specs, _chooser, _values
from tests.support import engine_missing
from tests.test_small_models import _repetition_cost

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
          "required": ["path"], "additionalProperties": False}


def hermes(tools: list[ToolSpec], **options: Any) -> Any:
    return compile_protocol(tools, dialect="hermes", **options)


def call(arguments: str, name: str = "read_file") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tools=TOOLS, multiple=st.booleans(), data=st.data())
def test_every_string_the_hermes_grammar_accepts_parses_to_schema_valid_calls_or_an_answer(
    tools: list[tuple[str, dict[str, Any]]], multiple: bool, data: st.DataObject
) -> None:
    rules = parse_gbnf(hermes([ToolSpec(n, s) for n, s in tools], multiple_calls=multiple).turn)
    text = sample(rules, _chooser(data), budget=300)
    assert accepts(rules, text), text
    parsed = parse_completion(text)
    assert parsed.error is None, (text, parsed.error)
    assert "<tool_code>" not in text
    if "</tool_call>" in text:  # a call, its opening tag left out where it starts the reply
        assert parsed.tool_calls and (multiple or len(parsed.tool_calls) == 1), text
        schemas = dict(tools)
        for made in parsed.tool_calls:
            if made.name in schemas:
                assert validate(schemas[made.name], made.arguments)[1] == [], text
            else:  # the way to call a tool that is not offered (so none is forced): any object
                assert isinstance(made.arguments, dict), text
    else:
        assert not parsed.tool_calls and (parsed.final_answer or "").strip(), text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tools=TOOLS, data=st.data())
def test_every_hermes_call_mylm_writes_is_accepted(tools: list[tuple[str, dict[str, Any]]], data: st.DataObject) -> None:
    name, schema = data.draw(st.sampled_from(tools))
    arguments = data.draw(_values(schema))
    grammar = hermes([ToolSpec(n, s) for n, s in tools])
    written = format_call(ToolCall(name, arguments), "hermes")
    assert accepts(parse_gbnf(grammar.turn), "Let me check.\n" + written), written
    assert accepts(parse_gbnf(grammar.call), written), written


def test_the_hermes_grammar_keeps_mylm_s_rules() -> None:
    rules = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)]).turn)
    assert accepts(rules, call('{"path": "a.txt", "n": 3}'))
    assert accepts(rules, "I will read it.\n" + call('{"path": "a.txt"}'))
    for bad in ('{"n": 3}', '{"path": 1}', '{"path": "a", "extra": 1}', '{"path": "a", "n": -1}', '{"path": "a"'):
        assert not accepts(rules, call(bad)), bad
    # Only the dialect's form: mylm's block is not a call here, nor is a call without its tags or its newlines.
    assert not accepts(rules, format_tool_call(ToolCall("read_file", {"path": "a"})))
    assert not accepts(rules, '<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>')
    # A bare answer ends the turn; an answer may be tagged; neither may be empty.
    assert accepts(rules, "2000")
    assert accepts(rules, "<final_answer>42</final_answer>")
    assert not accepts(rules, "<final_answer>  </final_answer>")
    # Another name is a call to no tool (corrected, never forced into read_file), but not when a call is required.
    assert accepts(rules, call('{"anything": [1]}', name="calculate_triangle_area"))
    required = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)], require_call=True).turn)
    assert not accepts(required, call('{"path": "a"}', name="write_file"))
    assert not accepts(required, "2000") and accepts(required, call('{"path": "a"}'))
    # A prefix of a real name is another name; the real name only with its own schema.
    assert accepts(rules, call("{}", name="read_fil"))
    assert not accepts(rules, call('{"n": 1}'))


def test_the_hermes_grammar_bounds_the_calls() -> None:
    one = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)]).turn)
    two = call('{"path": "a"}') + "\n" + call('{"path": "b"}')
    assert not accepts(one, two)
    several = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)], multiple_calls=True, max_calls=3).turn)
    assert accepts(several, two)
    assert accepts(several, "\n".join([call('{"path": "a"}')] * 3))
    assert not accepts(several, "\n".join([call('{"path": "a"}')] * 4))


def test_a_name_that_needs_escaping_is_written_as_json() -> None:
    odd = 'say "hi"\\'
    grammar = hermes([ToolSpec(odd, {"type": "object"})])
    written = format_call(ToolCall(odd, {}), "hermes")
    assert '"name": "say \\"hi\\"\\\\"' in written
    assert accepts(parse_gbnf(grammar.turn), written)


def test_a_call_after_prose_starts_its_own_line() -> None:
    # The parser reads `<tool_call>` after an indented line's text as part of a code block, so the grammar
    # puts the call on a line of its own, as the Qwen2.5 template writes it.
    rules = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)]).turn)
    prose = "Let me read it:\n\tthe file a"
    assert accepts(rules, prose + "\n" + call('{"path": "a"}'))
    assert not accepts(rules, prose + call('{"path": "a"}'))
    assert parse_completion(prose + "\n" + call('{"path": "a"}')).tool_calls
    assert not parse_completion("\tthe file a" + call('{"path": "a"}')).tool_calls  # what the rule avoids


def test_select_constraints_sends_the_dialect_s_trigger() -> None:
    turn, answer = select_constraints([ToolSpec("read_file", SCHEMA)], mode="auto", multiple_calls=False,
                                      max_tokens=512, dialect="hermes")
    assert turn is not None and answer is not None
    assert turn.trigger == "<tool_call>" and turn.lazy_grammar is not None
    assert accepts(parse_gbnf(turn.lazy_grammar), call('{"path": "a"}'))
    assert "<tool_call>" not in answer.grammar
    with pytest.raises(ValueError, match="dialect"):
        compile_protocol([ToolSpec("read_file", SCHEMA)], dialect="pythonic")


@pytest.mark.parametrize("multiple", [False, True])
def test_the_hermes_grammar_stays_within_llama_cpp_s_repetition_limit(multiple: bool) -> None:
    grammar = hermes(_builtin_specs(), multiple_calls=multiple)
    for text in (grammar.turn, grammar.call, grammar.answer):
        assert _repetition_cost(text) <= 2000


def test_llama_cpp_compiles_the_hermes_grammars() -> None:
    reason = engine_missing(needs=())
    if reason is not None:
        pytest.skip(reason)
    from mylm.providers.local_engine import _module

    llama_cpp = _module("llama_cpp")
    odd = ToolSpec('say "hi"', {"type": "object", "properties": {"x": {"enum": ["a", 1, None]}}})
    for multiple in (False, True):
        for require in (False, True):
            grammar = hermes([*_builtin_specs(), odd], multiple_calls=multiple, require_call=require)
            for text in (grammar.turn, grammar.call, grammar.answer):
                llama_cpp.LlamaGrammar.from_string(text, verbose=False)
                parse_gbnf(text)
    assert json.loads('"say \\"hi\\""') == odd.name


def test_a_hermes_call_is_never_written_as_bare_json() -> None:
    # Qwen2.5-Coder 0.5B leaves its `<tool_call>` out: it wrote the JSON alone as a bare answer: `{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}`
    # (BFCL simple_python_0), which the parser refuses untagged. Neither an answer nor the prose may open with it.
    rules = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)]).turn)
    bare = '{"name": "read_file", "arguments": {"path": "a"}}'
    for text in (bare, "\n" + bare, " " + bare, "[" + bare + "]", bare + "\n" + call('{"path": "a"}')):
        assert not accepts(rules, text), text
    # Started at once, the JSON is closed as the call it is, which the parser reads.
    closed = bare + "\n</tool_call>"
    assert accepts(rules, closed) and accepts(parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)], require_call=True).turn), closed)
    (read,) = parse_completion(closed, tools={"read_file": ("path", "n")}).tool_calls
    assert (read.name, read.arguments) == ("read_file", {"path": "a"})
    several = parse_gbnf(hermes([ToolSpec("read_file", SCHEMA)], multiple_calls=True).turn)
    assert accepts(several, closed) and not accepts(several, closed + "\n" + call('{"path": "b"}'))
    assert accepts(rules, "The call is:\n" + call('{"path": "a"}'))
    assert accepts(rules, "Result: {1, 2}") and accepts(rules, "2000")
    # mylm's dialect is unchanged: its prose may open with anything but its own markers.
    mylm = parse_gbnf(compile_protocol([ToolSpec("read_file", SCHEMA)]).turn)
    assert accepts(mylm, "{1, 2} is a set.")
