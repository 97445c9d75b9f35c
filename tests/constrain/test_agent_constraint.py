"""The agent's side of constrained decoding: which grammar each request carries, and the prompt that goes with it."""

from __future__ import annotations

import pytest

from mylm import Agent, tool
from mylm.protocol.parser import format_tool_call
from mylm.testing import ScriptedLLM
from mylm.core.types import StopReason, ToolCall


@tool
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()


def test_every_turn_carries_the_turn_grammar_and_the_summary_the_answer_grammar() -> None:
    llm = ScriptedLLM([format_tool_call(ToolCall("shout", {"text": "a"})), "<final_answer>done</final_answer>"])
    agent = Agent(llm, [shout], max_iterations=1, constrain="grammar")
    result = agent.run("x")
    assert result.stop_reason is StopReason.MAX_ITERATIONS and result.final_text == "done"
    turn, summary = (r.constraint for r in llm.requests)
    assert turn is agent.constraint and summary is agent.answer_constraint
    assert turn is not None and summary is not None and turn.required and summary.required
    assert "<name>shout</name>" in turn.grammar and "<tool_code>" not in summary.grammar
    assert turn.lazy_grammar is not None and turn.lazy_grammar.startswith("root ::= ") and turn.trigger == "<tool_code>"
    # read_output is callable (the observation that cuts an output names it), so the grammar allows it too.
    assert "<name>read_output</name>" in turn.grammar


def test_constrained_prompt_asks_for_final_answer_tags_and_off_keeps_plain_text() -> None:
    constrained = Agent(ScriptedLLM([]), [shout], constrain="auto")
    plain = Agent(ScriptedLLM([]), [shout])
    assert "<final_answer>" in constrained.system_prompt and "<final_answer>" not in plain.system_prompt
    assert plain.constraint is None and plain.answer_constraint is None
    assert constrained.constraint is not None and not constrained.constraint.required


def test_a_tagged_final_answer_ends_the_run_with_its_content() -> None:
    llm = ScriptedLLM(["I know this.<final_answer>42</final_answer>"])
    result = Agent(llm, [shout], constrain="auto").run("x")
    assert (result.stop_reason, result.final_text) == (StopReason.FINAL_ANSWER, "42")


def test_unknown_constrain_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, grammar or off"):
        Agent(ScriptedLLM([]), [shout], constrain="always")  # type: ignore[arg-type]


@tool
def whisper(text: str) -> str:
    """Return the text in small letters."""
    return text.lower()


def test_tool_choice_maps_onto_the_grammar() -> None:
    none = Agent(ScriptedLLM([]), [shout, whisper], constrain="grammar", tool_choice="none")
    named = Agent(ScriptedLLM([]), [shout, whisper], constrain="grammar", tool_choice="whisper")
    required = Agent(ScriptedLLM([]), [shout, whisper], constrain="grammar", tool_choice="required")
    free = Agent(ScriptedLLM([]), [shout, whisper], constrain="grammar")
    assert none.constraint is not None and "<tool_code>" not in none.constraint.grammar
    assert named.constraint is not None and "<name>whisper</name>" in named.constraint.grammar
    assert "<name>shout</name>" not in named.constraint.grammar
    # Required (or a name): the turn has no answer branch; unconstrained choice keeps it.
    for agent in (named, required):
        assert agent.constraint is not None and "root ::= thought call" in agent.constraint.grammar
    assert free.constraint is not None and "root ::= thought (call | final)" in free.constraint.grammar
