"""Structured outputs on Chat Completions (`response_format`): the OpenAI SDK's `chat.completions.parse` through
`mylm serve` in front of a scripted upstream. The answer is one JSON value the schema allows, sampled under a
grammar compiled from it (sent to the upstream), checked, and corrected when it is not."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.providers.servers import OpenAIServer
from tests.serve.support import WEATHER, serving


class City(BaseModel):
    name: str
    population: int


def _bodies(upstream: OpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]


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
            if stream:
                text = "".join(chunk.choices[0].delta.content or "" for chunk in api.chat.completions.create(
                    stream=True, **body) if chunk.choices)
            else:
                text = api.chat.completions.create(**body).choices[0].message.content or ""
        assert json.loads(text) == {"name": "Paris", "population": 2100000}
        told = _bodies(upstream)[1]["messages"][-1]["content"]
        assert "not a JSON value that follows the schema" in told and "population" in told


def test_json_object_asks_for_any_object() -> None:
    with OpenAIServer(['{"ok": true}']) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", response_format={"type": "json_object"},
                                            messages=[{"role": "user", "content": "Say ok in JSON."}])
    assert json.loads(reply.choices[0].message.content or "") == {"ok": True}


def test_a_format_beside_callable_tools_or_of_another_type_is_refused_in_openai_s_shape() -> None:
    with OpenAIServer([]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as api:
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(model="m", tools=[WEATHER], response_format={"type": "json_object"},
                                        messages=[{"role": "user", "content": "Weather in Paris as JSON?"}])
        assert refused.value.body["param"] == "response_format"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(model="m", response_format={"type": "yaml"},  # type: ignore[arg-type,misc]
                                        messages=[{"role": "user", "content": "x"}])
        assert refused.value.body["param"] == "response_format.type"  # type: ignore[index]
    assert not _bodies(upstream)


def test_the_responses_api_parses_its_text_format() -> None:
    with OpenAIServer(['{"name": "Paris", "population": 2100000}']) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        response = api.responses.parse(model="m", input="The capital of France, and its population?",
                                       text_format=City)
    assert response.output_parsed == City(name="Paris", population=2100000)
    (sent,) = _bodies(upstream)
    assert "grammar" in sent and "population" in sent["grammar"]
