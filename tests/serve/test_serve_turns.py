"""What a client sees before a call (issue 31, item 2). Text is held until the reply is known to be an answer or
a call: the prose before a call, or the newline after `</think>`, never goes out as content ahead of the call
(pydantic-ai's `run_stream` takes the first content for the final output and never runs the tool; Codex prints
it as an empty message). It goes out as reasoning; an answer goes out as content."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import WEATHER, call, openai_client

READ = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
#: The shapes of the issue's captures (Qwen2.5-Coder through llama-cpp-python): reasoning, a newline, the call;
#: prose, then the call.
AFTER_THINK = "<think>The user wants the file read.</think>\n" + call("read_file", '{"path": "hello.txt"}')
PROSE_FIRST = call("read_file", '{"path": "hello.txt"}', "Running it now.")


def client(url: str) -> openai.OpenAI:
    return openai_client(url)  # type: ignore[no-any-return]


@pytest.mark.parametrize("reply", [AFTER_THINK, PROSE_FIRST])
def test_no_content_delta_precedes_a_streamed_call(upstream: OpenAIServer, served: str, reply: str) -> None:
    upstream.script([reply])
    deltas: list[tuple[str, Any]] = []
    for chunk in client(served).chat.completions.create(
            model="m", stream=True, tools=[READ], messages=[{"role": "user", "content": "What does hello.txt say?"}]):
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                deltas.append(("content", delta.content))
            if getattr(delta, "reasoning_content", None):
                deltas.append(("reasoning", delta.reasoning_content))  # type: ignore[attr-defined]
            if delta.tool_calls:
                deltas.append(("call", delta.tool_calls[0].function.name if delta.tool_calls[0].function else None))
    assert [kind for kind, _ in deltas if kind == "content"] == []
    reasoning = "".join(text for kind, text in deltas if kind == "reasoning")
    assert ("The user wants the file read." if reply is AFTER_THINK else "Running it now.") in reasoning
    assert ("call", "read_file") in deltas


def test_an_answer_is_content_and_the_prose_before_its_tag_reasoning(upstream: OpenAIServer, served: str) -> None:
    reply = "I know this one.\n<final_answer>It says hi.</final_answer>"
    # Each answer given without reading the file the question names is sent back, and the retry must read
    # (`serve/checks.py`); a scripted model that still answers is told a call is required, then its text goes out.
    upstream.script([reply] * 8)
    question = [{"role": "user", "content": "What does hello.txt say?"}]
    whole = client(served).chat.completions.create(model="m", tools=[READ], messages=question).choices[0].message
    assert whole.content == "It says hi." and whole.reasoning_content == "I know this one."  # type: ignore[attr-defined]
    content, reasoning = "", ""
    for chunk in client(served).chat.completions.create(model="m", stream=True, tools=[READ], messages=question):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
    assert (content, reasoning) == ("It says hi.", "I know this one.")


def test_codex_gets_no_message_item_before_its_call(upstream: OpenAIServer, served: str) -> None:
    """The Responses request as Codex sends it (instructions, developer and user input items, function tools
    with `strict: false`, `store: false`, `include: reasoning.encrypted_content`), streamed."""
    upstream.script([AFTER_THINK])
    shell = {"type": "function", "name": "read_file", "description": "Read a file.", "strict": False,
             "parameters": READ["function"]["parameters"]}  # type: ignore[index]
    events = list(client(served).responses.create(
        model="local", instructions="You are Codex.", stream=True, store=False, tools=[shell],  # type: ignore[list-item]
        tool_choice="auto", parallel_tool_calls=False, include=["reasoning.encrypted_content"],
        input=[{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandboxed."}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                                "text": "What does hello.txt say?"}]}]))
    added = [e.item.type for e in events if e.type == "response.output_item.added"]  # type: ignore[union-attr]
    assert added == ["reasoning", "function_call"]
    assert not [e for e in events if e.type == "response.output_text.delta"]
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["reasoning", "function_call"]


def test_claude_code_gets_no_text_block_before_its_tool_use(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion(PROSE_FIRST, reasoning="Read it.")])
    api = anthropic.Anthropic(base_url=served, api_key="unused", max_retries=0, timeout=30)
    tool = {"name": "read_file", "description": "Reads a file.", "input_schema": READ["function"]["parameters"]}  # type: ignore[index]
    starts = []
    with api, api.messages.stream(model="local", max_tokens=32000, tools=[tool],  # type: ignore[list-item]
                             system=[{"type": "text", "text": "You are Claude Code."}],
                             messages=[{"role": "user", "content": [{"type": "text", "text": "Read hello.txt"}]}],
                             ) as stream:
        for event in stream:
            if event.type == "content_block_start":
                starts.append(event.content_block.type)
        final = stream.get_final_message()
    assert starts == ["thinking", "tool_use"] and final.stop_reason == "tool_use"
    assert final.content[0].thinking == "Read it.\n\nRunning it now."  # type: ignore[union-attr]


def test_pydantic_ai_run_stream_runs_the_tool_and_returns_the_answer(upstream: OpenAIServer, served: str) -> None:
    """The failure of the issue, with pydantic-ai itself: `run_stream` took `"\\nRunning it now.\\n"` for the final
    output."""
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    upstream.script(["<think>Read it first.</think>\n" + PROSE_FIRST, "The file says hi."])
    provider = OpenAIProvider(base_url=served + "/v1", api_key="unused")
    model = OpenAIChatModel("local", provider=provider)
    agent = pydantic_ai.Agent(model)
    ran: list[str] = []

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        ran.append(path)
        return "hi"

    async def main() -> str:
        try:
            async with agent.run_stream("What does hello.txt say?") as result:
                return await result.get_output()
        finally:
            await provider.client.close()  # its connections belong to this event loop

    assert asyncio.run(main()) == "The file says hi." and ran == ["hello.txt"]
    sent = upstream.requests[-1].body["messages"]
    assert "<observation>\nhi\n</observation>" in json.dumps(sent[-1]["content"], ensure_ascii=False).replace(
        "\\n", "\n")


def test_text_of_an_attempt_that_was_corrected_never_reaches_the_client(upstream: OpenAIServer,
                                                                          served: str) -> None:
    # The first reply calls an unknown tool: corrected upstream. Its prose was held, so it is not shown either.
    upstream.script([call("no_such_tool", "{}", "Trying something."), call("get_weather", '{"city": "Oslo"}', "Ok.")])
    content, reasoning = "", ""
    for chunk in client(served).chat.completions.create(
            model="m", stream=True, tools=[WEATHER], messages=[{"role": "user", "content": "Weather in Oslo?"}]):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
    assert content == "" and reasoning == "Ok."


#: What the constrained grammar lets a model write when it reaches for `<observation>` inside its answer (a `<`
#: there must be followed by a space): issue 31's capture leaked it to the client as `< observation>`.
MADE_UP = ("<final_answer>The file hello.txt says hi.\n< observation>\nmylm-capture-42\n< /observation>\n"
           "</final_answer>")


@pytest.mark.parametrize("stream", [False, True])
def test_a_defused_observation_never_reaches_the_client(upstream: OpenAIServer, served: str, stream: bool) -> None:
    upstream.script([MADE_UP] * 4)  # sent back, then told a call is required: no tool has read hello.txt
    question = [{"role": "user", "content": "What does hello.txt say?"}]
    if stream:
        content = "".join(choice.delta.content or "" for chunk in client(served).chat.completions.create(
            model="m", stream=True, tools=[READ], messages=question) for choice in chunk.choices)
    else:
        content = client(served).chat.completions.create(model="m", tools=[READ], messages=question
                                                         ).choices[0].message.content or ""
    assert content == "The file hello.txt says hi."


def test_defused_tags_are_dropped_from_the_thought_and_the_answer(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("read_file", '{"path": "a.txt"}', "I use the &lt;tool_code> form. < think>ok"),
                     "< final_answer>It says hi.< /final_answer>"])
    message = client(served).chat.completions.create(model="m", tools=[READ], messages=[
        {"role": "user", "content": "Read a.txt"}]).choices[0].message
    assert message.reasoning_content == "I use the  form. ok"  # type: ignore[attr-defined]
    answer = client(served).chat.completions.create(model="m", tools=[READ], messages=[
        {"role": "user", "content": "Read a.txt"}]).choices[0].message
    assert answer.content == "It says hi."
