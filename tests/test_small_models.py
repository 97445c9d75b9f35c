"""What the first real capable small models (Qwen2.5-Coder 0.5B and 1.5B Instruct) did to mylm's defaults, one
class per test, each from the model's real text or the run that showed it (issue "Real small models finish real
tasks"): a grammar that forbade stopping, a tool forced where none fits, one call repeated to `max_tokens`,
placeholders called literally, corrections that arrived HTML-escaped, an empty turn recorded as "(empty reply)"
and copied back as the answer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mylm import Agent, StopReason
from mylm.agent.fit import COUNT_GRAMMAR
from mylm.agent.step import ModelStep, StepConfig, ToolDefinition, drain
from mylm.constrain import ToolSpec, compile_protocol
from mylm.core.types import ErrorEvent, Message, ToolCall, ToolResultEvent
from mylm.prompts import PromptLoader, sample_variables
from mylm.protocol.canonical import format_tool_call
from mylm.protocol.examples import example_arguments, example_tool
from mylm.testing import ScriptedLLM
from mylm.tools.builtin import builtin_tools
from mylm.tools.validation import validate
from tests.constrain.gbnf_support import accepts, parse_gbnf

PLACEHOLDERS = re.compile(r"TOOL_NAME|\"ARGUMENT\"|\"VALUE\"")
BMI = ToolDefinition("determine_body_mass_index", "Calculate the body mass index.", {
    "type": "object",
    "properties": {"weight": {"type": "number"}, "height": {"type": "number"}},
    "required": ["weight", "height"],
})


def tools(tmp_path: Path) -> list[Any]:
    return builtin_tools(workspace=tmp_path, memory=False)


# ---------------------------------------------------------------------------------------- the grammar


def grammar(specs: list[ToolSpec], **options: Any) -> dict[str, Any]:
    return parse_gbnf(compile_protocol(specs, **options).turn)


def test_a_bare_answer_ends_the_turn_under_the_grammar() -> None:
    # Qwen2.5-Coder 0.5B answered "2000" and could not stop: the grammar wanted a call or <final_answer> after
    # any prose, so greedy decoding went on "2000000000…" until the token limit.
    rules = grammar([ToolSpec(BMI.name, BMI.parameters)])
    assert accepts(rules, "2000")
    assert accepts(rules, "The file has 3 lines.")
    assert accepts(rules, "Let me check.\n<final_answer>3</final_answer>")
    assert not accepts(rules, "")  # an empty turn is still not a turn
    # A long answer goes in <final_answer> (past the prose cap the model must choose: at 2000 characters the 1.5B
    # model worked BFCL questions out by hand instead of calling the tool).
    assert accepts(rules, "word " * 70) and not accepts(rules, "word " * 90)
    assert accepts(rules, "Done.\n<final_answer>" + "word " * 150 + "</final_answer>")
    # The 1.5B model ended an answer with "< /final_answer> < /tool_code" when the tag itself was meant.
    assert not accepts(rules, "<final_answer>Fixed. < /final_answer></final_answer>")
    assert accepts(rules, "<final_answer>1 < 2, x <= 3</final_answer>")


def test_no_tool_is_forced_when_none_fits() -> None:
    # BFCL irrelevance: asked for a triangle's area with only a BMI tool, the 1.5B model was steered by the tool
    # names into determine_body_mass_index. The grammar now lets it name what it wanted (and be corrected).
    rules = grammar([ToolSpec(BMI.name, BMI.parameters)])
    wanted = format_tool_call(ToolCall("calculate_triangle_area", {"base": 10, "height": 5}))
    assert accepts(rules, wanted)
    # A real tool's name still takes only arguments its schema allows: the free branch excludes the names.
    assert not accepts(rules, format_tool_call(ToolCall(BMI.name, {"base": 10})))
    assert accepts(rules, format_tool_call(ToolCall(BMI.name, {"weight": 70, "height": 1.8})))
    # A prefix or an extension of a real name is another name, free to take any arguments.
    for other in ("determine_body_mass", "determine_body_mass_index2"):
        assert accepts(rules, format_tool_call(ToolCall(other, {"x": 1})))
    # tool_choice required (or a tool's name) still means one of the tools.
    required = grammar([ToolSpec(BMI.name, BMI.parameters)], require_call=True)
    assert not accepts(required, wanted) and not accepts(required, "2000")


def test_once_told_a_tool_is_not_there_the_model_can_name_only_real_ones() -> None:
    # Behind Cline the 1.5B called a made-up `extract_text`, was told there is none, copied that message back
    # twice, and the client got an empty answer. The branch that lets a model name the tool it wanted has done its
    # work once the model has been told: from then on a call names a real tool, or the model answers.
    llm = ScriptedLLM([format_tool_call(ToolCall("extract_text", {"file": "notes.txt"})), "It is 70.5 kg."])
    step = ModelStep(llm, [BMI], StepConfig(max_tokens=512, constrain="grammar"))
    corrections = step.corrections()
    _, first = drain(step.turn([Message("system", "s"), Message("user", "Weigh it.")], corrections=corrections,
                               check_calls=True))
    assert first.problem is not None and "extract_text" in first.problem and corrections.unknown_sent
    _, second = drain(step.turn([Message("system", "s"), Message("user", "Weigh it.")], corrections=corrections,
                                check_calls=True))
    assert second.usable and second.turn.parsed.final_answer == "It is 70.5 kg."
    before, after = (parse_gbnf(r.constraint.grammar) for r in llm.requests if r.constraint)
    made_up = format_tool_call(ToolCall("extract_text", {"file": "notes.txt"}))
    assert accepts(before, made_up) and not accepts(after, made_up)
    real = format_tool_call(ToolCall(BMI.name, {"weight": 70, "height": 1.8}))
    assert accepts(after, real) and accepts(after, "It is 70.5 kg.")


def test_calls_per_turn_are_bounded() -> None:
    spec = ToolSpec(BMI.name, BMI.parameters)
    one = format_tool_call(ToolCall(BMI.name, {"weight": 70, "height": 1.8}))
    rules = grammar([spec], multiple_calls=True, max_calls=3)
    assert accepts(rules, "\n".join([one] * 3))
    assert not accepts(rules, "\n".join([one] * 4))
    assert not accepts(grammar([spec]), "\n".join([one] * 2))


def test_an_identical_call_in_one_turn_ends_the_stream(tmp_path: Path) -> None:
    # Through `mylm serve` with parallel_tool_calls unset, the 1.5B model wrote its one call 12-20 times per
    # answer until max_tokens (160 s each). The stream is now closed at the first repeat.
    one = format_tool_call(ToolCall("list_dir", {"path": "."}))
    llm = ScriptedLLM(["\n".join([one] * 20), "Done."], stops="ignore")
    result = Agent(llm, tools(tmp_path), multiple_calls=True).run("What is here?")
    assert result.final_text == "Done."
    assert len([e for e in result.events if isinstance(e, ToolResultEvent)]) == 1


# ------------------------------------------------------------------------------- examples, never placeholders


def test_the_system_prompt_example_is_a_real_harmless_call(tmp_path: Path) -> None:
    # The 0.5B model called <name>TOOL_NAME</name> with {"ARGUMENT": "VALUE"}, copied from the system prompt.
    step = ModelStep(ScriptedLLM([]), tools(tmp_path))
    prompt = step.system_prompt(cwd=str(tmp_path))
    assert not PLACEHOLDERS.search(prompt)
    assert format_tool_call(ToolCall("list_dir", {"path": "."})) in prompt
    # Any tools: the example names one of them, with arguments its schema accepts.
    client = ModelStep(ScriptedLLM([]), [BMI])
    assert '<name>determine_body_mass_index</name>\n<parameters>\n{"weight": 1.0, "height": 1.0}' in (
        client.system_prompt()
    )


def test_no_packaged_template_teaches_a_placeholder() -> None:
    loader = PromptLoader.default()
    for name in loader.names():
        for variables in sample_variables(name):
            assert not PLACEHOLDERS.search(loader.render(name, **variables)), name


SCHEMA = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean"])})
    | st.fixed_dictionaries({"enum": st.lists(st.integers() | st.text(max_size=5), min_size=1, max_size=3)}),
    lambda children: st.fixed_dictionaries({"type": st.just("array"), "items": children})
    | st.fixed_dictionaries({
        "type": st.just("object"),
        "properties": st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6), children, max_size=3),
    }).map(lambda s: {**s, "required": list(s["properties"])}),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(properties=st.dictionaries(st.text("abcpathcommand_", min_size=1, max_size=10), SCHEMA, max_size=4))
def test_example_arguments_fit_their_schema(properties: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    arguments = example_arguments(schema)
    assert validate(schema, arguments)[1] == []


@given(junk=st.recursive(st.none() | st.integers() | st.text(max_size=4),
                         lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3)))
def test_example_arguments_never_fail_on_a_schema_from_a_client(junk: Any) -> None:
    # A client's tool schema is data: "required": 5 once crashed the system prompt (a 500 from mylm serve).
    schema = junk if isinstance(junk, dict) else {"properties": junk, "required": junk}
    json.dumps(example_arguments(schema), default=str)


def test_the_example_tool_is_a_reading_one_when_there_is_one(tmp_path: Path) -> None:
    listed = tools(tmp_path)
    chosen = example_tool(listed)
    assert chosen is not None and chosen.name == "list_dir"
    assert example_tool([BMI]) is BMI and example_tool([]) is None


# ----------------------------------------------------------------------------------- corrections as written


def test_a_repeated_mistake_gets_a_block_the_model_can_copy_as_written(tmp_path: Path) -> None:
    # The "write exactly" block reached the 0.5B model as &lt;tool_code>: the observation filter escaped
    # mylm's own suggestion, teaching a form that never runs.
    bad = format_tool_call(ToolCall("read_file", {"file": "notes.txt"}))
    llm = ScriptedLLM([bad, bad, "Done."])
    Agent(llm, tools(tmp_path)).run("Read notes.txt")
    second = llm.requests[2].messages[-1].content
    assert '<tool_code>\n<name>read_file</name>\n<parameters>\n{"path": "' in second
    assert "&lt;tool_code" not in second and not PLACEHOLDERS.search(second)


def test_a_parser_correction_teaches_a_real_call_as_written(tmp_path: Path) -> None:
    # The parser's own messages carried a TOOL_NAME block; through the observation filter it arrived escaped.
    nameless = '<tool_code>\n<parameters>{"path": "."}</parameters>\n</tool_code>'
    llm = ScriptedLLM([nameless, "There are two files."], stops="ignore")
    Agent(llm, tools(tmp_path)).run("What is here?")
    correction = llm.requests[1].messages[-1].content
    assert "has no <name>" in correction and "<tool_code>\n<name>list_dir</name>" in correction
    assert "&lt;tool_code" not in correction and not PLACEHOLDERS.search(correction)


def test_a_command_written_as_a_tool_name_gets_the_call_that_runs_it(tmp_path: Path) -> None:
    # The 0.5B model wrote <name>python3 test_stats.py</name>.
    llm = ScriptedLLM([format_tool_call(ToolCall("python3 test_stats.py", {})), "ok"])
    Agent(llm, tools(tmp_path)).run("Run the tests")
    observation = llm.requests[1].messages[-1].content
    expected = format_tool_call(ToolCall("execute_command", {"command": "python3 test_stats.py"}))
    assert "'python3 test_stats.py' is not a tool" in observation and expected in observation


def test_the_unknown_tool_message_lists_only_the_tools_the_model_was_shown(tmp_path: Path) -> None:
    # It listed read_output, which the system prompt never showed.
    llm = ScriptedLLM([format_tool_call(ToolCall("calculate_area", {"base": 3})), "ok"])
    Agent(llm, tools(tmp_path)).run("area?")
    observation = llm.requests[1].messages[-1].content
    assert "There is no tool named 'calculate_area'" in observation and "read_output" not in observation
    assert "if none of them can do what you need, reply with your answer instead" in observation


def test_a_made_up_tool_called_again_is_told_to_answer_never_shown_a_real_tool_to_copy(tmp_path: Path) -> None:
    # BFCL irrelevance, Qwen2.5-Coder-1.5B: asked a question no tool fits, it called `find_roots`, and again after
    # the unknown-tool correction. The second correction was a ready-made call of a real tool to copy, which
    # pushes the model to call the wrong tool; it must say how to answer instead.
    made_up = format_tool_call(ToolCall("find_roots", {"a": 1, "b": -3, "c": 2}))
    llm = ScriptedLLM([made_up, made_up, "The roots are 1 and 2."])
    result = Agent(llm, tools(tmp_path)).run("Find the roots of x^2 - 3x + 2.")
    assert result.final_text == "The roots are 1 and 2."
    second = llm.requests[2].messages[-1].content
    assert "same problem" in second and "To answer, write plain text" in second
    assert "<tool_code>" not in second
    # a name close to a real tool still gets that tool's call to copy
    near = format_tool_call(ToolCall("list_dirs", {"path": "."}))
    llm = ScriptedLLM([near, near, "ok"])
    Agent(llm, tools(tmp_path)).run("What is here?")
    assert "<name>list_dir</name>" in llm.requests[2].messages[-1].content


# --------------------------------------------------------------------------- empty and invented replies


@pytest.mark.parametrize("reply", [
    "<observation>\nmain.py\nutils.py\n</observation>\nThere are 2 Python files.",
    "Let me check.\n<observation>\n3\n</observation>",
])
def test_an_invented_observation_is_corrected_not_answered(tmp_path: Path, reply: str) -> None:
    # A reply that opened with <observation> was cut to nothing; after "(empty reply)" was recorded, the model
    # answered the words "(empty reply)", which ended the run as its answer.
    llm = ScriptedLLM([reply, format_tool_call(ToolCall("list_dir", {"path": "."})), "There are 2 files."],
                      stops="ignore")
    result = Agent(llm, tools(tmp_path)).run("How many Python files are here?")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "There are 2 files."
    correction = llm.requests[1].messages[-1].content
    assert "an observation (a tool's result) that you wrote yourself" in correction
    assert all("(empty reply)" not in m.content for r in llm.requests for m in r.messages)


@pytest.mark.parametrize("reply", [
    "< observation>\n4 Python files are in the directory.",
    "<\u200bobservation>\n4 Python files are in the directory.",
    "4 Python files are in the directory.\n< observation>\n[4 files]",
])
def test_an_observation_tag_the_grammar_defused_is_not_part_of_the_answer(tmp_path: Path, reply: str) -> None:
    # The quick start, 29 November: Qwen2.5-Coder-1.5B began its answer with `<observation>`; under the grammar it
    # came out as `< observation>`, which no parser reads as a tag, and the CLI printed that line above "4 Python
    # files are in the directory." The history keeps the reply as written (the next request extends this one).
    llm = ScriptedLLM([format_tool_call(ToolCall("list_dir", {"path": "."})), reply], stops="ignore")
    result = Agent(llm, tools(tmp_path)).run("How many Python files are here?")
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.final_text == "4 Python files are in the directory."
    assert result.history[-1].content == reply


def test_an_empty_turn_is_not_recorded_as_a_placeholder(tmp_path: Path) -> None:
    llm = ScriptedLLM(["", "It is here."])
    result = Agent(llm, tools(tmp_path)).run("Where?")
    assert result.final_text == "It is here."
    second = llm.requests[1].messages
    assert [m.role for m in second] == ["system", "user"]  # the correction joins the task: no made-up reply
    assert all("(empty reply)" not in m.content for m in result.history)


def test_step_records_an_empty_turn_as_nothing() -> None:
    step = ModelStep(ScriptedLLM([""]), [BMI], StepConfig())
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", "hi")]))
    assert not outcome.usable and outcome.reply == Message("assistant", "")


# ----------------------------------------------------------------------------------------- paced timeouts


class SlowModel:
    """A scripted model whose every turn takes `seconds` on a fake clock (a 1.5B model on a laptop CPU)."""

    def __init__(self, replies: list[str], seconds: float) -> None:
        self.now = 0.0
        self.seconds = seconds
        self.inner = ScriptedLLM(replies)

    def clock(self) -> float:
        return self.now

    def stream(self, request: Any) -> Any:
        self.now += self.seconds
        return self.inner.stream(request)


def test_a_paced_timeout_follows_a_slow_model_and_still_ends(tmp_path: Path) -> None:
    # The default 120 s ended most runs of the 1.5B model on a CPU: each turn took 20-60 s.
    step = format_tool_call(ToolCall("list_dir", {"path": "."}))
    slow = SlowModel([step, step.replace('"."', '"./"'), step.replace('"."', '"././"'), "Three entries."], 50.0)
    paced = Agent(slow, tools(tmp_path), timeout=120, pace_timeout=True, clock=slow.clock).run("What is here?")
    assert paced.stop_reason is StopReason.FINAL_ANSWER and slow.now == 200.0
    # Without pacing, the same run is cut at 120 s, and the message says how long it was allowed.
    fixed_model = SlowModel([step, step.replace('"."', '"./"'), step.replace('"."', '"././"'), "x"], 50.0)
    fixed = Agent(fixed_model, tools(tmp_path), timeout=120, clock=fixed_model.clock).run("What is here?")
    assert fixed.stop_reason is StopReason.TIMEOUT and "its 120 s timeout" in str(fixed.error)
    # A model that gets slower than its pace still meets a deadline: the paced limit is capped.
    stuck = SlowModel([step] * 3, 1000.0)
    ended = Agent(stuck, tools(tmp_path), timeout=120, pace_timeout=True, clock=stuck.clock,
                  max_repeated_calls=0).run("What is here?")
    assert ended.stop_reason is StopReason.TIMEOUT and "extended to" in str(ended.error)


def _repetition_cost(grammar: str) -> int:
    """The largest (rules inside a repeated group) x (its repeat count) in `grammar`, as llama.cpp's grammar
    parser counts it when it expands `(...){m,n}`: above 2000 it refuses the grammar ("number of rules that are
    going to be repeated multiplied by the new repetition exceeds sane defaults")."""
    worst = 0
    for match in re.finditer(r"\{(\d+),(\d+)\}", grammar):
        start = match.start()
        if grammar[start - 1] != ")":
            continue
        depth, i, groups = 0, start - 1, 0
        while i >= 0:
            if grammar[i] == ")" and grammar[i - 1] != "\\":
                depth += 1
                groups += 1
            elif grammar[i] == "(" and grammar[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    break
            i -= 1
        worst = max(worst, groups * (int(match[2]) - int(match[1])))
    return worst


@pytest.mark.parametrize("multiple", [False, True])
def test_the_grammar_stays_within_llama_cpp_s_repetition_limit(tmp_path: Path, multiple: bool) -> None:
    # An answer rule with a nested group inside its {0,1999} was refused by llama-cpp-python's llama.cpp at the
    # default max_tokens (4096): every in-process run failed before its first token.
    specs = [ToolSpec(t.name, t.parameters) for t in tools(tmp_path)]
    grammar = compile_protocol(specs, multiple_calls=multiple)
    for text in (grammar.turn, grammar.call, grammar.answer):
        assert _repetition_cost(text) <= 2000


def test_a_bfcl_answer_that_repeats_the_unknown_tool_correction_is_corrected_not_scored(tmp_path: Path) -> None:
    # BFCL simple_python_4, Qwen2.5-Coder-1.5B through the eval's protocol mode (a server's correction loop): it
    # called a made-up `calculate_discriminant`, then answered with the unknown-tool correction word for word,
    # which was taken as its answer.
    solve = ToolDefinition("solve_quadratic_equation", "Solve a quadratic equation.", {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                         "c": {"type": "integer"}}, "required": ["a", "b", "c"]})
    echo = ("There is no tool named 'calculate_discriminant'. The available tools are: solve_quadratic_equation. "
            "Call one of them; if none of them can do what you need, reply with your answer instead, without a "
            "tool call.")
    real = format_tool_call(ToolCall("solve_quadratic_equation", {"a": 2, "b": 6, "c": 5}))
    llm = ScriptedLLM([format_tool_call(ToolCall("calculate_discriminant", {"a": 2})), echo, real])
    step = ModelStep(llm, [solve], StepConfig(max_tokens=200, multiple_calls=True))
    messages = [Message("system", step.system_prompt()), Message("user", "Solve 2x^2 + 6x + 5 = 0.")]
    corrections = step.corrections()
    outcomes = []
    for _ in range(3):
        _, outcome = drain(step.turn(messages, deadline=None, corrections=corrections, check_calls=True))
        outcomes.append(outcome)
        if outcome.usable:
            break
        messages += [outcome.reply, Message("user", outcome.correction or "")]
    assert [o.usable for o in outcomes] == [False, False, True]
    assert "repeated the message mylm sent you" in (outcomes[1].correction or "")
    assert "Solve 2x^2 + 6x + 5 = 0." in (outcomes[1].correction or "")
    assert outcomes[2].calls[0].name == "solve_quadratic_equation"


def test_a_call_restated_with_more_arguments_in_one_turn_is_one_call(tmp_path: Path) -> None:
    # BFCL simple_python_2, Qwen2.5-Coder-1.5B: `math.hypot(x=4, y=5)` then `math.hypot(x=4, y=5, z=0)`.
    hypot = ToolDefinition("math.hypot", "Euclidean norm.", {
        "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
                                         "z": {"type": "integer"}}, "required": ["x", "y"]})
    reply = (format_tool_call(ToolCall("math.hypot", {"x": 4, "y": 5})) + "\n"
             + format_tool_call(ToolCall("math.hypot", {"x": 4, "y": 5, "z": 0})))
    step = ModelStep(ScriptedLLM([reply], stops="ignore"), [hypot], StepConfig(max_tokens=200, multiple_calls=True))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", "hypot of 4, 5?")],
                                 deadline=None, check_calls=True))
    assert [c.arguments for c in outcome.calls] == [{"x": 4, "y": 5}]
    # two cities, or no arguments beside some, are different calls
    weather = ToolDefinition("get_weather", "Weather.", {
        "type": "object", "properties": {"city": {"type": "string"}}})
    reply = "\n".join(format_tool_call(ToolCall("get_weather", a)) for a in ({"city": "Paris"}, {"city": "London"}, {}))
    step = ModelStep(ScriptedLLM([reply], stops="ignore"), [weather], StepConfig(max_tokens=200, multiple_calls=True))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()),
                                  Message("user", "weather in Paris and London, and here?")],
                                 deadline=None, check_calls=True))
    assert [c.arguments for c in outcome.calls] == [{"city": "Paris"}, {"city": "London"}, {}]


