"""A reply that degenerates into repeating a line is cut short, and the model is told why (issue 20, item 7)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mylm import Agent, StopReason, tool
from mylm.llm import LLMChunk, LLMRequest, TextChunk
from mylm.protocol.parser import format_tool_call
from mylm.agent.step import ModelStep, StepConfig, drain
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.agent.turn import stream_turn
from mylm.core.types import ErrorEvent, FinishReason, Message, ToolCall

LOOP = "Let me count the results.\n" + "".join(f"#{n}\n" for n in range(15, 3015))


class Counting:
    """Wraps a ScriptedLLM and counts the text chunks the consumer actually pulled."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.pulled = 0

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        for chunk in self.inner.stream(request):
            if isinstance(chunk, TextChunk):
                self.pulled += 1
            yield chunk


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_agent_cuts_a_looping_reply_short_and_sends_the_correction() -> None:
    scripted = ScriptedLLM([LOOP, "The sum is 3."], chunk_size=3, stops="ignore")
    llm = Counting(scripted)
    result = Agent(llm, [add]).run("Add 1 and 2.")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "The sum is 3."
    total = -(-len(LOOP) // 3)
    assert scripted.closed_early == 1
    assert llm.pulled < total // 10  # the model did not have to produce the whole loop
    correction = scripted.requests[1].messages[-1]
    assert correction.role == "user" and "kept repeating itself" in correction.content
    assert "'#" in correction.content and "counting up" in correction.content
    looped = scripted.requests[1].messages[-2]
    assert looped.role == "assistant" and len(looped.content) < len(LOOP) // 10
    errors = [e for e in result.events if isinstance(e, ErrorEvent)]
    assert [e.kind for e in errors] == ["format"] and "repeated" in errors[0].message


def test_step_judges_a_degenerate_turn_unusable_even_when_it_parsed_as_an_answer() -> None:
    loop = "Sure.\n" + "The answer is four.\n" * 400
    llm = ScriptedLLM([loop], chunk_size=4)
    step = ModelStep(llm, [], StepConfig(max_tokens=512))
    messages = [Message("system", step.system_prompt()), Message("user", "2+2?")]
    _, outcome = drain(step.turn(messages))
    assert not outcome.usable and outcome.kind == "format"
    assert outcome.turn.finish is FinishReason.MAX_TOKENS and outcome.turn.degenerate
    assert outcome.correction is not None and "'The answer is four.'" in outcome.correction
    assert llm.closed_early == 1


def test_a_loop_in_the_reasoning_is_cut_too() -> None:
    llm = ScriptedLLM([ScriptedReply("", reasoning="Wait.\n" * 400)])
    request = LLMRequest([Message("user", "hi")], (), 256)
    turn_gen = stream_turn(llm, request, multiple_calls=False, shown=[])
    try:
        while True:
            next(turn_gen)
    except StopIteration as stop:
        turn = stop.value
    assert turn.degenerate and turn.finish is FinishReason.MAX_TOKENS and llm.closed_early == 1


def test_a_long_legit_reply_and_a_call_after_a_list_are_untouched() -> None:
    rows = "".join(f"| {n} | item {chr(97 + n % 26)}{n * 7 % 11} | {n * n} |\n" for n in range(1, 61))
    listing = "Here is the table:\n" + rows + format_tool_call(ToolCall("add", {"a": 1, "b": 2}))
    llm = ScriptedLLM([listing, "3"], chunk_size=2)
    result = Agent(llm, [add]).run("Table, then add.")
    assert result.final_text == "3"
    assert not [e for e in result.events if isinstance(e, ErrorEvent)]


def test_a_reply_looping_inside_one_line_is_cut_and_the_model_told_what_repeated() -> None:
    # A small model that never emits a newline: "Python 3.11.2 Python 3.11.2 ..." to the token limit.
    loop = "The installed version is " + "Python 3.11.2 " * 3000
    scripted = ScriptedLLM([loop, "It is Python 3.11.2."], chunk_size=4, stops="ignore")
    llm = Counting(scripted)
    result = Agent(llm, [add]).run("Which Python is installed?")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.final_text == "It is Python 3.11.2."
    assert scripted.closed_early == 1 and llm.pulled < len(loop) // 4 // 10
    correction = scripted.requests[1].messages[-1]
    assert "kept repeating itself" in correction.content and "in one line" in correction.content


@tool
def save(path: str, content: str) -> str:
    """Save a file."""
    return f"saved {len(content)} characters to {path}"


@pytest.mark.parametrize("content", [
    "a " * 30_000,                       # one long run of a repeated unit (JSON: one line)
    "=" * 5000,                          # a separator the user asked for
    "0,0,0,0\n" * 400,                   # a data file of identical lines
    "\n" * 300,                          # blank lines
    "{" * 20_000,                        # punctuation, as the security battery's huge commands are
    "$(" * 10_000,
    "0,0,0,0\n" * 1_000,                # a line of numbers, its newline JSON's escape
])
@pytest.mark.parametrize("chunk", [3, 4096])
def test_a_calls_repetitive_arguments_are_data_not_a_loop(content: str, chunk: int) -> None:
    reply = "I will save it.\n" + format_tool_call(ToolCall("save", {"path": "f.txt", "content": content}))
    llm = ScriptedLLM([reply, "Saved."], chunk_size=chunk)
    result = Agent(llm, [save]).run("Save the file.")
    assert result.final_text == "Saved."
    assert not [e for e in result.events if isinstance(e, ErrorEvent)]
    assert f"saved {len(content)} characters" in llm.requests[1].messages[-1].content


def test_the_same_arguments_in_xml_style_with_real_newlines_are_data_too() -> None:
    lines = "same line\n" * 200
    reply = ("<tool_code>\n<name>save</name>\n<parameters>\n<path>f.txt</path>\n<content>" + lines
             + "</content>\n</parameters>\n</tool_code>")
    llm = ScriptedLLM([reply, "Saved."], chunk_size=5)
    result = Agent(llm, [save]).run("Save the file.")
    assert result.final_text == "Saved."
    assert not [e for e in result.events if isinstance(e, ErrorEvent)]


def test_an_answer_at_the_step_limit_that_loops_ends_the_run_with_the_paragraph_said_once() -> None:
    # Qwen2.5-Coder-1.5B at the step limit (temperature 0): the answer-only turn fell into saying one paragraph
    # until max_tokens. There is no next turn to correct it in, so the run's answer is the paragraph said once.
    opening = "The port set for the database in config.json is 5433. "
    paragraph = ("The task is now complete. No more tools will be run. The remaining steps are to verify that the "
                 "port is indeed 5433 and to ensure that the database is running on that port. ")
    call = format_tool_call(ToolCall("add", {"a": 1, "b": 2}))
    scripted = ScriptedLLM([call, opening + paragraph * 30], chunk_size=4, stops="ignore")
    result = Agent(scripted, [add], max_iterations=1).run("Which port?")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.final_text.startswith(opening.strip()) and result.final_text.count("The task is now complete") == 1
    assert scripted.closed_early == 1
    assert result.history[-1].content == result.final_text


def test_an_answer_that_loops_on_a_paragraph_is_the_answer_said_once_not_a_correction() -> None:
    # Qwen2.5-Coder-1.5B (temperature 0) answered the append-line task with one paragraph said again and again;
    # corrected, it wrote the very same loop, three times, and the run ended with an error instead of its answer.
    answer = ("<final_answer>\nThe line 'buy milk' has been added to the end of todo.txt. The list of files shows "
              "that todo.txt now has 9 bytes of content. ")
    loop = ("The file is located in the current directory and is named todo.txt. The file has a size of 9 bytes. ")
    scripted = ScriptedLLM([answer + loop * 30, "never asked"], chunk_size=5, stops="ignore")
    result = Agent(scripted, [add]).run("Add the line 'buy milk' at the end of todo.txt.")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.error is None
    assert result.final_text.startswith("The line 'buy milk' has been added") and result.final_text.endswith(".")
    assert result.final_text.count("The file is located") == 1
    assert scripted.closed_early == 1 and scripted.remaining == 1
    assert result.history[-1].content == result.final_text


def test_a_call_whose_content_runs_away_on_a_sentence_is_cut_and_corrected() -> None:
    """Through LangChain the 1.5B wrote release.txt twice, then ran 4,096 tokens (1,000 s on two cores) inside a
    third write's content. Arguments are data, but a sentence copied end to end ~64 times is a loop: the looser
    guard over arguments cuts it."""
    runaway = "I will save it.\n" + format_tool_call(ToolCall("save", {
        "path": "release.txt", "content": "juniper-015b\n" + "Ship it on Friday after the tests pass.\n" * 400}))
    scripted = ScriptedLLM([runaway, "Saved."], chunk_size=4, stops="ignore")
    llm = Counting(scripted)
    result = Agent(llm, [save]).run("Save the code name to release.txt.")
    assert result.final_text == "Saved." and scripted.closed_early == 1
    assert llm.pulled < -(-len(runaway) // 4) // 3  # cut well before the call's end
    correction = scripted.requests[1].messages[-1].content
    assert "Ship it on Friday" in correction and "repeated" in correction


@pytest.mark.parametrize("copies", [60, 100])
def test_a_sentence_a_file_may_hold_a_few_dozen_times_is_still_data(copies: int) -> None:
    content = "hello, world\n" * 200 if copies == 100 else "Ship it on Friday after the tests pass.\n" * copies
    reply = format_tool_call(ToolCall("save", {"path": "f.txt", "content": content}))
    llm = ScriptedLLM([reply, "Saved."], chunk_size=7)
    result = Agent(llm, [save]).run("Save the file.")
    assert result.final_text == "Saved." and not [e for e in result.events if isinstance(e, ErrorEvent)]


@pytest.mark.parametrize("unit", ["```python\n", "I hope this helps!\n", "---\n---\n* * *\n"])
def test_an_answer_written_whole_before_a_line_began_to_repeat_is_the_answer(unit: str) -> None:
    # Through the Agents SDK the 1.5B reported its edit and closed the file's code block, then wrote "```python"
    # line after line; corrected, it wrote the same loop three times, and its client printed the loop.
    answer = ("The greeting in greet.py has been changed from \"Hello\" to \"Hi\". The updated file content is as "
              "follows:\n```python\ndef greet(name):\n    return f'Hi, {name}!'\n```\n")
    # Corrected once (the prose before a loop may be a plan), the same loop again is the answer said once.
    scripted = ScriptedLLM([answer + unit * 200] * 2 + ["never asked"], chunk_size=5, stops="ignore")
    result = Agent(scripted, [add]).run("In greet.py, change the greeting from Hello to Hi.")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.error is None
    assert result.final_text.startswith("The greeting in greet.py has been changed")
    assert result.final_text.count(unit.strip()) <= 1 and "return f'Hi, {name}!'\n```" in result.final_text
    assert not result.final_text.endswith("```python")  # the block opened on the loop's first line is left out
    assert scripted.closed_early == 2 and scripted.remaining == 1
    assert "kept repeating itself" in scripted.requests[1].messages[-1].content


def test_a_plan_before_a_loop_is_corrected_and_the_call_after_it_runs() -> None:
    plan = ("I need to add the two numbers. I will call the add tool with a=1 and b=2 and then report the sum "
            "back to you once it has run.\n")
    call = format_tool_call(ToolCall("add", {"a": 1, "b": 2}))
    scripted = ScriptedLLM([plan + "```\n" * 200, call, "3"], chunk_size=5, stops="ignore")
    result = Agent(scripted, [add]).run("What is 1 + 2?")
    assert result.final_text == "3" and scripted.remaining == 0


def test_a_short_plan_before_a_loop_is_still_corrected() -> None:
    scripted = ScriptedLLM(["I will add them.\n" + "```\n" * 200, "3"], chunk_size=5, stops="ignore")
    result = Agent(scripted, [add]).run("What is 1 + 2?")
    assert result.final_text == "3"
    assert "kept repeating itself" in scripted.requests[1].messages[-1].content
