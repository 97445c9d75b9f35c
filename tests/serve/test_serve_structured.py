"""Structured outputs on Chat Completions (`response_format`): the OpenAI SDK's `chat.completions.parse` through
`mylm serve` in front of a scripted upstream. The answer is one JSON value the schema allows, sampled under a
grammar compiled from it (sent to the upstream), checked, and corrected when it is not."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from pydantic import BaseModel

from tests.providers.servers import OpenAIServer
from tests.serve.support import WEATHER, call, serving


class City(BaseModel):
    name: str
    population: int


def _bodies(upstream: OpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]


def _content(api: openai.OpenAI, body: dict[str, Any], stream: bool) -> str:
    """The answer's text, from a streamed request or not."""
    if stream:
        return "".join(chunk.choices[0].delta.content or "" for chunk in api.chat.completions.create(
            stream=True, **body) if chunk.choices)
    return api.chat.completions.create(**body).choices[0].message.content or ""


def test_the_sdk_parses_the_answer_sampled_under_the_schema_grammar() -> None:
    with OpenAIServer(['{"name": "Paris", "population": 2100000}']) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        completion = api.chat.completions.parse(model="m", response_format=City, messages=[
            {"role": "user", "content": "Which is the capital of France, and how many live there?"}])
    assert completion.choices[0].message.parsed == City(name="Paris", population=2100000)
    (sent,) = _bodies(upstream)
    assert "grammar" in sent and "population" in sent["grammar"]
    assert "Answer with one JSON value that follows this JSON Schema" in sent["messages"][0]["content"]


@pytest.mark.parametrize("reply", [
    'Here it is:\n```json\n{"name": "Paris", "population": 2100000}\n```',
    'The answer: {"name": "Paris", "population": "2100000"} as asked.',  # a number in a string, coerced
])
def test_json_in_prose_or_a_fence_is_taken_out(reply: str) -> None:
    with OpenAIServer([reply]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        completion = api.chat.completions.parse(model="m", response_format=City, messages=[
            {"role": "user", "content": "The capital of France?"}])
    assert completion.choices[0].message.parsed == City(name="Paris", population=2100000)


def test_a_reply_that_breaks_the_schema_is_corrected_streamed_or_not() -> None:
    for stream in (False, True):
        with OpenAIServer(['{"name": "Paris"}', '{"name": "Paris", "population": 2100000}']) as upstream, \
                serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
            body: dict[str, Any] = {"model": "m", "response_format": {"type": "json_schema", "json_schema": {
                "name": "city", "schema": City.model_json_schema()}},
                "messages": [{"role": "user", "content": "The capital of France?"}]}
            text = _content(api, body, stream)
        assert json.loads(text) == {"name": "Paris", "population": 2100000}
        told = _bodies(upstream)[1]["messages"][-1]["content"]
        assert "not a JSON value that follows the schema" in told and "population" in told


def test_json_object_asks_for_any_object() -> None:
    with OpenAIServer(['{"ok": true}']) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", response_format={"type": "json_object"},
                                            messages=[{"role": "user", "content": "Say ok in JSON."}])
    assert json.loads(reply.choices[0].message.content or "") == {"ok": True}


class Forecast(BaseModel):
    city: str
    summary: str


#: The SDK's `parse` takes only tools marked strict.
STRICT_WEATHER = {"type": "function", "function": {**WEATHER["function"], "strict": True}}  # type: ignore[dict-item]


def test_beside_tools_the_calls_go_out_and_the_final_answer_follows_the_format() -> None:
    # The OpenAI Agents SDK with an `output_type` and tools sends both: the model calls the tools as usual; its
    # final answer, wrapped in prose here, goes out as the format's JSON value alone.
    replies = [call("get_weather", '{"city": "Paris"}', "I will look it up."),
               'Done. {"city": "Paris", "summary": "sunny, 21 C"}']
    with OpenAIServer(replies) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        messages: list[Any] = [{"role": "user", "content": "The weather in Paris, as a forecast?"}]
        first = api.chat.completions.parse(model="m", tools=[STRICT_WEATHER], response_format=Forecast,
                                           messages=messages)
        (made,) = first.choices[0].message.tool_calls or []
        assert made.function.name == "get_weather" and json.loads(made.function.arguments) == {"city": "Paris"}
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": made.id, "content": "sunny, 21 C"}]
        second = api.chat.completions.parse(model="m", tools=[STRICT_WEATHER], response_format=Forecast,
                                            messages=messages)
    assert second.choices[0].message.parsed == Forecast(city="Paris", summary="sunny, 21 C")
    assert json.loads(second.choices[0].message.content or "") == {"city": "Paris", "summary": "sunny, 21 C"}
    sent = _bodies(upstream)
    assert all("When you give your final answer" in b["messages"][0]["content"] for b in sent)
    assert "<tool_code>" in sent[0]["messages"][0]["content"]  # the tools are still taught


def test_beside_tools_an_answer_that_breaks_the_format_is_corrected_streamed_or_not() -> None:
    for stream in (False, True):
        replies = ["It is sunny in Paris.", '{"city": "Paris", "summary": "sunny"}']
        with OpenAIServer(replies) as upstream, serving(upstream.base_url) as url, \
                openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
            body: dict[str, Any] = {"model": "m", "tools": [WEATHER], "response_format": {
                "type": "json_schema", "json_schema": {"name": "forecast", "schema": Forecast.model_json_schema()}},
                "messages": [{"role": "user", "content": "Paris, as a forecast?"}]}
            text = _content(api, body, stream)
        assert json.loads(text) == {"city": "Paris", "summary": "sunny"}
        told = _bodies(upstream)[1]["messages"][-1]["content"]
        assert "not a JSON value that follows the schema" in told and "Call a tool if you still need one" in told