def test_calls_enumerating_values_the_question_never_named_are_cut_to_the_named_one() -> None:
    # BFCL simple_python_7, Qwen2.5-Coder-1.5B: "circumference of a circle with a radius of 4 inches" became eight
    # calls, one per unit (in, cm, m, km, ft, yd, mm, um); the cities a question names stay three calls.
    from mylm.agent.step import grounded

    units = tuple(ToolCall("calculate_circumference", {"radius": 4, "unit": u})
                  for u in ("in", "cm", "m", "km", "ft", "yd", "mm", "um"))
    asked = "Calculate the circumference of a circle with a radius of 4 inches.".casefold()
    assert grounded(units, asked) == units[:1]
    cities = tuple(ToolCall("get_weather", {"city": c}) for c in ("Paris", "London", "Tokyo"))
    assert grounded(cities, "what is the weather in paris, london and tokyo?") == cities
    # nothing named: the model listed options; its first choice is kept. Several tools: each one's calls alike
    assert grounded(units, "how long is it around?") == units[:1]
    mixed = (*cities, ToolCall("get_time", {"city": "Paris"}))
    assert grounded(mixed, "weather and time in paris") == (cities[0], mixed[-1])
    assert grounded(mixed, "weather in paris, london and tokyo, and the time in paris") == mixed
    # simple_python_13: the area under y=x^2 from 1 to 3, once per `method`, none named (BFCL's schema has no enum)
    methods = ("trapezoidal", "midpoint", "rectangle", "spline", "gauss")
    area = tuple(ToolCall("calculate_area_under_curve", {"function": "x**2", "interval": [1, 3], "method": m})
                 for m in methods)
    asked = "calculate the area under the curve y=x^2 from x=1 to x=3."
    assert grounded(area, asked) == area[:1]
    # simple_python_26: a speed in every unit; 15 and 17: `method` simpson then trapezoid, `formatted` true/false
    speeds = tuple(ToolCall("calculate_velocity", {"distance": 50, "duration": 2, "unit": u})
                   for u in ("km/h", "m/s", "mph", "knots"))
    assert grounded(speeds, "calculate the velocity of a car that travels a distance of 50 kilometers for a "
                            "duration of 2 hours?") == speeds[:1]
    assert grounded(area[:2], asked) == area[:1]
    both = tuple(ToolCall("get_prime_factors", {"number": 450, "formatted": f}) for f in (True, False))
    assert grounded(both, "what are the prime factors of 450?") == both[:1]
    # values a tool's result named (an observation is a user message): every call stays
    files = tuple(ToolCall("read_file", {"path": p}) for p in ("a.py", "b.py"))
    assert grounded(files, "read the python files\n<observation>a.py\nb.py\nc.txt</observation>") == files
    two = tuple(ToolCall("get_weather", {"city": c}) for c in ("Paris", "London"))
    assert grounded(two, "weather in paris and london?") == two


