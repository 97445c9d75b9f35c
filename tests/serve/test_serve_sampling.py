"""A client's sampling settings (`temperature`, `top_p`, `top_k`, `seed`, the penalties) reach the upstream model
through `mylm serve`, on every upstream call of a request (corrections included), from the official OpenAI and
Anthropic SDKs; an out-of-range value is a 400 in the API's own shape, and nothing goes upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.providers.native_servers import AnthropicServer
from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import WEATHER, call, serving, tracked
from tests.serve.test_serve_chat import QUESTION, client, streamed

CLAUDE_WEATHER = {"name": WEATHER["function"]["name"], "description": WEATHER["function"]["description"],
                  "input_schema": WEATHER["function"]["parameters"]}
SAMPLING = ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty")


def bodies(upstream: OpenAIServer | AnthropicServer) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if upstream.is_generation(r.method, r.path)]


def claude(url: str) -> anthropic.Anthropic:
    return tracked(anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30))


# The Anthropic SDK (2.x) no longer has keyword arguments for the sampling fields the Messages API still takes
# (older SDKs, Claude Code and other clients send them): they go in `extra_body`, as the same JSON fields.


def test_openai_sdk_temperature_and_top_p_reach_every_upstream_call_corrections_included(
    upstream: OpenAIServer, served: str
) -> None:
    # The first reply calls a tool that does not exist: mylm corrects it upstream, with the client's settings.
    upstream.script([call("get_wether", '{"city": "Paris"}'), call("get_weather", '{"city": "Paris"}')])
    reply = client(served).chat.completions.create(model="m", messages=QUESTION,  # type: ignore[arg-type]
                                                   tools=[WEATHER], temperature=0.3, top_p=0.9)
    assert reply.choices[0].finish_reason == "tool_calls"
    first, corrected = bodies(upstream)
    for body in (first, corrected):
        assert (body["temperature"], body["top_p"]) == (0.3, 0.9)
    assert len(corrected["messages"]) > len(first["messages"])  # it was the correction


def test_streamed_plain_chat_forwards_seed_penalties_and_the_top_k_extension(
    upstream: OpenAIServer, served: str
) -> None:
    upstream.script(["Hello."])
    content, _, _, finish, _ = streamed(served, model="m", messages=QUESTION, temperature=0, seed=42,
                                        presence_penalty=0.5, frequency_penalty=-0.5, extra_body={"top_k": 20})
    assert (content, finish) == ("Hello.", "stop")
    [body] = bodies(upstream)
    assert {k: body.get(k) for k in SAMPLING} == {"temperature": 0.0, "top_p": None, "top_k": 20, "seed": 42,
                                                    "presence_penalty": 0.5, "frequency_penalty": -0.5}


def test_a_request_without_sampling_leaves_the_upstream_its_defaults(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Hi.", "Hi."])
    client(served).chat.completions.create(model="m", messages=QUESTION, temperature=1.2)
    client(served).chat.completions.create(model="m", messages=QUESTION)
    with_, without = bodies(upstream)
    assert with_["temperature"] == 1.2
    assert not set(without) & set(SAMPLING)  # one request's settings do not stick to the next


def test_responses_api_temperature_and_top_p_reach_the_upstream(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Sunny."])
    response = client(served).responses.create(model="m", input="Weather?", temperature=0.4, top_p=0.7, store=False)
    assert response.output_text == "Sunny." and (response.temperature, response.top_p) == (0.4, 0.7)
    [body] = bodies(upstream)
    assert (body["temperature"], body["top_p"]) == (0.4, 0.7)


def test_anthropic_sdk_temperature_and_top_k_reach_the_upstream(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}', "Checking.")])
    message = claude(served).messages.create(model="claude-x", max_tokens=256,  # type: ignore[call-overload]
                                             messages=QUESTION, tools=[CLAUDE_WEATHER],
                                             extra_body={"temperature": 0.2, "top_k": 5, "top_p": 0.8})
    assert message.stop_reason == "tool_use"
    [body] = bodies(upstream)
    assert (body["temperature"], body["top_k"], body["top_p"]) == (0.2, 5, 0.8)


@pytest.fixture
def claude_upstream() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


def test_anthropic_sdk_through_mylm_to_an_anthropic_upstream_streaming(claude_upstream: AnthropicServer) -> None:
    claude_upstream.script(["It is sunny."])
    # The client is closed before the server stops: a pooled connection left to the collector warns later.
    with serving(claude_upstream.base_url, provider="anthropic") as url, claude(url) as api, \
            api.messages.stream(model="m", max_tokens=64, messages=QUESTION,  # type: ignore[arg-type]
                                extra_body={"temperature": 0.0, "top_k": 1}) as stream:
        text = "".join(stream.text_stream)
    assert text == "It is sunny."
    [body] = bodies(claude_upstream)
    assert (body["temperature"], body["top_k"]) == (0.0, 1) and "seed" not in body


def test_native_tools_forward_the_clients_sampling(upstream: OpenAIServer) -> None:
    upstream.script([Completion("", tool_calls=[{"id": "call_1", "name": "get_weather",
                                                 "arguments": '{"city": "Paris"}'}])])
    with serving(upstream.base_url, tools="native") as url:
        reply = client(url).chat.completions.create(model="m", messages=QUESTION,  # type: ignore[arg-type]
                                                    tools=[WEATHER], temperature=0.1, top_p=0.5, seed=9)
    assert reply.choices[0].finish_reason == "tool_calls"
    [body] = bodies(upstream)
    assert (body["temperature"], body["top_p"], body["seed"], body["tools"][0]["function"]["name"]) == \
        (0.1, 0.5, 9, "get_weather")


def test_min_p_and_repeat_penalty_reach_every_upstream_call_corrections_included(
    upstream: OpenAIServer, served: str
) -> None:
    # llama.cpp's, vLLM's and LM Studio's fields, sent with the OpenAI SDK's `extra_body`.
    upstream.script([call("get_wether", '{"city": "Paris"}'), call("get_weather", '{"city": "Paris"}')])
    reply = client(served).chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER],  # type: ignore[arg-type]
                                                   extra_body={"min_p": 0.05, "repeat_penalty": 1.1})
    assert reply.choices[0].finish_reason == "tool_calls"
    first, corrected = bodies(upstream)
    for body in (first, corrected):
        assert (body["min_p"], body["repeat_penalty"]) == (0.05, 1.1)


def test_vllms_repetition_penalty_is_read_as_repeat_penalty(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Hello."])
    client(served).chat.completions.create(model="m", messages=QUESTION,  # type: ignore[arg-type]
                                           extra_body={"repetition_penalty": 1.2})
    [body] = bodies(upstream)
    assert body["repeat_penalty"] == 1.2 and "min_p" not in body


@pytest.mark.parametrize(("fields", "param"), [
    ({"extra_body": {"min_p": 1.5}}, "min_p"),
    ({"extra_body": {"repeat_penalty": "high"}}, "repeat_penalty"),
    ({"extra_body": {"repetition_penalty": -1}}, "repetition_penalty"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"seed": "lucky"}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"extra_body": {"top_k": -1}}, "top_k"),
])
def test_out_of_range_chat_sampling_is_openais_400(upstream: OpenAIServer, served: str, fields: dict[str, Any],
                                                   param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(served).chat.completions.create(model="m", messages=QUESTION, **fields)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param and error["type"] == "invalid_request_error"
    assert param in error["message"] and not bodies(upstream)


def test_out_of_range_responses_top_p_is_openais_400(upstream: OpenAIServer, served: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(served).responses.create(model="m", input="hi", top_p=1.01)
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "top_p" and not bodies(upstream)


@pytest.mark.parametrize(("fields", "word"), [
    ({"top_k": -1}, "top_k"),
    ({"top_p": 2}, "top_p"),
])
def test_out_of_range_messages_sampling_is_anthropics_400(upstream: OpenAIServer, served: str,
                                                           fields: dict[str, Any], word: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude(served).messages.create(model="m", max_tokens=64, messages=QUESTION,  # type: ignore[arg-type]
                                       extra_body=fields)
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert word in body["error"]["message"] and not bodies(upstream)
