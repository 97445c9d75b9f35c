"""A request that cannot fit the upstream's context is refused at once in the API's own context-length shape, or
its `max_tokens` capped to what is left, against the upstream's measured window (issue 31 item 6)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from mylm.prompts import PromptLoader
from mylm.providers import Endpoint, create_llm
from mylm.serve.app import ServeConfig, create_app
from mylm.serve.core import Core, CoreSettings
from mylm.serve.server import Background
from mylm.serve.window import ContextWindow
from mylm.testing import ScriptedLLM
from tests.providers.servers import OpenAIServer, RecordedRequest
from tests.serve.support import WEATHER, call, openai_client, tracked

#: Characters per token of the stand-in's tokenizer (not the estimator's 4, so an exact count is told apart).
CHARS_PER_TOKEN = 3


class LlamaServer(OpenAIServer):
    """llama.cpp's server: `/props` with its slot's context, `/tokenize` (a token per 3 characters)."""

    def __init__(self, n_ctx: int, **kwargs: Any) -> None:
        self.n_ctx = n_ctx
        super().__init__(**kwargs)

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.path == "/props":
            return 200, {"default_generation_settings": {"n_ctx": self.n_ctx, "temperature": 0.8}, "total_slots": 1}
        if request.path == "/tokenize":
            content = request.body["content"]
            return 200, {"tokens": list(range(len(content) // CHARS_PER_TOKEN))}
        return super().other(request)


class VLLMServer(OpenAIServer):
    """vLLM: no `/props`, but its model list says `max_model_len`."""

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        status, body = super().other(request)
        if request.path == "/v1/models":
            body["data"][0]["max_model_len"] = 1000
        return status, body


@contextlib.contextmanager
def fronting(upstream: OpenAIServer, fallback: int | None = None, tools: str = "emulate") -> Iterator[str]:
    endpoint = Endpoint(provider="openai", base_url=upstream.base_url, model="test-model", api_key="k",
                        max_tokens=512)
    loader = PromptLoader.default()
    llm = create_llm(endpoint, prompts=loader)
    core = Core(llm, loader, CoreSettings(constrain="off", timeout=30, tools=tools),  # type: ignore[arg-type]
                ContextWindow(llm, fallback=fallback))
    with Background(create_app(core, ServeConfig(model="test-model"))) as url:
        yield url


def generations(upstream: OpenAIServer) -> list[RecordedRequest]:
    return [r for r in upstream.requests if r.path == "/v1/chat/completions"]


LONG = "word " * 4000  # 20,000 characters: over 5,000 tokens by any count


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_beyond_the_window_is_openais_context_length_error_at_once(stream: bool) -> None:
    with LlamaServer(2048) as upstream, fronting(upstream) as url:
        with pytest.raises(openai.BadRequestError) as raised:
            reply = openai_client(url).chat.completions.create(
                model="m", tools=[WEATHER], messages=[{"role": "user", "content": LONG}], stream=stream)
            list(reply) if stream else None
        error = raised.value
        assert error.status_code == 400 and error.code == "context_length_exceeded" and error.param == "messages"
        assert error.body["type"] == "invalid_request_error"  # type: ignore[index]
        assert "maximum context length is 2048 tokens" in error.message
        assert "counted by the upstream's tokenizer" in error.message
        assert generations(upstream) == []  # nothing was sent to the model
        assert [r.path for r in upstream.requests] == ["/props", "/tokenize"]


def test_a_prompt_beyond_the_window_is_anthropics_prompt_too_long() -> None:
    with LlamaServer(2048) as upstream, fronting(upstream) as url:
        client = tracked(anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30))
        with pytest.raises(anthropic.BadRequestError) as raised:
            client.messages.create(model="m", max_tokens=32000, messages=[{"role": "user", "content": LONG}])
        body = raised.value.body
        assert raised.value.status_code == 400
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert body["error"]["message"].startswith("prompt is too long: ")  # type: ignore[index]
        assert generations(upstream) == []


def test_the_responses_route_blames_input() -> None:
    with LlamaServer(2048) as upstream, fronting(upstream) as url:
        with pytest.raises(openai.BadRequestError) as raised:
            openai_client(url).responses.create(model="m", input=LONG)
        assert raised.value.code == "context_length_exceeded" and raised.value.param == "input"


def test_max_tokens_is_capped_to_what_the_prompt_leaves() -> None:
    upstream = LlamaServer(4096, replies=[call("get_weather", '{"city": "Paris"}')])
    with upstream, fronting(upstream) as url:
        reply = openai_client(url).chat.completions.create(
            model="m", tools=[WEATHER], max_tokens=32000,
            messages=[{"role": "user", "content": "Weather in Paris? " + "please " * 300}])
        assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"
        counted = next(r for r in upstream.requests if r.path == "/tokenize").body["content"]
        sent = generations(upstream)[0].body
        prompt = len(counted) // CHARS_PER_TOKEN + 4 * len(sent["messages"])
        assert sent["max_tokens"] == 4096 - prompt < 32000


def test_a_request_that_fits_goes_as_it_was_asked() -> None:
    upstream = LlamaServer(32768, replies=["Hello."])
    with upstream, fronting(upstream) as url:
        reply = openai_client(url).chat.completions.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "Hi"}])
        assert reply.choices[0].message.content == "Hello."
        assert generations(upstream)[0].body["max_tokens"] == 100
        assert "/tokenize" not in [r.path for r in upstream.requests]  # no count needed far from the limit


def test_the_window_is_measured_once() -> None:
    upstream = LlamaServer(32768, replies=["One.", "Two."])
    with upstream, fronting(upstream) as url:
        client = openai_client(url)
        for _ in range(2):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
        assert [r.path for r in upstream.requests].count("/props") == 1


def test_vllms_max_model_len_is_the_window() -> None:
    with VLLMServer() as upstream, fronting(upstream) as url:
        with pytest.raises(openai.BadRequestError) as raised:
            openai_client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": LONG}])
        assert "maximum context length is 1000 tokens" in raised.value.message
        assert "estimated" in raised.value.message  # no tokenizer route: the estimate decides


def test_an_unknown_window_changes_nothing_and_a_configured_one_is_used() -> None:
    upstream = OpenAIServer(replies=["Long read."])
    with upstream, fronting(upstream) as url:  # no /props, /slots or max_model_len: unknown
        openai_client(url).chat.completions.create(
            model="m", max_tokens=32000, messages=[{"role": "user", "content": LONG}])
        assert generations(upstream)[0].body["max_tokens"] == 32000
    with OpenAIServer() as upstream, fronting(upstream, fallback=4096) as url:  # the registry's figure, say
        with pytest.raises(openai.BadRequestError) as raised:
            openai_client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": LONG}])
        assert "maximum context length is 4096 tokens" in raised.value.message
        assert generations(upstream) == []


def test_native_mode_counts_the_forwarded_conversation() -> None:
    with LlamaServer(2048) as upstream, fronting(upstream, tools="native") as url:
        with pytest.raises(openai.BadRequestError) as raised:
            openai_client(url).chat.completions.create(
                model="m", tools=[WEATHER], messages=[{"role": "user", "content": LONG}])
        assert raised.value.code == "context_length_exceeded"
        assert generations(upstream) == []


def test_an_in_process_engine_tells_its_own_window() -> None:
    model = ScriptedLLM(["Fine."])
    model.context_window = 1024  # type: ignore[attr-defined]  # what the local provider reports (its n_ctx)
    window = ContextWindow(model)
    assert window.size() == 1024 and window.source == "engine"
    assert window.fit([], 4000) == 1024 - 0  # an empty prompt leaves the whole window


def test_langchain_reads_it_as_a_context_overflow() -> None:
    from langchain_core.exceptions import ContextOverflowError
    from langchain_openai import ChatOpenAI

    with LlamaServer(2048) as upstream, fronting(upstream) as url:
        model = ChatOpenAI(base_url=url + "/v1", api_key="unused", model="local", max_retries=0)  # type: ignore[arg-type]
        with pytest.raises(ContextOverflowError):
            model.invoke(LONG)
        assert generations(upstream) == []


def test_count_tokens_counts_the_prompt_the_upstream_is_sent() -> None:
    """Anthropic's `count_tokens` (the SDK's `messages.count_tokens`): the tokens of what goes upstream, mylm's
    system prompt with the tools in it included, counted by llama.cpp's tokenizer where the upstream has one;
    nothing is generated."""
    asked: dict[str, Any] = {"model": "test-model", "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    weather = {"name": "get_weather", "description": "The weather in a city.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    with LlamaServer(8192) as upstream, fronting(upstream) as url:
        api = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
        bare = api.messages.count_tokens(**asked).input_tokens
        with_tools = api.messages.count_tokens(**asked, tools=[weather], system="Be brief.").input_tokens
        sent = [r for r in upstream.requests if r.path == "/tokenize"]
        with pytest.raises(anthropic.BadRequestError) as raised:
            api.messages.count_tokens(model="test-model", messages=[])
    assert 0 < bare < with_tools and not generations(upstream)
    counted = sent[-1].body["content"]
    assert "get_weather" in counted and "Be brief." in counted and "Weather in Paris?" in counted
    assert with_tools >= len(counted) // CHARS_PER_TOKEN  # the tokenizer's count (plus each message's overhead)
    assert "messages" in raised.value.message
    # An upstream without a tokenizer: estimated, never zero.
    with OpenAIServer() as plain, fronting(plain) as url:
        estimated = anthropic.Anthropic(base_url=url, api_key="unused").messages.count_tokens(**asked).input_tokens
    assert estimated > 0 and not generations(plain)


def test_responses_input_tokens_counts_the_prompt_the_upstream_is_sent() -> None:
    """OpenAI's `responses.input_tokens.count` the same way (its `model` may be left out)."""
    with LlamaServer(8192) as upstream, fronting(upstream) as url:
        api = openai_client(url)
        bare = api.responses.input_tokens.count(input="Weather in Paris?")
        with_tools = api.responses.input_tokens.count(model="test-model", input="Weather in Paris?",
                                                      instructions="Be brief.", tools=[RESPONSES_WEATHER])
        with pytest.raises(openai.BadRequestError) as raised:
            api.responses.input_tokens.count(input=[{"type": "nonsense"}])  # type: ignore[list-item]
    assert bare.object == "response.input_tokens" and 0 < bare.input_tokens < with_tools.input_tokens
    counted = [r for r in upstream.requests if r.path == "/tokenize"][-1].body["content"]
    assert "get_weather" in counted and "Be brief." in counted and not generations(upstream)
    assert raised.value.status_code == 400


RESPONSES_WEATHER: Any = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