def test_calls_that_reshuffle_an_earlier_calls_values_are_dropped() -> None:
    # BFCL simple_python_2, Qwen2.5-Coder-0.5B under the grammar: one hypotenuse asked, four calls written.
    from mylm.agent.step import grounded

    sides = tuple(ToolCall("math.hypot", {"x": x, "y": y}) for x, y in ((4, 5), (5, 4), (5, 5), (4, 4)))
    assert grounded(sides, "calculate the hypotenuse of a right triangle given the lengths of the other two "
                           "sides as 4 and 5.") == sides[:1]
    # each call its own values: kept, even when some value recurs (BFCL parallel's shape); the price of the rule
    # is the rare question that asks for one call's values swapped (5x10 after 10x5)
    triangles = tuple(ToolCall("area", {"base": b, "height": h}) for b, h in ((10, 5), (15, 5), (5, 10)))
    assert grounded(triangles, "areas of triangles 10x5, 15x5 and 5x10") == triangles[:2]
    # simple_python_37, the 1.5B: the asked route, then routes between its own places
    route = tuple(ToolCall("route.estimate_time", {"start_location": a, "end_location": b, "stops": s})
                  for a, b, s in (("San Francisco", "Los Angeles", ["Santa Barbara", "Monterey"]),
                                  ("Los Angeles", "Monterey", ["Santa Barbara"]), ("Santa Barbara", "Monterey", [])))
    assert grounded(route, "estimate the travel time by car from san francisco to los angeles with stops at "
                           "santa barbara and monterey.") == route[:1]
    other = (ToolCall("area", {"base": 10, "height": 5}), ToolCall("area", {"base": 10}))
    assert grounded(other, "area") == other  # other arguments: not a reshuffle


