"""The fit check (`mylm.agent.fit`): the first tool a model calls for a question is put to the model apart, and a
no is answered once with `unfit.j2`. The calls are Qwen2.5-Coder-1.5B's own (BFCL irrelevance, `mylm eval`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from mylm import Message
from mylm.agent.fit import FIT_GRAMMAR, FIT_TOKENS, WORKED, says_no
from mylm.agent.step import ModelStep, StepConfig, ToolDefinition, drain
from mylm.core.errors import HTTPStatusError
from mylm.llm import LLMChunk, LLMRequest
from mylm.serve.core import open_question
from mylm.serve.wire import CallIn, ChatMessage, ChatRequest
from mylm.testing import ScriptedLLM
from tests.providers.servers import OpenAIServer
from tests.serve.support import serving

#: BFCL irrelevance_28, and the 1.5B's reply to it under mylm's grammar (the call twice, as it wrote it).
HEXAGON = "How many sides does a hexagon have?"
BOILING = ToolDefinition(
    "calculate_boiling_point", "Calculate the boiling point of a given substance at a given pressure.",
    {"type": "object", "properties": {"substance": {"type": "string", "description": "The chemical name."},
                                      "pressure": {"type": "number", "description": "In atm."}},
     "required": ["substance", "pressure"]})
BOILING_CALL = ('<tool_code>\n<name>calculate_boiling_point</name>\n<parameters>\n{"substance": "hexagon", '
                '"pressure": 1.0}\n</parameters>\n</tool_code>\n')
ANSWER = "<final_answer>A hexagon has six sides.</final_answer>"


def _step(llm: Any, **config: Any) -> ModelStep:
    return ModelStep(llm, [BOILING], StepConfig(max_tokens=512, constrain="grammar", **config))


def _conversation(step: ModelStep, question: str = HEXAGON) -> list[Message]:
    return [Message("system", step.system_prompt()), Message("user", question)]


def test_a_tool_the_model_says_does_not_fit_is_not_called_and_the_model_answers() -> None:
    llm = ScriptedLLM([BOILING_CALL * 2, ANSWER], fits=False)
    step = _step(llm)
    messages, corrections = _conversation(step), step.corrections()
    _, outcome = drain(step.turn(messages, deadline=time.monotonic() + 60, corrections=corrections,
                                 check_calls=True, question=HEXAGON))
    assert not outcome.usable and outcome.kind == "call" and not outcome.calls
    correction = outcome.correction or ""
    assert "calculate_boiling_point was not run" in correction
    assert "Calculate the boiling point of a given substance" in correction and "<final_answer>" in correction
    messages += [outcome.reply, Message("user", correction)]
    _, outcome = drain(step.turn(messages, deadline=time.monotonic() + 60, corrections=corrections,
                                 check_calls=True, question=HEXAGON))
    assert outcome.usable and not outcome.calls and outcome.turn.parsed.final_answer == "A hexagon has six sides."
    assert len(llm.probes) == 2 and len(llm.requests) == 2  # a no, asked again in other words: no again


def test_a_tool_called_again_after_the_correction_goes_out_without_asking_again() -> None:
    """The probe can be wrong (it said no to 4 of the 1.5B's 86 right simple_python calls): the model decides."""
    llm = ScriptedLLM([BOILING_CALL, BOILING_CALL], fits=False)
    step = _step(llm)
    messages, corrections = _conversation(step), step.corrections()
    for _ in range(2):
        _, outcome = drain(step.turn(messages, deadline=time.monotonic() + 60, corrections=corrections,
                                     check_calls=True, question=HEXAGON))
        messages += [outcome.reply, Message("user", outcome.correction or "")]
    assert outcome.usable and [c.name for c in outcome.calls] == ["calculate_boiling_point"]
    assert len(llm.probes) == 2


def test_a_no_the_second_wording_answers_yes_lets_the_call_out() -> None:
    """Asked once, the 1.5B said no to 4 of its 86 right BFCL simple_python calls (a turtle population from
    `ecology.get_turtle_population`); asked again in other words, yes to 2 of them."""
    llm = ScriptedLLM([BOILING_CALL], fits=[False, True])
    step = _step(llm)
    _, outcome = drain(step.turn(_conversation(step), corrections=step.corrections(), check_calls=True,
                                 question=HEXAGON))
    assert outcome.usable and [c.name for c in outcome.calls] == ["calculate_boiling_point"]
    first, second = (p.messages[-1].content for p in llm.probes)
    assert "Does this tool do what the user asked for?" in first and "Can calling this tool answer" in second
    assert HEXAGON in second and "calculate_boiling_point" in second


def test_the_probe_is_its_own_request_after_the_worked_questions_under_a_yes_no_grammar() -> None:
    llm = ScriptedLLM([BOILING_CALL])
    step = _step(llm)
    _, outcome = drain(step.turn(_conversation(step), corrections=step.corrections(), check_calls=True,
                                 question=HEXAGON))
    assert outcome.usable and outcome.calls  # the model said yes: the call goes out
    (probe,) = llm.probes  # a yes: no second question
    assert probe.purpose == "fit" and probe.max_tokens == FIT_TOKENS and probe.sampling.temperature == 0
    assert probe.constraint is not None and probe.constraint.grammar == FIT_GRAMMAR
    # The worked questions as turns, yes and no both, then the question: no system prompt, no tools to call.
    assert [m.role for m in probe.messages] == ["user", "assistant"] * len(WORKED) + ["user"]
    assert {m.content for m in probe.messages if m.role == "assistant"} == {"Yes", "No"}
    last = probe.messages[-1].content
    assert HEXAGON in last and "calculate_boiling_point" in last and "boiling point of a given substance" in last
    assert "<tool_code>" not in "".join(m.content for m in probe.messages)


def test_no_grammar_endpoint_is_asked_without_one() -> None:
    llm = ScriptedLLM([BOILING_CALL], fits=False)
    step = ModelStep(llm, [BOILING], StepConfig(max_tokens=512, constrain="off"))
    _, outcome = drain(step.turn(_conversation(step), corrections=step.corrections(), check_calls=True,
                                 question=HEXAGON))
    assert llm.probes[0].constraint is None and not outcome.usable


@pytest.mark.parametrize("case", ["no question", "tool required", "tool named"])
def test_no_probe_when_there_is_no_open_question_or_the_client_demands_the_call(case: str) -> None:
    choice = {"no question": "auto", "tool required": "required", "tool named": "calculate_boiling_point"}[case]
    llm = ScriptedLLM([BOILING_CALL], fits=False)
    step = _step(llm, tool_choice=choice)
    _, outcome = drain(step.turn(_conversation(step), corrections=step.corrections(), check_calls=True,
                                 question="" if case == "no question" else HEXAGON))
    assert outcome.usable and outcome.calls and not llm.probes


class _RefusesProbes(ScriptedLLM):
    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        if request.purpose == "fit":
            raise HTTPStatusError("openai endpoint failed: HTTP 400: grammar not supported", status=400)
        return super().stream(request)


def test_an_endpoint_that_refuses_the_probe_has_not_said_no() -> None:
    llm = _RefusesProbes([BOILING_CALL])
    step = _step(llm)
    _, outcome = drain(step.turn(_conversation(step), corrections=step.corrections(), check_calls=True,
                                 question=HEXAGON))
    assert outcome.usable and [c.name for c in outcome.calls] == ["calculate_boiling_point"]


@pytest.mark.parametrize(("answer", "no"), [("No", True), ("no.", True), (" No\n", True), ("Yes", False),
                                            ("", False), ("Not sure", False), ("<think>", False)])
def test_only_a_plain_no_counts(answer: str, no: bool) -> None:
    assert says_no(answer) is no


def _chat(*messages: ChatMessage, tools: bool = True) -> ChatRequest:
    return ChatRequest("m", messages, (BOILING,) if tools else ())


def test_the_open_question_is_the_last_user_message_until_a_tool_answers() -> None:
    asked = ChatMessage("user", HEXAGON)
    assert open_question(_chat(ChatMessage("system", "Be brief."), asked)) == HEXAGON
    assert open_question(_chat(asked, tools=False)) == ""
    called = ChatMessage("assistant", "", calls=(CallIn("c1", "calculate_boiling_point", {"substance": "x"}),))
    result = ChatMessage("tool", "100", call_id="c1")
    assert open_question(_chat(asked, called, result)) == ""
    assert open_question(_chat(asked, called, result, ChatMessage("user", "And an octagon?"))) == "And an octagon?"


# Claude Code 2.1's first user message, as it reached `mylm serve` (the reminder shortened): asked about these
# words (the probe kept the first 600 characters), the 1.5B said its Read tool did not do what they ask.
REMINDER = ("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# currentDate"
            "\nToday's date is 2026-11-29.\n\n      IMPORTANT: this context may or may not be relevant to your "
            "tasks.\n</system-reminder>\n")
CODEX_CONTEXT = "<environment_context>\n  <cwd>/tmp/project</cwd>\n  <shell>bash</shell>\n</environment_context>"


def test_the_open_question_leaves_out_the_blocks_a_client_wraps_around_it() -> None:
    question = "What is the release code name written in notes.txt?"
    assert open_question(_chat(ChatMessage("user", REMINDER + question))) == question
    assert open_question(_chat(ChatMessage("user", f"{CODEX_CONTEXT}\n{question}\n{REMINDER}"))) == question
    # Markup the user wrote is the question's own; a message that is nothing but a client's block stays whole.
    bold = "Why is <b>bold</b> not <span class='x'>shown</span>?"
    assert open_question(_chat(ChatMessage("user", bold))) == bold
    assert open_question(_chat(ChatMessage("user", REMINDER))) == REMINDER


def test_served_the_client_gets_the_answer_instead_of_the_call() -> None:
    """Through `mylm serve`, with the OpenAI SDK: the model's no ends in a text answer, finish_reason `stop`."""
    with OpenAIServer([BOILING_CALL * 2, ANSWER], fits=False) as upstream, serving(upstream.base_url) as url:
        tool = {"type": "function", "function": {"name": BOILING.name, "description": BOILING.description,
                                                 "parameters": BOILING.parameters}}
        with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": HEXAGON}],
                                                   tools=[tool])  # type: ignore[list-item]
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == "A hexagon has six sides."
    assert len(upstream.probes) == 2 and HEXAGON in json.dumps(upstream.probes[0].body)
    assert len(upstream.requests) == 2  # the call, then the answer after the correction