def test_beside_tools_the_responses_api_takes_its_text_format() -> None:
    replies = [call("get_weather", '{"city": "Paris"}'), '{"city": "Paris", "summary": "sunny"}']
    with OpenAIServer(replies) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        tool = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": WEATHER["function"]["parameters"]}  # type: ignore[index]
        first = api.responses.parse(model="m", input="Paris, as a forecast?", tools=[tool],  # type: ignore[list-item]
                                    text_format=Forecast)
        (made,) = [item for item in first.output if item.type == "function_call"]
        second = api.responses.parse(model="m", previous_response_id=first.id, text_format=Forecast,
                                     tools=[tool],  # type: ignore[list-item]
                                     input=[{"type": "function_call_output", "call_id": made.call_id,
                                             "output": "sunny"}])
    assert second.output_parsed == Forecast(city="Paris", summary="sunny")


def test_a_format_of_another_type_or_beside_native_tools_is_refused_in_openai_s_shape() -> None:
    with OpenAIServer([]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as api:
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(model="m", response_format={"type": "yaml"},  # type: ignore[arg-type,misc]
                                        messages=[{"role": "user", "content": "x"}])
        assert refused.value.body["param"] == "response_format.type"  # type: ignore[index]
    with OpenAIServer([]) as upstream, serving(upstream.base_url, tools="native") as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as api:
        with pytest.raises(openai.BadRequestError, match="needs `mylm serve --tools emulate`"):
            api.chat.completions.create(model="m", tools=[WEATHER], response_format={"type": "json_object"},
                                        messages=[{"role": "user", "content": "Weather in Paris as JSON?"}])
    assert not _bodies(upstream)


def test_the_responses_api_parses_its_text_format() -> None:
    with OpenAIServer(['{"name": "Paris", "population": 2100000}']) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        response = api.responses.parse(model="m", input="The capital of France, and its population?",
                                       text_format=City)
    assert response.output_parsed == City(name="Paris", population=2100000)
    (sent,) = _bodies(upstream)
    assert "grammar" in sent and "population" in sent["grammar"]


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
def test_the_agents_sdk_with_an_output_type_and_tools_gets_its_typed_answer(responses: bool) -> None:
    """The OpenAI Agents SDK sends its `output_type`'s schema beside the agent's tools on every request; the run
    calls the tool, then ends with the typed value."""
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    looked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        looked.append(city)
        return "sunny, 21 C"

    replies = [call("get_weather", '{"city": "Paris"}'), '{"city": "Paris", "summary": "sunny, 21 C"}']

    async def run(url: str) -> Any:
        client = AsyncOpenAI(base_url=url + "/v1", api_key="unused")
        model_class = agents.OpenAIResponsesModel if responses else agents.OpenAIChatCompletionsModel
        agent = agents.Agent(name="weather", instructions="Answer with a forecast.", tools=[get_weather],
                             output_type=Forecast, model=model_class(model="m", openai_client=client))
        try:
            return (await agents.Runner.run(agent, "The weather in Paris?")).final_output
        finally:
            await client.close()

    import asyncio

    with OpenAIServer(replies) as upstream, serving(upstream.base_url) as url:
        answer = asyncio.run(run(url))
    assert looked == ["Paris"]
    assert answer == Forecast(city="Paris", summary="sunny, 21 C")


def test_the_anthropic_sdk_parses_its_output_format_with_tools_or_without() -> None:
    """`messages.parse(output_format=Model)` sends `output_config.format`; it was ignored, and the SDK then failed
    to parse a prose answer."""
    tools: list[Any] = [{"name": "get_weather", "description": "The weather in a city.",
                         "input_schema": WEATHER["function"]["parameters"]}]  # type: ignore[index]
    replies = ['The answer: {"name": "Paris", "population": 2100000}',
               call("get_weather", '{"city": "Paris"}'), 'Sunny there.', '{"city": "Paris", "summary": "sunny"}']
    with OpenAIServer(replies) as upstream, serving(upstream.base_url) as url, \
            anthropic.Anthropic(base_url=url, api_key="unused") as api:
        plain = api.messages.parse(model="m", max_tokens=256, output_format=City, messages=[
            {"role": "user", "content": "The capital of France, and how many live there?"}])
        assert plain.parsed_output == City(name="Paris", population=2100000)
        messages: list[Any] = [{"role": "user", "content": "Paris, as a forecast?"}]
        first = api.messages.parse(model="m", max_tokens=256, tools=tools, output_format=Forecast, messages=messages)
        (use,) = [block for block in first.content if block.type == "tool_use"]
        messages += [{"role": "assistant", "content": [block.model_dump() for block in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
        second = api.messages.parse(model="m", max_tokens=256, tools=tools, output_format=Forecast,
                                    messages=messages)
    assert second.parsed_output == Forecast(city="Paris", summary="sunny")
    told = _bodies(upstream)[-1]["messages"][-1]["content"]
    assert "not a JSON value that follows the schema" in told  # "Sunny there." was sent back