def served(reply: str, tools: list[ToolDefinition], asked: str) -> Any:
    """The outcome of one multi-call step over `reply`, judged as `mylm serve` and `mylm eval` judge it."""
    step = ModelStep(ScriptedLLM([reply], stops="ignore"), tools, StepConfig(max_tokens=300, multiple_calls=True))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)],
                                 deadline=None, check_calls=True))
    return outcome


def test_real_calls_followed_by_calls_of_tools_that_do_not_exist_go_out_alone() -> None:
    # BFCL simple_python_4, Qwen2.5-Coder-1.5B: the right call, then the rest of its plan in made-up tools. The
    # whole reply used to be corrected, and the model then answered in prose: the right call was lost.
    solve = ToolDefinition("solve_quadratic_equation", "Roots of ax^2+bx+c.", {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                         "c": {"type": "integer"}}, "required": ["a", "b", "c"]})
    reply = ('<tool_code>\n<name>solve_quadratic_equation</name>\n<parameters>\n{"a": 2, "b": 6, "c": 5}\n'
             '</parameters>\n</tool_code>\n<tool_code>\n<name>calculate_discriminant</name>\n<parameters>\n'
             '{"a": 2, "b": 6, "c": 5}\n</parameters>\n</tool_code>\n<tool_code>\n<name>display_roots</name>\n'
             '<parameters>\n{"root1": 1, "root2": -3}\n</parameters>\n</tool_code>')
    asked = "Solve a quadratic equation where a=2, b=6, and c=5"
    outcome = served(reply, [solve], asked)
    assert outcome.usable and [(c.name, c.arguments) for c in outcome.calls] == [
        ("solve_quadratic_equation", {"a": 2, "b": 6, "c": 5})]
    # a made-up tool first is still corrected: there is nothing right to send
    outcome = served(reply[reply.index("<tool_code>\n<name>display_roots"):], [solve], asked)
    assert not outcome.usable and "display_roots" in (outcome.correction or "")


def test_options_that_differ_only_in_case_are_told_apart_by_case() -> None:
    # BFCL simple_python_64, Qwen2.5-Coder-1.5B: asked for the AA genotype's frequency, it called for AA, Aa and aa;
    # compared casefolded, the question named all three and all three went out (BFCL wants the one call).
    from mylm.agent.step import grounded

    genotypes = tuple(ToolCall("calculate_genotype_frequency", {"allele_frequency": 0.3, "genotype": g})
                      for g in ("AA", "Aa", "aa"))
    asked = "What is the genotype frequency of AA genotype in a population, given that allele frequency of A is 0.3?"
    assert grounded(genotypes, asked) == genotypes[:1]
    assert grounded(genotypes, "Frequencies of the AA, Aa and aa genotypes at 0.3") == genotypes
    # Values that only casefold alike elsewhere still match whatever their case: Paris is asked as "paris".
    cities = tuple(ToolCall("get_weather", {"city": c}) for c in ("Paris", "London"))
    assert grounded(cities, "weather in paris and london?") == cities


def test_a_reply_listing_options_is_cut_once_two_calls_are_options_the_question_never_named() -> None:
    # BFCL simple_python_7, Qwen2.5-Coder-1.5B: eight calls, one per unit, 23 s on two cores, where the first was
    # the one kept. The stream ends at the third call; the cities a question names are all written.
    from mylm.evaluation.runner import RecordingLLM

    circumference = ToolDefinition("calculate_circumference", "Circumference of a circle.", {
        "type": "object", "properties": {"radius": {"type": "integer"}, "unit": {"type": "string"}}})
    units = "\n".join(format_tool_call(ToolCall("calculate_circumference", {"radius": 4, "unit": u}))
                      for u in ("in", "cm", "m", "km", "ft", "yd", "mm", "um"))
    recorder = RecordingLLM(ScriptedLLM([units], chunk_size=5, stops="ignore"))
    step = ModelStep(recorder, [circumference], StepConfig(max_tokens=900, multiple_calls=True))
    asked = "Calculate the circumference of a circle with a radius of 4 inches."
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)],
                                 deadline=None, check_calls=True))
    assert [c.arguments["unit"] for c in outcome.calls] == ["in"]
    assert recorder.turns[0].text.count("<tool_code>") == 3

    weather = ToolDefinition("get_weather", "Weather.", {"type": "object", "properties": {"city": {"type": "string"}}})
    cities = ("Paris", "London", "Tokyo", "Rome")
    reply = "\n".join(format_tool_call(ToolCall("get_weather", {"city": c})) for c in cities)
    recorder = RecordingLLM(ScriptedLLM([reply], chunk_size=5, stops="ignore"))
    step = ModelStep(recorder, [weather], StepConfig(max_tokens=900, multiple_calls=True))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()),
                                  Message("user", "The weather in Paris, London, Tokyo and Rome?")],
                                 deadline=None, check_calls=True))
    assert [c.arguments["city"] for c in outcome.calls] == list(cities)
    assert recorder.turns[0].text.count("<tool_code>") == 4


#: BFCL simple_python_20, Qwen2.5-Coder-1.5B under the grammar: an HCF worked out by hand to the 400-character cap,
#: where the grammar let the prose only end ("-Div"); simple_python_30 was made to tag an answer it had not reached.
HCF_BY_HAND = ("To find the highest common factor (HCF) of 36 and 24, I'll follow these steps:\n\n1. **Prime "
               "Factorization of 36:**\n   - Divide 36 by 2: \\(36 \\div 2 = 18\\)\n   - Divide 18 by 2: \\(18 \\div "
               "2 = 9\\)\n   - Divide 9 by 3: \\(9 \\div 3 = 3\\)\n   - Divide 3 by 3: \\(3 \\div 3 = 1\\)\n   - Prime "
               "factorization of 36: \\(2^2 \\times 3^2\\)\n\n2. **Prime Factorization of 24:**\n   - Divide 24 by 2: "
               "\\(24 \\div 2 = 12\\)\n   -Div")


@pytest.mark.parametrize("reply", [HCF_BY_HAND[-400:], HCF_BY_HAND[-400:] + "<final_answer>0</final_answer>"],
                         ids=["bare", "forced-answer"])
