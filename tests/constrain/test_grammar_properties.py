"""The protocol grammar, by property: what it accepts always parses to schema-valid calls or an answer, and every
canonical call mylm writes (for arguments valid against the schema) is accepted. Checked on the grammar text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mylm.constrain import ToolSpec, compile_protocol
from mylm.protocol.canonical import format_tool_call
from mylm.protocol.parser import parse_completion
from mylm.tools.validation import validate
from mylm.core.types import ToolCall
from tests.constrain.gbnf_support import accepts, parse_gbnf, sample
from tests.support import engine_missing

NAMES = st.sampled_from(["path", "n", "mode", "a b", "é", 'q"x', "items", "x-y"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({"type": "string"}),
        st.integers(1, 3).map(lambda n: {"type": "string", "minLength": n}),
        st.just({"type": "integer"}),
        st.just({"type": "integer", "minimum": 0}),
        st.just({"type": "number"}),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.just({}),
        st.just({"type": ["string", "null"]}),
        st.lists(SCALARS, min_size=1, max_size=4, unique_by=lambda v: json.dumps(v)).map(lambda v: {"enum": v}),
        st.lists(st.text(max_size=6), min_size=1, max_size=4, unique=True).map(
            lambda v: {"type": "string", "enum": v}
        ),
        SCALARS.map(lambda v: {"const": v}),
    )


def _object(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        names = draw(st.lists(NAMES, min_size=0, max_size=4, unique=True))
        properties = {n: draw(children) for n in names}
        required = [n for n in names if draw(st.booleans())]
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        if draw(st.booleans()):
            schema["additionalProperties"] = False
        return schema

    return build()


SCHEMAS = st.recursive(
    _leaf(),
    lambda children: st.one_of(
        _object(children),
        st.tuples(children, st.integers(0, 2), st.integers(0, 3)).map(
            lambda t: {"type": "array", "items": t[0], "minItems": min(t[1], t[2]), "maxItems": max(t[1], t[2])}
        ),
        children.map(lambda c: {"type": "array", "items": c}),
        st.lists(children, min_size=2, max_size=3).map(lambda cs: {"anyOf": cs}),
    ),
    max_leaves=8,
)
TOOLS = st.lists(
    st.tuples(st.sampled_from(["read_file", "run", "x", "done"]), _object(SCHEMAS)),
    min_size=1, max_size=3, unique_by=lambda t: t[0],
)


def _chooser(data: st.DataObject) -> Any:
    return lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0


def _check_turn(text: str, tools: dict[str, dict[str, Any]], multiple: bool) -> None:
    parsed = parse_completion(text)
    assert parsed.error is None, (text, parsed.error)
    if "<tool_code>" in text:
        assert parsed.tool_calls, text
        assert multiple or len(parsed.tool_calls) == 1
        for call in parsed.tool_calls:
            if call.name not in tools:
                # The grammar's way to call a tool that is not offered (so none is forced): any object.
                assert isinstance(call.arguments, dict), text
                continue
            _, problems = validate(tools[call.name], call.arguments)
            assert problems == [], (text, problems)
    else:
        assert not parsed.tool_calls
        assert (parsed.final_answer or "").strip(), text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tools=TOOLS, multiple=st.booleans(), data=st.data())
def test_every_string_the_grammar_accepts_parses_to_schema_valid_calls_or_an_answer(
    tools: list[tuple[str, dict[str, Any]]], multiple: bool, data: st.DataObject
) -> None:
    grammar = compile_protocol([ToolSpec(n, s) for n, s in tools], multiple_calls=multiple)
    rules = parse_gbnf(grammar.turn)
    text = sample(rules, _chooser(data), budget=300)
    assert accepts(rules, text), text  # the sampler and the recogniser agree on the grammar's reading
    _check_turn(text, dict(tools), multiple)


def _values(schema: Any) -> st.SearchStrategy[Any]:
    """Values valid against a schema of the generated subset, properties in declared order."""
    if not isinstance(schema, dict) or not schema:
        return st.recursive(SCALARS, lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=3), c,
                                                                                         max_size=2), max_leaves=4)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([_values(s) for s in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_values({**schema, "type": k}) for k in kind])
    if kind == "string" and "minLength" in schema:
        # Known gap: a run of two or more `<` inside a counted string is not accepted.
        return st.text(st.characters(exclude_categories=("Cs",), exclude_characters="<"),
                       min_size=schema["minLength"], max_size=12)
    if kind == "string":
        return st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
    if kind == "integer":
        return st.integers(0 if "minimum" in schema else -(10**12), 10**12)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**9), 10**9)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(_values(schema.get("items", {})), min_size=schema.get("minItems", 0),
                        max_size=schema.get("maxItems", 3))
    if kind == "object":
        @st.composite
        def build(draw: st.DrawFn) -> dict[str, Any]:
            out = {}
            for name, prop in schema.get("properties", {}).items():
                if name in schema.get("required", ()) or draw(st.booleans()):
                    out[name] = draw(_values(prop))
            return out

        return build()
    raise AssertionError(schema)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tools=TOOLS, data=st.data(), thought=st.text(st.characters(exclude_characters="<`~",
                                                                     exclude_categories=("Cs",)), max_size=20))
def test_every_canonical_call_mylm_writes_is_accepted(
    tools: list[tuple[str, dict[str, Any]]], data: st.DataObject, thought: str
) -> None:
    name, schema = data.draw(st.sampled_from(tools))
    arguments = data.draw(_values(schema))
    assert validate(schema, arguments)[1] == []
    assert all(not isinstance(v, float) or math.isfinite(v) for v in arguments.values())
    grammar = compile_protocol([ToolSpec(n, s) for n, s in tools])
    text = thought + format_tool_call(ToolCall(name, arguments))
    assert accepts(parse_gbnf(grammar.turn), text), text
    assert accepts(parse_gbnf(grammar.call), format_tool_call(ToolCall(name, arguments)))


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_the_summary_grammar_accepts_only_answers(data: st.DataObject) -> None:
    grammar = compile_protocol([ToolSpec("read_file", {"type": "object", "properties": {"path": {"type": "string"}}})])
    rules = parse_gbnf(grammar.answer)
    text = sample(rules, _chooser(data))
    parsed = parse_completion(text)
    assert not parsed.tool_calls and parsed.error is None and (parsed.final_answer or "").strip(), text
    assert not accepts(rules, '<tool_code>\n<name>read_file</name>\n<parameters>\n{}\n</parameters>\n</tool_code>')


def test_grammar_rejects_what_the_schema_forbids() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer", "minimum": 0},
                                               "mode": {"enum": ["r", "w"]}},
              "required": ["path"], "additionalProperties": False}
    rules = parse_gbnf(compile_protocol([ToolSpec("read_file", schema)]).turn)

    def call(params: str, name: str = "read_file") -> str:
        return f"Let me look.\n<tool_code>\n<name>{name}</name>\n<parameters>\n{params}\n</parameters>\n</tool_code>"

    assert accepts(rules, call('{"path": "a.txt", "n": 3, "mode": "w"}'))
    assert accepts(rules, call('{"path": "C:\\\\dir\\\\<\\/x>"}'))
    assert accepts(rules, "<final_answer>42</final_answer>")
    for bad in ('{"n": 3}', '{"path": 1}', '{"path": "a", "extra": 1}', '{"path": "a", "n": -1}',
                '{"path": "a", "mode": "x"}', '{"path": "a</parameters>"}', '{"path": "a"'):
        assert not accepts(rules, call(bad)), bad
    # Another name is a call to no tool (never forced into read_file; the runner corrects it), but not under
    # tool_choice required, where it must be one of the tools.
    assert accepts(rules, call('{"path": "a"}', name="write_file"))
    required = parse_gbnf(compile_protocol([ToolSpec("read_file", schema)], require_call=True).turn)
    assert not accepts(required, call('{"path": "a"}', name="write_file"))
    assert not accepts(rules, "I think <tool_code> is next" + call('{"path": "a"}'))
    # Prose alone is a bare answer: the model may stop after it.
    assert accepts(rules, "Just prose with no answer tags.")
    assert not accepts(rules, "<final_answer>   </final_answer>")
    named = parse_gbnf(compile_protocol([ToolSpec("read_file", {**schema, "properties": {
        "path": {"type": "string", "minLength": 2}}})]).turn)
    assert accepts(named, call('{"path": "ab"}')) and accepts(named, call('{"path": "a<"}'))
    assert not accepts(named, call('{"path": "a"}')) and not accepts(named, call('{"path": ""}'))
    counted = parse_gbnf(compile_protocol([ToolSpec("read_file", {"type": "object", "properties": {
        "offset": {"type": "integer", "minimum": 1}}})]).turn)
    assert accepts(counted, call('{"offset": 10}')) and not accepts(counted, call('{"offset": 0}'))
    assert not accepts(rules, "<final_answer>done<end_of_turn></final_answer>")
    assert accepts(rules, "<final_answer>1 < 2</final_answer>")
    assert not accepts(named, call('{"path": "\\ud83d\\ude00"}'))  # one character, two escapes


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_no_sampled_answer_holds_a_made_up_tag(data: st.DataObject) -> None:
    # Issue 20: under the answer grammar a model looped on `<#15>\n<#16>\n...` until its token limit. Inside an
    # answer a `<` is a comparison; the only tag that can follow the opening one is the closing one.
    import re

    grammar = compile_protocol([]) if data.draw(st.booleans()) else compile_protocol(_builtin_specs())
    text = sample(parse_gbnf(data.draw(st.sampled_from([grammar.answer, grammar.turn]))), _chooser(data))
    body = text.partition("<final_answer>")[2].removesuffix("</final_answer>")
    assert re.search(r"<(?![ \t=])", body) is None, text


def test_the_answer_grammar_forbids_the_made_up_tag_loop() -> None:
    loop = "<final_answer>Done.\n" + "".join(f"<#{i}>\n" for i in range(15, 60)) + "</final_answer>"
    for grammar in (compile_protocol([]).answer, compile_protocol(_builtin_specs()).turn):
        rules = parse_gbnf(grammar)
        assert not accepts(rules, loop)
        for tag in ("<#15>", "Done <1>", "a <- b", "x<y", "<", "<end_of_turn>", "<|im_end|>"):
            assert not accepts(rules, f"<final_answer>{tag}</final_answer>"), tag
        for fine in ("a < b", "x <= 3", "2 <\t3", "1 < 2 and 3 > 2", "< 5% of them", "Done.\n\n#15 #16 >"):
            assert accepts(rules, f"<final_answer>{fine}</final_answer>"), fine


def _builtin_specs() -> list[ToolSpec]:
    from pathlib import Path

    from mylm.tools.builtin import builtin_tools

    return [ToolSpec(t.name, t.parameters) for t in builtin_tools(workspace=Path.cwd(), memory=True)]


def test_compiling_is_deterministic_and_cached() -> None:
    specs = _builtin_specs()
    first = compile_protocol(specs)
    assert compile_protocol(list(specs)) is first
    import subprocess
    import sys

    code = ("import json, sys; from mylm.constrain import ToolSpec, compile_protocol; "
            "print(compile_protocol([ToolSpec(n, s) for n, s in json.load(sys.stdin)]).turn, end='')")
    shipped = json.dumps([[s.name, s.parameters] for s in specs])
    other = subprocess.run([sys.executable, "-c", code], input=shipped, capture_output=True, text=True, check=True)
    assert other.stdout == first.turn
    for spec in specs:
        assert f"<name>{spec.name}</name>" in first.turn


def test_llama_cpp_compiles_the_grammars() -> None:
    """The engine's own GBNF parser reads every grammar mylm sends (built-in tools, several call modes)."""
    reason = engine_missing(needs=())
    if reason is not None:
        pytest.skip(reason)
    from mylm.providers.local_engine import _module  # the engine as mylm imports it (its /dev/null closed)

    llama_cpp = _module("llama_cpp")
    specs = _builtin_specs()
    nested = ToolSpec("deep", {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3},
        "any": {}, "kind": {"enum": ["a", 1, None, {"k": [1]}]}},
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "number"}}}}})
    for multiple in (False, True):
        grammar = compile_protocol([*specs, nested], multiple_calls=multiple)
        for text in (grammar.turn, grammar.call, grammar.answer):
            llama_cpp.LlamaGrammar.from_string(text, verbose=False)
            parse_gbnf(text)


def test_references_to_nowhere_constrain_nothing() -> None:
    """A remote or dangling `$ref` (also inside `allOf`) neither breaks the grammar nor forbids a value; the
    validator reads it the same way (the two share one resolver)."""
    schema = {
        "type": "object",
        "properties": {
            "path": {"allOf": [{"$ref": "https://example.com/schema.json"}, {"type": "string"}]},
            "mode": {"$ref": "#/$defs/missing"},
        },
        "required": ["path", "mode"],
    }
    grammar = compile_protocol([ToolSpec("read_file", schema)])
    call = format_tool_call(ToolCall("read_file", {"path": "a.txt", "mode": 3}))
    assert accepts(parse_gbnf(grammar.turn), call)
    assert validate(schema, {"path": "a.txt", "mode": 3})[1] == []