def test_scored_the_eval_keeps_the_probe_answer() -> None:
    from mylm.evaluation.modes import Limits, protocol_reply
    from mylm.prompts import PromptLoader

    llm = ScriptedLLM([BOILING_CALL, ANSWER], fits=False)
    reply = protocol_reply(llm, PromptLoader.default(), [BOILING], [{"role": "user", "content": HEXAGON}],
                           constrain="grammar", limits=Limits())
    assert not reply.calls and reply.text == "A hexagon has six sides." and reply.probes == ("No", "No")


#: BFCL irrelevance_0 (a triangle's area, with a BMI tool): the 1.5B's call with values from nowhere, then its
#: reply to the made-up-values correction, which copies the correction word for word.
BMI = ToolDefinition("determine_body_mass_index", "Calculate body mass index given weight and height.",
                     {"type": "object", "properties": {"weight": {"type": "number"}, "height": {"type": "number"}},
                      "required": ["weight", "height"]})
BMI_CALL = ('<tool_code>\n<name>determine_body_mass_index</name>\n<parameters>\n{"weight": 1.0, "height": 1.0}\n'
            '</parameters>\n</tool_code>\n')
ECHO = ("<final_answer>None of the values in your call of determine_body_mass_index (weight=1.0, height=1.0) come "
        "from the task, so it was not run. Call a tool only when it does what the task asks, with the task's own "
        "values. If no tool does, answer the task yourself inside < final_answer>...</final_answer>")