def test_prose_stopped_at_the_grammar_cap_is_asked_again_once(reply: str) -> None:
    hcf = ToolDefinition("math.hcf", "Highest common factor of two numbers.", {
        "type": "object", "properties": {"number1": {"type": "integer"}, "number2": {"type": "integer"}},
        "required": ["number1", "number2"]})
    call = format_tool_call(ToolCall("math.hcf", {"number1": 36, "number2": 24}))
    llm = ScriptedLLM([reply, call], stops="ignore")
    step = ModelStep(llm, [hcf], StepConfig(max_tokens=1024, multiple_calls=True, constrain="auto"))
    messages = [Message("system", step.system_prompt()), Message("user", "Calculate the HCF of 36 and 24.")]
    corrections = step.corrections()
    _, outcome = drain(step.turn(messages, deadline=None, corrections=corrections, check_calls=True))
    assert not outcome.usable and "400 characters of working" in (outcome.correction or "")
    assert "call it now" in (outcome.correction or "")
    _, outcome = drain(step.turn([*messages, outcome.reply, Message("user", outcome.correction or "")],
                                 deadline=None, corrections=corrections, check_calls=True))
    assert [c.name for c in outcome.calls] == ["math.hcf"]
    # sent once: the same again is taken as it is; a finished sentence at the cap, or prose under it, is an answer
    again = ModelStep(ScriptedLLM([reply], stops="ignore"), [hcf], StepConfig(max_tokens=1024, multiple_calls=True, constrain="auto"))
    _, outcome = drain(again.turn(messages, deadline=None, corrections=corrections, check_calls=True))
    assert outcome.usable
    unconstrained = ModelStep(ScriptedLLM([reply], stops="ignore"), [hcf], StepConfig(max_tokens=1024))
    _, outcome = drain(unconstrained.turn(messages, deadline=None, check_calls=True))
    assert outcome.usable  # no grammar, no cap: the reply is what the model meant
    for whole in (HCF_BY_HAND[-399:] + ".", HCF_BY_HAND[-300:]):
        fine = ModelStep(ScriptedLLM([whole], stops="ignore"), [hcf], StepConfig(max_tokens=1024, multiple_calls=True, constrain="auto"))
        _, outcome = drain(fine.turn(messages, deadline=None, check_calls=True))
        assert outcome.usable


def test_a_real_call_with_values_from_nowhere_before_made_up_tools_is_corrected_whole() -> None:
    # BFCL irrelevance_0, Qwen2.5-Coder-1.5B: a triangle's area (base 10, height 5) with only a BMI tool offered;
    # it called the BMI tool with weight 1.0 and height 1.0, then made-up tools. That call is not sent out.
    bmi = ToolDefinition("determine_body_mass_index", "BMI from weight and height.", {
        "type": "object", "properties": {"weight": {"type": "number"}, "height": {"type": "number"}},
        "required": ["weight", "height"]})
    reply = ('<tool_code>\n<name>determine_body_mass_index</name>\n<parameters>\n{"weight": 1.0, "height": 1.0}\n'
             '</parameters>\n</tool_code>\n<tool_code>\n<name>calculate_area_of_triangle</name>\n<parameters>\n'
             '{"base": 10.0, "height": 5.0}\n</parameters>\n</tool_code>\n')
    asked = "Calculate the area of a triangle given the base is 10 meters and height is 5 meters."
    outcome = served(reply, [bmi], asked)
    assert not outcome.usable and "come from the task" in (outcome.correction or "")  # see made_up below
    # the values the question gives (5 as 5.0) are the model's own: that call goes out alone
    grounded_reply = reply.replace('"weight": 1.0, "height": 1.0', '"weight": 10, "height": 5.0')
    outcome = served(grounded_reply, [bmi], asked)
    assert [c.arguments for c in outcome.calls] == [{"weight": 10, "height": 5.0}]


@pytest.mark.parametrize(("asked", "call"), [
    # BFCL irrelevance, Qwen2.5-Coder-1.5B: the one tool at hand, with values from nowhere
    ("What are the latest movie releases?",
     ToolCall("calculate_velocity", {"initial_velocity": 0.0, "acceleration": 0.0, "time": 0.0})),
    ("Find the duration of flight between Los Angeles and Miami.",
     ToolCall("currency_converter", {"base_currency": "USD", "target_currency": "USD", "amount": 1.0})),
    ("What's the time right now?",
     ToolCall("calculate_time", {"distance": 0.0, "speed": 0.0, "round_to_nearest_second": True})),
])
def test_a_call_whose_values_come_from_nowhere_is_asked_about_once(asked: str, call: ToolCall) -> None:
    tool = ToolDefinition(call.name, "A tool.", {"type": "object", "properties": {
        k: {"type": "boolean" if isinstance(v, bool) else "number" if isinstance(v, float) else "string"}
        for k, v in call.arguments.items()}})
    llm = ScriptedLLM([format_tool_call(call), "<final_answer>I cannot tell with these tools.</final_answer>"],
                      stops="ignore")
    step = ModelStep(llm, [tool], StepConfig(max_tokens=300, multiple_calls=True))
    messages = [Message("system", step.system_prompt()), Message("user", asked)]
    corrections = step.corrections()
    _, outcome = drain(step.turn(messages, deadline=None, corrections=corrections, check_calls=True))
    assert not outcome.usable and "come from the task" in (outcome.correction or "")
    _, outcome = drain(step.turn([*messages, outcome.reply, Message("user", outcome.correction or "")],
                                 deadline=None, corrections=corrections, check_calls=True))
    assert outcome.usable and outcome.turn.parsed.final_answer == "I cannot tell with these tools."
    # asked once: the same call again goes out as it is
    again = ModelStep(ScriptedLLM([format_tool_call(call)], stops="ignore"), [tool],
                      StepConfig(max_tokens=300, multiple_calls=True))
    _, outcome = drain(again.turn(messages, deadline=None, corrections=corrections, check_calls=True))
    assert outcome.usable and outcome.calls


def test_values_the_conversation_names_or_text_the_model_writes_are_not_made_up() -> None:
    from mylm.agent.grounding import made_up

    said = "calculate the area of a circle with a radius of five meters, then list the files.".casefold()
    assert not made_up(ToolCall("circle_area", {"radius": 5.0, "units": "meters"}), said)  # "five" is 5
    assert not made_up(ToolCall("execute_command", {"command": "find . -name '*.py' | wc -l", "timeout": 30}), said)
    assert not made_up(ToolCall("list_dir", {"path": "."}), said)  # no number: not this shape
    assert made_up(ToolCall("circle_area", {"radius": 1.0}), said)
    # BFCL simple_python_128 and 132: numbers as people write them
    said = "a company with 100 million outstanding shares and a net income of $2,000,000".casefold()
    assert not made_up(ToolCall("dividend", {"outstanding_shares": 100000000}), said)
    assert not made_up(ToolCall("roe", {"net_income": 2000000}), said)


def test_calls_of_one_tool_that_only_flip_options_are_one_call() -> None:
    # BFCL multiple_0, Qwen2.5-Coder-1.5B: five calls of triangle_properties.get, its three booleans all true, all
    # false, then one true at a time. Each flips more than one option, so the one-varying-argument rule let all
    # five out; the question asked one thing.
    from mylm.agent.step import grounded

    flips = ((True, True, True), (False, False, False), (True, False, False), (False, True, False))
    calls = tuple(ToolCall("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3, "get_area": a,
                                                       "get_perimeter": p, "get_angles": g}) for a, p, g in flips)
    asked = ("Can I find the dimensions and properties of a triangle, if I know its three sides are 5 units, 4 "
             "units and 3 units long?")
    assert grounded(calls, asked) == calls[:1]
    # parallel_5's shape: two asked calls, each then written again with its option flipped; the asked two stay
    shows = tuple(ToolCall("shows", {"service": s, "show_list": li, "sort_by_rating": r}) for s, li, r in (
        ("Netflix", ["Friends"], True), ("Hulu", ["The Office"], True), ("Netflix", ["Friends"], False)))
    assert grounded(shows, "ratings of Friends on Netflix and The Office on Hulu, sorted") == shows[:2]
    # a value the question gives is never an option flipped
    two = tuple(ToolCall("area", {"side": s, "exact": True}) for s in (3, 4))
    assert grounded(two, "areas of squares of side 3 and 4") == two


