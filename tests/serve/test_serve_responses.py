"""`POST /v1/responses` driven by the official OpenAI SDK: function calls, their outputs, streaming events."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import call, tracked

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(url: str) -> openai.OpenAI:
    return tracked(openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30))


def test_a_call_is_a_function_call_item(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}', "Checking.")])
    response = client(served).responses.create(model="codex-x", input="Weather in Paris?", tools=[WEATHER],
                                               instructions="You are helpful.", store=False)
    assert response.status == "completed" and response.model == "codex-x"
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call"]
    function_call = response.output[1]
    assert function_call.name == "get_weather" and json.loads(function_call.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert response.output_text == "" and response.output[0].content[0].text == "Checking."  # type: ignore[union-attr,index]
    assert "You are helpful." in upstream.requests[0].body["messages"][0]["content"]


def test_streamed_events_and_a_second_turn_with_the_output(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion(call("get_weather", '{"city": "Paris"}'), reasoning="look it up"), "Sunny."])
    api = client(served)
    kinds: list[str] = []
    final = None
    for event in api.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER], stream=True):
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert final is not None
    function_call = next(item for item in final.output if item.type == "function_call")
    second: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": function_call.call_id, "name": "get_weather",  # type: ignore[union-attr]
         "arguments": function_call.arguments},  # type: ignore[union-attr]
        {"type": "function_call_output", "call_id": function_call.call_id, "output": "sunny"},  # type: ignore[union-attr]
    ]
    answer = api.responses.create(model="m", input=second, tools=[WEATHER])
    assert answer.output_text == "Sunny."
    assert "<observation>\nsunny\n</observation>" in upstream.requests[1].body["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdks_responses_tool_runner_runs_its_function_and_answers(
    upstream: OpenAIServer, served: str, stream: bool
) -> None:
    """The OpenAI SDK's own agent loop on the Responses API (`openai.lib.responses_tool_runner`), a registered
    function really called with the arguments the model wrote."""
    from openai.lib.responses_tool_runner import RegisteredFunction, ResponsesToolRunner

    seen: list[dict[str, Any]] = []

    def get_weather(arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return f"{arguments['city']}: sunny, 21 C"

    tool = {"type": "function", "name": "get_weather", "description": "The current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                           "additionalProperties": False}, "strict": True}
    upstream.script([call("get_weather", '{"city": "Paris"}'), "It is sunny in Paris, 21 C."])
    runner = ResponsesToolRunner(functions=[RegisteredFunction(tool, get_weather)])  # type: ignore[arg-type]
    answer = runner.run(client(served), {"model": "m", "input": "How warm is it in Paris?"}, stream=stream,
                        max_steps=4)
    assert seen == [{"city": "Paris"}] and answer.output_text == "It is sunny in Paris, 21 C."
    sent = [r.body for r in upstream.requests if upstream.is_generation(r.method, r.path)][-1]["messages"]
    assert "<name>get_weather</name>" in sent[0]["content"] and "21 C" in sent[-1]["content"]