def test_a_reply_that_copies_the_made_up_values_correction_is_not_the_answer() -> None:
    from mylm.agent.corrections import ECHOED

    question = "Calculate the area of a triangle given the base is 10 meters and height is 5 meters."
    llm = ScriptedLLM([BMI_CALL, ECHO, "<final_answer>The area is 25 square meters.</final_answer>"])
    step = ModelStep(llm, [BMI], StepConfig(max_tokens=512, constrain="grammar"))
    messages, corrections = [Message("system", step.system_prompt()), Message("user", question)], step.corrections()
    problems = []
    for _ in range(3):
        _, outcome = drain(step.turn(messages, corrections=corrections, check_calls=True, question=question))
        if outcome.usable:
            break
        problems.append(outcome.problem)
        messages += [outcome.reply, Message("user", outcome.correction or "")]
    assert problems[1] == ECHOED and outcome.turn.parsed.final_answer == "The area is 25 square meters."


def _fresh_probe(prompts: Any, template: str, request: str, tool: str, description: str) -> tuple[Message, ...]:
    """The probe's conversation as it was built before its worked questions were kept: every text rendered."""
    messages: list[Message] = []
    for worked in WORKED:
        messages.append(Message("user", prompts.render(template, request=worked.request, tool=worked.tool,
                                                       description=worked.description)))
        messages.append(Message("assistant", "Yes" if worked.fits else "No"))
    messages.append(Message("user", prompts.render(template, request=request, tool=tool, description=description)))
    return tuple(messages)


