"""The model-turn step on its own: no tool runs, no loop; tool descriptions from plain data, as a server has them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mylm import Agent, tool
from mylm.constrain import select_constraints
from mylm.llm import LLMChunk, LLMRequest, PromptRenderingLLM, TextChunk
from mylm.prompts import PromptLoader, packaged_prompts_dir
from mylm.protocol.parsed import ParsedTurn
from mylm.protocol.parser import format_tool_call
from mylm.agent.step import Meter, ModelStep, StepConfig, StepOutcome, ToolDefinition, drain
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.core.types import ErrorEvent, Message, TextEvent, ToolCall, Usage, UsageEvent

WEATHER = ToolDefinition(
    "get_weather", "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def call(name: str, **arguments: object) -> str:
    return "Let me look.\n" + format_tool_call(ToolCall(name, arguments))


def conversation(step: ModelStep, text: str = "Weather in Oslo?") -> list[Message]:
    return [Message("system", step.system_prompt()), Message("user", text)]


def test_step_docstring_example_runs() -> None:
    import mylm.agent.step

    code = (mylm.agent.step.__doc__ or "").split("::\n", 1)[1].split("\n\n`turn`", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(textwrap.dedent(code), "mylm/agent/step.py docstring", "exec"), namespace)  # noqa: S102
    assert namespace["attempt"] == 1  # the empty reply was corrected once


def test_step_runs_one_turn_over_plain_tool_definitions() -> None:
    llm = ScriptedLLM([ScriptedReply(call("get_weather", city="Oslo"), usage=Usage(30, 9))])
    step = ModelStep(llm, [WEATHER], StepConfig(max_tokens=256))
    messages = conversation(step)
    assert "<name>get_weather</name>" in messages[0].content
    meter = Meter()
    events, outcome = drain(step.turn(messages, meter=meter))
    assert outcome.usable and outcome.correction is None
    (called,) = outcome.turn.parsed.tool_calls
    assert (called.name, called.arguments) == ("get_weather", {"city": "Oslo"})
    assert any(isinstance(e, TextEvent) for e in events)
    assert [e for e in events if isinstance(e, UsageEvent)] == [UsageEvent(Usage(30, 9), Usage(30, 9))]
    assert meter.calls == 1 and meter.usage == Usage(30, 9)
    request = llm.requests[0]
    assert request.max_tokens == 256 and request.messages == tuple(messages)


def test_step_unusable_turn_gets_its_correction_and_a_repeat_gets_a_concrete_one() -> None:
    llm = ScriptedLLM(["", "", "It is sunny."])
    step = ModelStep(llm, [WEATHER])
    messages = conversation(step)
    corrections = step.corrections()
    _, first = drain(step.turn(messages, corrections=corrections))
    assert not first.usable and first.kind == "format" and first.problem is not None
    assert first.problem.startswith("Your reply was empty")
    assert first.correction is not None and "Format error: Your reply was empty" in first.correction
    # Nothing to record for the empty turn: a placeholder was copied by a small model as its next answer.
    assert first.reply == Message("assistant", "")
    # The block to copy is a real call of the step's tool, never a placeholder, and reaches the model as written.
    assert "<tool_code>\n<name>get_weather</name>" in first.correction and "TOOL_NAME" not in first.correction
    assert "&lt;tool_code" not in first.correction
    messages += [Message("user", first.correction)]
    _, second = drain(step.turn(messages, corrections=corrections))
    assert second.correction is not None and "same problem as in your previous reply" in second.correction
    messages += [Message("user", second.correction)]
    _, third = drain(step.turn(messages, corrections=corrections))
    assert third.usable and third.turn.parsed.final_answer == "It is sunny."


def test_step_answer_where_a_call_is_required_is_corrected() -> None:
    llm = ScriptedLLM(["It is sunny."])
    step = ModelStep(llm, [WEATHER], StepConfig(tool_choice="get_weather"))
    _, outcome = drain(step.turn(conversation(step)))
    assert outcome.kind == "tool_choice" and outcome.problem is not None and "get_weather" in outcome.problem
    assert outcome.correction is not None and "Call get_weather now" in outcome.correction
    assert "tool_required.j2" in step.templates()


def test_step_answer_only_turn_is_not_judged_and_uses_the_answer_grammar() -> None:
    llm = ScriptedLLM(["", ""])
    step = ModelStep(llm, [WEATHER], StepConfig(constrain="auto", tool_choice="required"))
    _, outcome = drain(step.turn(conversation(step), answer_only=True))
    assert outcome.usable and llm.requests[0].constraint is step.answer_constraint
    _, judged = drain(step.turn(conversation(step)))
    assert not judged.usable and llm.requests[1].constraint is step.constraint


def test_step_unknown_tool_choice_is_refused_naming_the_tools() -> None:
    with pytest.raises(ValueError, match=r"tool_choice must be .*'nope'.*\(tools: get_weather\)"):
        ModelStep(ScriptedLLM([]), [WEATHER], StepConfig(tool_choice="nope"))


def test_step_unlisted_tool_is_callable_but_not_in_the_prompt() -> None:
    pager = ToolDefinition("read_more", "Page.", {"type": "object", "properties": {"page": {"type": "integer"}}})
    step = ModelStep(ScriptedLLM([]), [WEATHER], StepConfig(constrain="auto", tool_choice="get_weather"),
                     unlisted=[pager])
    assert "read_more" not in step.system_prompt() and "read_more" in step.names
    assert step.constraint is not None and "<name>read_more</name>" in step.constraint.grammar


def test_step_keeps_what_it_learned_about_the_endpoint_across_turns() -> None:
    # A server that honours </tool_code> inside <think>: the first turn is cut mid-thought and asked again
    # without stops; the step remembers, so the next conversation sends none either.
    thinking = "<think>I could write " + call("get_weather", city="x") + " but no.</think>It is sunny."
    llm = ScriptedLLM([thinking, thinking, "Rain."], stops="honour")
    step = ModelStep(llm, [WEATHER])
    step.opens_reasoning = False
    events, outcome = drain(step.turn(conversation(step)))
    assert outcome.turn.parsed.final_answer == "It is sunny."
    assert any(isinstance(e, ErrorEvent) and e.kind == "retry" for e in events)
    assert "</tool_code>" in llm.requests[0].stop and llm.requests[1].stop == ()
    drain(step.turn(conversation(step, "And tomorrow?")))
    assert llm.requests[2].stop == () and step.opens_reasoning is False


def test_step_interrupted_stream_leaves_what_was_shown_in_the_meter() -> None:
    class Breaks:
        def stream(self, request: LLMRequest):  # type: ignore[no-untyped-def]
            yield TextChunk("Half an ans")
            raise KeyboardInterrupt

    step = ModelStep(Breaks(), [WEATHER])
    meter = Meter()
    with pytest.raises(KeyboardInterrupt):
        drain(step.turn(conversation(step), meter=meter))
    assert meter.partial == "Half an ans" and meter.calls == 1


def test_step_reads_what_a_prompt_rendering_endpoint_says_it_opened() -> None:
    class Renders:
        opens_reasoning: bool | None = True

        def stream(self, request: LLMRequest) -> list[LLMChunk]:
            return [TextChunk("pondering " + call("get_weather", city="x") + "</think>No call after all.")]

    llm = Renders()
    assert isinstance(llm, PromptRenderingLLM) and not isinstance(ScriptedLLM([]), PromptRenderingLLM)
    step = ModelStep(llm, [WEATHER])
    _, outcome = drain(step.turn(conversation(step)))
    # The template opened <think>, so the drafted call was reasoning, never a call to run.
    assert not outcome.turn.parsed.tool_calls and outcome.turn.parsed.final_answer == "No call after all."


def test_select_constraints_maps_the_tool_choice_onto_the_grammar() -> None:
    tools = [WEATHER, ToolDefinition("other", "", {"type": "object", "properties": {}})]
    assert select_constraints(tools, mode="off", multiple_calls=False, max_tokens=100) == (None, None)
    turn, answer = select_constraints(tools, mode="grammar", multiple_calls=False, max_tokens=100,
                                      tool_choice="other", always={"get_weather"})
    assert turn is not None and answer is not None and turn.required and answer.required
    assert "<name>other</name>" in turn.grammar and "<name>get_weather</name>" in turn.grammar
    turn, _ = select_constraints(tools, mode="auto", multiple_calls=False, max_tokens=100, tool_choice="other")
    assert turn is not None and "<name>get_weather</name>" not in turn.grammar and not turn.required
    with pytest.raises(ValueError, match="constrain must be"):
        select_constraints(tools, mode="always", multiple_calls=False, max_tokens=100)  # type: ignore[arg-type]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_step_corrections_are_templates_a_user_can_change(tmp_path: Path) -> None:
    (tmp_path / "unusable_reply.j2").write_text("{% if unclosed_reasoning %}Stop musing.{% else %}Say something.{% endif %}")
    (tmp_path / "invalid_arguments.j2").write_text("Bad {{ tool }}: {{ problems | join(' & ') }}")
    (tmp_path / "repeated_mistake.j2").write_text("Again! {{ message }} Copy:")
    prompts = PromptLoader([tmp_path, packaged_prompts_dir()])
    corrections = ModelStep(ScriptedLLM([]), [WEATHER], prompts=prompts).corrections()
    assert corrections.problem(ParsedTurn(unclosed_reasoning=True)) == "Stop musing."
    assert corrections.problem(ParsedTurn(final_answer="  ")) == "Say something."
    assert corrections.problem(ParsedTurn(final_answer="Sunny.")) is None
    bad = call("add", a="one", b=[2])
    llm = ScriptedLLM([bad, bad, "3"])
    Agent(llm, [add], prompts=prompts).run("1+2?")
    first, second = (r.messages[-1].content for r in llm.requests[1:])
    assert "Error from add: Bad add: " in first and " & " in first
    # The block to copy reaches the model as written (never defused like the message around it), with values
    # of the schema's types in place of the ones that broke it.
    assert "Error from add: Again! Bad add: " in second and "<name>add</name>" in second
    assert '{"a": 1, "b": 1}' in second and "&lt;" not in second


def test_step_a_broken_correction_template_fails_before_the_first_request(tmp_path: Path) -> None:
    from mylm.core.errors import TemplateError

    (tmp_path / "repeated_mistake.j2").write_text("{{ message }} {{ nonsense }}")
    llm = ScriptedLLM([])
    with pytest.raises(TemplateError, match="repeated_mistake.j2"):
        Agent(llm, [add], prompts=PromptLoader([tmp_path, packaged_prompts_dir()]))
    assert llm.requests == []


def test_step_checks_calls_for_a_caller_that_runs_them_elsewhere() -> None:
    count = ToolDefinition("count", "Count.", {"type": "object", "properties": {"n": {"type": "integer"}},
                                               "required": ["n"]})
    replies = [call("cuont", n=1), call("count", n="three"), call("count", n="3"), call("get_weather", city="x")]
    step = ModelStep(ScriptedLLM(replies), [count, WEATHER])
    corrections = step.corrections()

    def checked() -> StepOutcome:
        return drain(step.turn(conversation(step), corrections=corrections, check_calls=True))[1]

    unknown = checked()
    assert unknown.kind == "call" and unknown.correction is not None and not unknown.calls
    assert "Error from cuont: There is no tool named 'cuont'. Did you mean 'count'?" in unknown.correction
    invalid = checked()
    assert invalid.kind == "call" and invalid.problem is not None and invalid.problem.startswith("invalid arguments")
    assert invalid.correction is not None and '"type": "integer"' in invalid.correction
    coerced = checked()
    assert coerced.usable and coerced.calls[0].arguments == {"n": 3}
    assert checked().usable  # any listed tool may be called under tool_choice auto
    only = ModelStep(ScriptedLLM([call("get_weather", city="x")]), [count, WEATHER], StepConfig(tool_choice="count"))
    _, refused = drain(only.turn(conversation(only), check_calls=True))
    assert refused.kind == "call" and refused.correction is not None
    assert "The call to get_weather was not run: only count may be called" in refused.correction


def test_step_without_check_calls_leaves_the_calls_to_the_caller() -> None:
    step = ModelStep(ScriptedLLM([call("nope", x=1) + "\n" + call("get_weather", city="x")], stops="ignore"),
                     [WEATHER])
    _, outcome = drain(step.turn(conversation(step)))
    assert outcome.usable and [c.name for c in outcome.calls] == ["nope"]  # one call per turn by default