# BFCL multiple_2, Qwen2.5-Coder-1.5B under mylm's grammar: every offered tool, each with "Brazil", then the first
# again (the identical call ends the turn).
BRAZIL = "".join(f'<tool_code>\n<name>country_info.{t}</name>\n<parameters>\n{{"country": "Brazil"}}\n</parameters>\n'
                 f'</tool_code>\n' for t in ("capital", "population", "largest_city", "capital"))
COUNT_TOOLS = [ToolDefinition(f"country_info.{t}", f"Fetch the {t.replace('_', ' ')} of a specified country.", {
    "type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]})
    for t in ("largest_city", "capital", "population")]


def test_calls_of_several_tools_for_a_question_asking_one_thing_are_the_first_call() -> None:
    asked = "What is the capital of Brazil?"
    llm = ScriptedLLM([BRAZIL], stops="ignore", counts=["One"])
    step = ModelStep(llm, COUNT_TOOLS, StepConfig(max_tokens=300, multiple_calls=True, constrain="grammar"))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)],
                                 deadline=None, check_calls=True, question=asked))
    assert outcome.usable and [c.name for c in outcome.calls] == ["country_info.capital"]
    # the fit check of the first call, then the count probe, which restates the question under its grammar
    assert len(llm.probes) == 2 and asked in llm.probes[1].messages[-1].content
    assert "One or Several" in llm.probes[1].messages[-1].content and llm.probes[1].constraint is not None
    assert llm.probes[1].constraint.grammar == COUNT_GRAMMAR

    # a question that asks for several things: every call goes out (BFCL parallel_multiple)
    asked = "What are the capital and the population of Brazil?"
    llm = ScriptedLLM([BRAZIL], stops="ignore", counts=["Several"])
    step = ModelStep(llm, COUNT_TOOLS, StepConfig(max_tokens=300, multiple_calls=True, constrain="grammar"))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)],
                                 deadline=None, check_calls=True, question=asked))
    assert [c.name for c in outcome.calls] == [f"country_info.{t}" for t in ("capital", "population", "largest_city")]

    # calls of one tool are never counted (the model calls "the weather in Oslo and Rome" one thing); nor is
    # anything asked without an open question (mylm's own agent)
    for reply, question in ((BRAZIL.replace("population", "capital").replace("largest_city", "capital"), asked),
                            (BRAZIL, "")):
        llm = ScriptedLLM([reply], stops="ignore", counts=["One"])
        step = ModelStep(llm, COUNT_TOOLS, StepConfig(max_tokens=300, multiple_calls=True, constrain="grammar"))
        drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)], deadline=None,
                        check_calls=True, question=question))
        assert not any("One or Several" in p.messages[-1].content for p in llm.probes)


def test_each_tools_calls_in_a_mixed_reply_are_grounded_by_the_same_rules() -> None:
    # BFCL multiple_1, Qwen2.5-Coder-1.5B: Heron's area, then the base-height area with the sides reshuffled
    from mylm.agent.step import grounded

    heron = ToolCall("math.triangle_area_heron", {"side1": 3, "side2": 4, "side3": 5})
    base = tuple(ToolCall("math.triangle_area_base_height", {"base": b, "height": h}) for b, h in ((3, 4), (4, 3),
                                                                                                  (4, 5)))
    asked = "Calculate the area of a triangle, given the lengths of its three sides: 3, 4, and 5."
    assert grounded((heron, *base), asked) == (heron, base[0], base[2])


@pytest.mark.parametrize(("fits", "named"), [([True], True), ([False, False], False), ([False, True], True)])
def test_working_cut_at_the_cap_names_the_tool_the_model_says_does_the_task(fits: list[bool], named: bool) -> None:
    # BFCL simple_python_20, Qwen2.5-Coder-1.5B: the HCF by prime factors to the cap; told "if one of the tools does
    # what the task asks, call it", it answered "12" in text. Served or scored (an open question), the tool the
    # model says fits, asked apart, is named; one it says does not (BFCL irrelevance) is not.
    hcf = ToolDefinition("math.hcf", "Highest common factor of two numbers.", {
        "type": "object", "properties": {"number1": {"type": "integer"}, "number2": {"type": "integer"}},
        "required": ["number1", "number2"]})
    llm = ScriptedLLM([HCF_BY_HAND[-400:]], stops="ignore", fits=fits)
    step = ModelStep(llm, [hcf], StepConfig(max_tokens=1024, multiple_calls=True, constrain="auto"))
    asked = "Calculate the highest common factor of 36 and 24."
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)],
                                 deadline=None, check_calls=True, question=asked))
    correction = outcome.correction or ""
    assert not outcome.usable and "400 characters of working" in correction
    assert ("The tool math.hcf (Highest common factor of two numbers.) does what the task asks" in correction) is named
    assert ("If one of the tools does what the task asks" in correction) is not named
    assert len(llm.probes) == len(fits)
    # no open question (mylm's own agent, or a tool result already in): nobody is asked
    llm = ScriptedLLM([HCF_BY_HAND[-400:]], stops="ignore", fits=fits)
    step = ModelStep(llm, [hcf], StepConfig(max_tokens=1024, multiple_calls=True, constrain="auto"))
    _, outcome = drain(step.turn([Message("system", step.system_prompt()), Message("user", asked)],
                                 deadline=None, check_calls=True))
    assert "If one of the tools" in (outcome.correction or "") and not llm.probes


def test_an_option_the_question_did_not_ask_for_does_not_decide_how_made_up_tools_after_it_are_judged() -> None:
    # BFCL simple_python_5, Qwen2.5-Coder-1.5B: `root_type` real, then the asked `all`, then a plan in a made-up
    # tool (`display_roots`). Checked before the calls were grounded, the unasked `real` call made the right one
    # look like values from nowhere, and the whole reply was corrected; the model then answered in text.
    solve = ToolDefinition("solve_quadratic", "Roots of ax^2+bx+c.", {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                         "c": {"type": "integer"}, "root_type": {"type": "string"}},
        "required": ["a", "b", "c"]})
    reply = "".join(format_tool_call(call) + "\n" for call in (
        ToolCall("solve_quadratic", {"a": 3, "b": -11, "c": -4, "root_type": "real"}),
        ToolCall("solve_quadratic", {"a": 3, "b": -11, "c": -4, "root_type": "all"}),
        ToolCall("display_roots", {"roots": [3.0, -1.0]}), ToolCall("display_roots", {"roots": [-2.0, 2.0]})))
    outcome = served(reply, [solve], "Find all the roots of a quadratic equation given coefficients a = 3, b = -11, "
                                     "and c = -4.")
    assert outcome.usable and [c.arguments for c in outcome.calls] == [{"a": 3, "b": -11, "c": -4, "root_type": "all"}]


def test_a_real_call_adding_a_constant_before_made_up_tools_goes_out_alone() -> None:
    # BFCL simple_python_41, Qwen2.5-Coder-1.5B: the question's charges and distance plus the vacuum permittivity
    # (a constant it knows), then `calculate` and `print`, tools that do not exist. Held to "every value from the
    # question", the whole reply was corrected and the model answered in text.
    force = ToolDefinition("electromagnetic_force", "Force between two charges.", {
        "type": "object", "properties": {k: {"type": "number"} for k in ("charge1", "charge2", "distance",
                                                                        "medium_permittivity")},
        "required": ["charge1", "charge2", "distance"]})
    arguments = {"charge1": 5, "charge2": 7, "distance": 3, "medium_permittivity": 8.854e-12}
    reply = "".join(format_tool_call(call) + "\n" for call in (
        ToolCall("electromagnetic_force", arguments), ToolCall("calculate", {"expression": "force"}),
        ToolCall("print", {"message": "The electromagnetic force between the two charges is: {result} GN"})))
    asked = "Calculate the electromagnetic force between two charges of 5C and 7C placed 3 meters apart."
    outcome = served(reply, [force], asked)
    assert outcome.usable and [c.arguments for c in outcome.calls] == [arguments]


def test_a_later_call_with_values_from_nowhere_after_a_grounded_one_is_dropped() -> None:
    # BFCL parallel_multiple_7, Qwen2.5-Coder-1.5B: the two times asked, then a force from mass 1 and acceleration 1
    from mylm.agent.step import grounded

    times = tuple(ToolCall("kinematics.calculate_time", {"velocity": v, "distance": d}) for v, d in ((50, 600),
                                                                                                   (400, 1000)))
    force = ToolCall("physics.calculate_force", {"mass": 1, "acceleration": 1})
    asked = ("Calculate the time required for a car moving at 50 m/s to travel a distance of 600 m. Also calculate "
             "the time required for a bullet moving at 400 m/s to cover a distance of 1000 m.")
    assert grounded((*times, force), asked) == times
    # values the question gives are kept whatever the tool; a first call from nowhere is left to the check
    assert grounded((*times, ToolCall("physics.calculate_force", {"mass": 50, "acceleration": 1})), asked)[-1].name \
        == "physics.calculate_force"
    assert grounded((force, *times), asked)[0] == force