def test_the_kept_worked_questions_are_byte_identical_to_rendering_them() -> None:
    from mylm.agent.fit import COUNTED, FIT_TEMPLATES, count_messages, fit_messages
    from mylm.prompts import PromptLoader

    prompts = PromptLoader.default(trusted=False)
    for template in FIT_TEMPLATES:
        for question, tool in (("How many sides does a hexagon have?", "geometry.sides"), ("Ünïcode ✓", "t")):
            expected = _fresh_probe(PromptLoader.default(trusted=False), template, question, tool, "Does it.")
            for _ in range(3):  # rendered, then kept
                assert fit_messages(prompts, question, tool, "Does it.", template) == expected
    fresh = PromptLoader.default(trusted=False)
    expected_count = (*(m for q, several in COUNTED for m in (
        Message("user", fresh.render("count.j2", request=q)), Message("assistant", "Several" if several else "One"))),
        Message("user", fresh.render("count.j2", request="Two things?")))
    for _ in range(3):
        assert count_messages(prompts, "Two things?") == expected_count


@pytest.mark.parametrize("edited", ["fit.j2", "part.j2"])
def test_an_edited_probe_template_is_seen_at_the_next_probe(tmp_path: Any, edited: str) -> None:
    """The probe's own template, or one it includes (whose edit the lookup of the probe's does not see)."""
    import os

    from mylm.agent.fit import fit_messages
    from mylm.prompts import PromptLoader

    (tmp_path / "fit.j2").write_text('{% include "part.j2" %} {{ request }}' if edited == "part.j2"
                                     else "old {{ request }}")
    (tmp_path / "part.j2").write_text("old")
    os.utime(tmp_path / edited, (1000, 1000))
    prompts = PromptLoader([tmp_path])
    assert fit_messages(prompts, "q", "t", "d")[0].content == "old " + WORKED[0].request
    (tmp_path / edited).write_text("new" if edited == "part.j2" else "new {{ request }}")
    os.utime(tmp_path / edited, (2000, 2000))  # an mtime the check can tell apart, whatever the file system's
    probe = fit_messages(prompts, "q", "t", "d")
    assert probe[0].content == "new " + WORKED[0].request and probe[-1].content == "new q"