def test_a_real_call_after_a_made_up_one_still_goes_out() -> None:
    # BFCL parallel_multiple_2, Qwen2.5-Coder-1.5B: "the area and perimeter of a circle with a radius of 5 and also
    # the circumference of a circle with diameter of 10": area, a made-up `circle.calculate_perimeter`, then the
    # real circumference. Dropping everything after the made-up call lost the circumference.
    tools = [ToolDefinition(f"circle.calculate_{name}", f"The {name} of a circle.", {
        "type": "object", "properties": {key: {"type": "number"}}, "required": [key]})
        for name, key in (("area", "radius"), ("circumference", "diameter"))]
    reply = "".join(format_tool_call(call) + "\n" for call in (
        ToolCall("circle.calculate_area", {"radius": 5}),
        ToolCall("circle.calculate_perimeter", {"length": 10, "breadth": 10}),
        ToolCall("circle.calculate_circumference", {"diameter": 10})))
    outcome = served(reply, tools, "Find the area and perimeter of a circle with a radius of 5 and also find the "
                                   "circumference of a circle with diameter of 10.")
    assert outcome.usable and [c.name for c in outcome.calls] == ["circle.calculate_area",
                                                                 "circle.calculate_circumference"]


FILE_TOOLS = [ToolDefinition(name, f"{name} a file.", {"type": "object", "properties": props, "required": list(props)})
              for name, props in (("list_files", {}), ("read_file", {"path": {"type": "string"}}),
                                  ("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}),
                                  ("final_answer", {"answer": {"type": "string"}}))]


def test_calls_written_before_the_results_they_need_are_dropped() -> None:
    # smolagents through mylm serve, Qwen2.5-Coder-1.5B, asked for the code name in notes.txt: one reply listed the
    # files, read notes.txt, overwrote it with a made-up "release_code: 1.0.0" and answered; smolagents ran the
    # first three and refused the step for the answer beside them.
    reply = "".join(format_tool_call(call) + "\n" for call in (
        ToolCall("list_files", {}), ToolCall("read_file", {"path": "notes.txt"}),
        ToolCall("write_file", {"path": "./notes.txt", "content": "release_code: 1.0.0"}),
        ToolCall("final_answer", {"answer": "1.0.0"})))
    outcome = served(reply, FILE_TOOLS, "What is the release code name written in notes.txt?")
    assert outcome.usable and [c.name for c in outcome.calls] == ["list_files", "read_file"]


@pytest.mark.parametrize("calls", [
    # a write to another file than the one read, a write before a read, answers alone: nothing waits on a result
    (ToolCall("read_file", {"path": "notes.txt"}), ToolCall("write_file", {"path": "release.txt", "content": "x"})),
    (ToolCall("write_file", {"path": "a.txt", "content": "x"}), ToolCall("read_file", {"path": "a.txt"})),
    (ToolCall("final_answer", {"answer": "x"}),),
])
def test_calls_that_need_no_result_of_the_reply_all_go_out(calls: tuple[ToolCall, ...]) -> None:
    reply = "".join(format_tool_call(call) + "\n" for call in calls)
    outcome = served(reply, FILE_TOOLS, "Copy notes.txt to release.txt.")
    assert outcome.usable and [c.name for c in outcome.calls] == [c.name for c in calls]


# --------------------------------------------------------------------------- answers given without a look


def _find_task(tmp_path: Path) -> None:
    (tmp_path / "release.py").write_text('from tasks import parse_release\n\nprint(parse_release("notes.txt"))\n')
    (tmp_path / "tasks.py").write_text("def parse_release(path):\n    return path\n")


def test_a_file_named_unopened_to_a_which_file_question_is_sent_back_to_read_it(tmp_path: Path) -> None:
    # scripts/drive_clients.py --task find, Qwen2.5-Coder-1.5B: it listed the project, then answered release.py
    # (which only imports parse_release) without reading it.
    _find_task(tmp_path)
    llm = ScriptedLLM([format_tool_call(ToolCall("list_dir", {"path": "."})), "release.py",
                       format_tool_call(ToolCall("read_file", {"path": "release.py"})), "tasks.py"], stops="ignore")
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run(
        "Which file of this project defines the function parse_release?")
    assert result.final_text == "tasks.py"
    told = llm.requests[2].messages[-1].content
    assert "release.py has not been read yet" in told and "<name>read_file</name>" in told


def test_a_file_whose_lines_a_search_showed_is_not_sent_back(tmp_path: Path) -> None:
    _find_task(tmp_path)
    llm = ScriptedLLM([format_tool_call(ToolCall("search_files", {"pattern": "def parse_release"})), "tasks.py"],
                      stops="ignore")
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run(
        "Which file of this project defines the function parse_release?")
    assert result.final_text == "tasks.py" and len(llm.requests) == 2


def test_an_answer_about_a_workspace_file_nothing_read_is_sent_back_to_read_it(tmp_path: Path) -> None:
    # Qwen2.5-Coder-0.5B, asked "What is the code word in secret.txt?", answered from the file's name alone.
    (tmp_path / "secret.txt").write_text("The code word is PELICAN.\n")
    read = format_tool_call(ToolCall("read_file", {"path": "secret.txt"}))
    llm = ScriptedLLM(['The code word in secret.txt is "secret".', read, "The code word is PELICAN."])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("What is the code word in secret.txt?")
    correction = llm.requests[1].messages[-1].content
    assert "secret.txt is in the workspace" in correction and "Call read_file on secret.txt" in correction
    assert '"secret"' not in llm.requests[1].messages[-1].content  # the made-up answer is not kept to be copied
    assert all("is \"secret\"" not in m.content for m in llm.requests[1].messages)
    assert result.stop_reason is StopReason.FINAL_ANSWER and "PELICAN" in result.final_text


def test_an_answer_that_announces_a_tool_it_never_called_is_sent_back_to_call_it(tmp_path: Path) -> None:
    # The 0.5B's whole reply, taken as the answer before: it never listed the directory, and main.py is made up.
    said = ("To answer this question, I'll use the `list_dir` tool to list all files in the workspace. The "
            "`list_dir` tool will return a list of files, including Python files. The first line to read (1-based) "
            "is the file 'main.py', which is a Python file.")
    (tmp_path / "tool.py").write_text("print('hi')\n")
    listing = format_tool_call(ToolCall("list_dir", {"path": "."}))
    llm = ScriptedLLM([said, listing, "tool.py"])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("Which file in this directory is a Python file?")
    correction = llm.requests[1].messages[-1].content
    assert "You wrote that you would use list_dir, but wrote no call" in correction
    assert result.final_text == "tool.py"


@pytest.mark.parametrize("reply", [
    "I can't use list_dir for this: it is a general question. Paris.",
    "The list_dir tool lists files; the answer is Paris.",
    "Paris.",
])
def test_an_answer_that_needs_no_look_is_taken(tmp_path: Path, reply: str) -> None:
    llm = ScriptedLLM([reply])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("What is the capital of France?")
    assert result.final_text == reply and len(llm.requests) == 1


def test_the_look_is_asked_for_once_and_never_after_a_tool_ran(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# notes\n")
    llm = ScriptedLLM(["It is empty.", "It is empty."])
    assert Agent(llm, tools(tmp_path), workspace=tmp_path).run("What is in notes.md?").final_text == "It is empty."
    assert len(llm.requests) == 2  # one correction, then the answer is taken as it is
    read = format_tool_call(ToolCall("read_file", {"path": "notes.md"}))
    llm = ScriptedLLM([read, "I'll use the read_file tool again later. It is a heading."])
    assert Agent(llm, tools(tmp_path), workspace=tmp_path).run("What is in notes.md?").stop_reason is StopReason.FINAL_ANSWER
    assert len(llm.requests) == 2


def test_a_path_named_outside_the_workspace_is_not_one_to_read(tmp_path: Path) -> None:
    inside = tmp_path / "w"
    inside.mkdir()
    (tmp_path / "outside.txt").write_text("x")
    llm = ScriptedLLM(["No."])
    Agent(llm, tools(inside), workspace=inside).run("Is ../outside.txt or /etc/hostname empty?")
    assert len(llm.requests) == 1


@pytest.mark.parametrize("reply", ["list_dir", "`list_dir`", "list_dir()", "list_dir.", "**list_dir**"])
def test_a_reply_that_is_only_a_tools_name_is_a_call_of_it(tmp_path: Path, reply: str) -> None:
    # Told to call list_dir, Qwen2.5-Coder-0.5B replied the word `list_dir`: it was taken as the answer.
    (tmp_path / "tool.py").write_text("print('hi')\n")
    llm = ScriptedLLM([reply, "tool.py"])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("Which file here is a Python file?")
    ran = [e for e in result.events if isinstance(e, ToolResultEvent)]
    assert [e.name for e in ran] == ["list_dir"] and "tool.py" in ran[0].output
    assert result.final_text == "tool.py"


@pytest.mark.parametrize("reply", ["list", "list_dir now", "The answer is list_dir", "read_file " * 2])
def test_a_name_in_a_sentence_is_not_a_call(tmp_path: Path, reply: str) -> None:
    llm = ScriptedLLM([reply])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("Which tool lists a directory?")
    assert result.final_text == reply.strip() and len(llm.requests) == 1


def test_a_follow_up_in_a_conversation_is_not_sent_back_to_look(tmp_path: Path) -> None:
    # The file may have been read in the conversation before: the history is the model's to answer from.
    (tmp_path / "notes.md").write_text("# notes\n")
    history = [Message("user", "Read notes.md"), Message("assistant", "It holds one heading, '# notes'.")]
    llm = ScriptedLLM(["It is a heading."])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("What kind of line is in notes.md?", history=history)
    assert result.final_text == "It is a heading." and len(llm.requests) == 1


def test_an_answer_about_this_directory_given_unlooked_is_sent_back_to_list_it(tmp_path: Path) -> None:
    # The quick start's question: the 0.5B sent an empty reply, then answered "1" without a call.
    for name in ("app.py", "util.py", "README.md"):
        (tmp_path / name).write_text("x\n")
    listing = format_tool_call(ToolCall("list_dir", {"path": "."}))
    llm = ScriptedLLM(["1", listing, "2"])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("How many Python files are in this directory?")
    correction = llm.requests[1].messages[-1].content
    assert 'no answer can come from what the working directory holds before it is listed' in correction
    assert 'Call list_dir on "." first' in correction and result.final_text == "2"
    # What the user is shown as it goes back says what was skipped (it read "without ." in the quick start).
    problems = [e.message for e in result.events if isinstance(e, ErrorEvent)]
    assert problems[0] == "answered before any tool ran, without listing the directory", problems


def test_the_turn_after_a_call_is_asked_for_can_only_call(tmp_path: Path) -> None:
    # The quick start on the 1.5B: told to list the directory first, with the very call written out, it answered
    # "There are 0 Python files in this directory." again. What the correction demands, the grammar enforces.
    (tmp_path / "app.py").write_text("x\n")
    listing = format_tool_call(ToolCall("list_dir", {"path": "."}))
    llm = ScriptedLLM(["There are 0 Python files in this directory.", listing, "1"])
    agent = Agent(llm, tools(tmp_path), workspace=tmp_path, constrain="auto")
    result = agent.run("How many Python files are in this directory?")
    assert result.final_text == "1"
    grammars = [r.constraint.grammar if r.constraint else None for r in llm.requests]
    assert all(grammars), "the scripted endpoint takes a grammar"
    first, owed, after = (parse_gbnf(g) for g in grammars)
    assert accepts(first, "There are 0 Python files in this directory.")
    assert not accepts(owed, "There are 0 Python files in this directory.")
    assert not accepts(owed, "Listing.\n<final_answer>0</final_answer>")
    assert accepts(owed, listing) and accepts(owed, "I will list it.\n" + listing)
    # Only a tool the model was shown: no made-up name to be corrected again.
    assert not accepts(owed, format_tool_call(ToolCall("count_files", {"path": "."})))
    assert grammars[2] == grammars[0]  # once a tool ran, the model may answer again


def test_a_call_is_not_forced_after_a_correction_about_the_form(tmp_path: Path) -> None:
    # Only an answer where a call is due makes the next turn call: a format correction leaves the answer open.
    llm = ScriptedLLM(["<tool_code><name>list_dir</name><parameters>{oops</parameters></tool_code>", "Paris."])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path, constrain="auto").run("What is the capital of France?")
    assert result.final_text == "Paris."
    assert llm.requests[0].constraint is not None and llm.requests[0].constraint == llm.requests[1].constraint


def test_an_answer_with_the_file_the_task_asks_for_unwritten_is_sent_back_once(tmp_path: Path) -> None:
    # Through mylm serve the 1.5B, asked to write the code name into release.txt, read notes.txt and answered it.
    (tmp_path / "notes.txt").write_text("The release code name is tundra-d367.\n")
    read = format_tool_call(ToolCall("read_file", {"path": "notes.txt"}))
    write = format_tool_call(ToolCall("write_file", {"path": "release.txt", "content": "tundra-d367"}))
    llm = ScriptedLLM([read, "tundra-d367", write, "Done."])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run(
        "Write the release code name from notes.txt into a new file named release.txt.")
    correction = llm.requests[2].messages[-1].content
    assert "the task asks for release.txt to be written" in correction and "write_file" in correction
    assert (tmp_path / "release.txt").read_text() == "tundra-d367" and result.final_text == "Done."
    # The answer given with nothing written is left out of the conversation.
    assert not any(m.role == "assistant" and m.content == "tundra-d367" for m in llm.requests[2].messages)


def test_a_file_that_was_there_must_have_changed_and_the_check_is_made_once(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# x\n")
    llm = ScriptedLLM([format_tool_call(ToolCall("list_dir", {"path": "."})), "Added.", "Added."])
    assert Agent(llm, tools(tmp_path), workspace=tmp_path).run("Add a line to README.md saying hi.").final_text == (
        "Added.") and len(llm.requests) == 3
    assert "README.md to be changed" in llm.requests[2].messages[-1].content
    # Changed by any means (here by hand, as a shell command would), it is taken as done.
    (tmp_path / "README.md").write_text("# x\n")
    llm = ScriptedLLM([format_tool_call(ToolCall("list_dir", {"path": "."})), "Added."])
    agent = Agent(llm, tools(tmp_path), workspace=tmp_path)
    stream = agent.stream("Add a line to README.md saying hi.")
    (tmp_path / "README.md").write_text("# x\nhi\n")
    assert stream.consume().final_text == "Added." and len(llm.requests) == 2
    llm = ScriptedLLM(["print('hi')", "print('hi')"])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run("Create hello.py that prints hi.")
    assert len(llm.requests) == 2 and result.final_text == "print('hi')"


def test_an_edit_answered_with_the_file_unchanged_is_sent_back_once(tmp_path: Path) -> None:
    # Through pydantic-ai the 1.5B read greet.py, then answered its greeting unchanged.
    (tmp_path / "greet.py").write_text('def greet(name):\n    return f"Hello, {name}!"\n')
    read = format_tool_call(ToolCall("read_file", {"path": "greet.py"}))
    edit = format_tool_call(ToolCall("edit_file", {"path": "greet.py", "old": "Hello", "new": "Hi"}))
    llm = ScriptedLLM([read, '"Hello, {name}!"', edit, "Done."])
    result = Agent(llm, tools(tmp_path), workspace=tmp_path).run(
        "In greet.py, change the greeting from Hello to Hi.")
    correction = llm.requests[2].messages[-1].content
    assert "greet.py to be changed" in correction and "edit_file" in correction
    assert "Hi, {name}" in (tmp_path / "greet.py").read_text() and result.final_text == "Done."


def test_the_look_asked_for_a_named_path_comes_with_the_call_to_copy(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("PELICAN\n")
    llm = ScriptedLLM(["secret", "secret"])
    Agent(llm, tools(tmp_path), workspace=tmp_path).run("What is the code word in secret.txt?")
    correction = llm.requests[1].messages[-1].content
    assert format_tool_call(ToolCall("read_file", {"path": "secret.txt"})) in correction
    assert "&lt;" not in correction and not PLACEHOLDERS.search(correction)
