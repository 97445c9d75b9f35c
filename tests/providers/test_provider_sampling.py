"""A request's own sampling settings (`LLMRequest.sampling`) reach each wire format where it expects them, over
the endpoint's configured `options`: the request's value wins, the configured ones it does not set stay."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from mylm.llm import LLMRequest, Sampling
from mylm.providers import Endpoint, create_llm
from tests.providers.helpers import FAST_RETRY, collect, request
from tests.providers.local_support import real_model
from tests.providers.native_servers import AnthropicServer, GeminiServer, LlamaCppServer, OllamaServer
from tests.providers.servers import HTTPError, LoopbackServer, OpenAIServer, RecordedRequest

ALL = Sampling(temperature=0.3, top_p=0.9, top_k=20, seed=7, presence_penalty=0.5, frequency_penalty=0.25,
               min_p=0.05, repeat_penalty=1.1)


def sent_body(provider: str, server: LoopbackServer, sampling: Sampling, **settings: Any) -> Any:
    """The generation body the provider sent for one request carrying `sampling`."""
    llm = create_llm(Endpoint(provider=provider, base_url=server.base_url, **{"model": "m", **settings}))
    llm.retry = FAST_RETRY  # type: ignore[attr-defined]
    collect(llm.stream(with_sampling(request("Hi"), sampling)))
    return [r for r in server.requests if server.is_generation(r.method, r.path)][-1].body


def with_sampling(req: LLMRequest, sampling: Sampling) -> LLMRequest:
    return dataclasses.replace(req, sampling=sampling)


TOP_LEVEL = {"temperature": 0.3, "top_p": 0.9, "top_k": 20, "seed": 7, "presence_penalty": 0.5,
             "frequency_penalty": 0.25, "min_p": 0.05, "repeat_penalty": 1.1}

#: provider, server, endpoint settings, where the sampling values sit in the body, and what they must be there.
CASES: list[tuple[str, Callable[..., LoopbackServer], dict[str, Any], Callable[[Any], Any], dict[str, Any]]] = [
    ("openai", OpenAIServer, {}, lambda b: b, TOP_LEVEL),
    ("openai-completions", OpenAIServer, {"chat_format": "chatml"}, lambda b: b, TOP_LEVEL),
    ("llamacpp", LlamaCppServer, {}, lambda b: b, TOP_LEVEL),
    ("ollama", OllamaServer, {}, lambda b: b["options"], TOP_LEVEL),
    ("ollama", OllamaServer, {"chat_format": "llama3"}, lambda b: b["options"], TOP_LEVEL),
    # The Messages API has no seed and no penalties: they are not sent (Anthropic refuses unknown fields).
    ("anthropic", AnthropicServer, {}, lambda b: b, {"temperature": 0.3, "top_p": 0.9, "top_k": 20}),
    ("gemini", GeminiServer, {}, lambda b: b["generationConfig"],
     {"temperature": 0.3, "topP": 0.9, "topK": 20, "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": 0.25}),
]
IDS = ["openai", "openai-completions", "llamacpp", "ollama-chat", "ollama-generate", "anthropic", "gemini"]


@pytest.mark.parametrize(("provider", "server", "settings", "where", "expected"), CASES, ids=IDS)
def test_each_wire_carries_the_requests_sampling_where_it_expects_it(
    provider: str, server: Callable[..., LoopbackServer], settings: dict[str, Any], where: Callable[[Any], Any],
    expected: dict[str, Any],
) -> None:
    with server(["ok"]) as upstream:
        body = sent_body(provider, upstream, ALL, **settings)
    placed = where(body)
    assert {k: placed.get(k) for k in expected} == expected
    others = set(TOP_LEVEL) | {"topP", "topK", "presencePenalty", "frequencyPenalty"}
    # Nothing else of the vocabulary, and nothing at the wrong level.
    assert set(placed) & others == set(expected)
    if placed is not body:
        assert not set(body) & others


@pytest.mark.parametrize(("provider", "server", "settings", "where", "expected"), CASES, ids=IDS)
def test_a_requests_value_wins_over_the_configured_option_and_the_others_stay(
    provider: str, server: Callable[..., LoopbackServer], settings: dict[str, Any], where: Callable[[Any], Any],
    expected: dict[str, Any],
) -> None:
    configured = {"temperature": 1.1, "top_p": 0.5}
    with server(["ok", "ok"]) as upstream:
        asked = where(sent_body(provider, upstream, Sampling(temperature=0.0), options=configured, **settings))
        default = where(sent_body(provider, upstream, Sampling(), options=configured, **settings))
    assert asked["temperature"] == 0.0 and asked["top_p"] == 0.5
    assert default["temperature"] == 1.1 and default["top_p"] == 0.5
    assert not set(default) & {"top_k", "topK", "seed", "presence_penalty", "presencePenalty"}


def test_gemini_replaces_a_configured_option_spelt_in_snake_case() -> None:
    # `top_p` and `topP` are one field to Gemini: the request's value replaces the configured one, not joins it.
    with GeminiServer(["ok"]) as upstream:
        config = sent_body("gemini", upstream, Sampling(top_p=0.2), options={"top_p": 0.7, "top_k": 3})[
            "generationConfig"]
    assert config["topP"] == 0.2 and "top_p" not in config and config["top_k"] == 3


def test_ollama_lets_the_request_win_over_options_configured_as_a_nested_table() -> None:
    with OllamaServer(["ok"]) as upstream:
        body = sent_body("ollama", upstream, Sampling(temperature=0.0, seed=3),
                         options={"options": {"temperature": 0.8, "num_ctx": 4096}, "keep_alive": "5m"})
    assert body["options"]["temperature"] == 0.0 and body["options"]["seed"] == 3
    assert body["options"]["num_ctx"] == 4096 and body["keep_alive"] == "5m" and "temperature" not in body


class _RefusesTopK(OpenAIServer):
    """An OpenAI-compatible server that, like OpenAI itself, refuses the `top_k` extension."""

    def rejection(self, request: RecordedRequest) -> HTTPError | None:
        if "top_k" in (request.body or {}):
            return HTTPError(400, {"error": {"message": "Unrecognized request argument supplied: top_k",
                                             "type": "invalid_request_error", "param": None, "code": None}})
        return super().rejection(request)


class _RefusesTemperatureWithTopP(AnthropicServer):
    """Claude models that take `temperature` or `top_p`, not both (Anthropic's own words)."""

    def rejection(self, request: RecordedRequest) -> HTTPError | None:
        body = request.body or {}
        if "temperature" in body and "top_p" in body:
            return HTTPError(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "`temperature` and `top_p` cannot both be specified for this model. Please use only one."}})
        return None


def test_anthropic_refusing_temperature_with_top_p_keeps_the_temperature() -> None:
    with _RefusesTemperatureWithTopP(["ok"]) as upstream:
        llm = create_llm(Endpoint(provider="anthropic", base_url=upstream.base_url, model="m"))
        llm.retry = FAST_RETRY  # type: ignore[attr-defined]
        text, _, _ = collect(llm.stream(with_sampling(request(), Sampling(temperature=0.2, top_p=0.9, top_k=4))))
    refused, accepted = (r.body for r in upstream.requests if upstream.is_generation(r.method, r.path))
    assert text == "ok" and refused["top_p"] == 0.9
    assert accepted["temperature"] == 0.2 and accepted["top_k"] == 4 and "top_p" not in accepted


def test_an_openai_compatible_server_that_refuses_top_k_is_asked_again_without_it() -> None:
    with _RefusesTopK(["ok", "ok"]) as upstream:
        llm = create_llm(Endpoint(provider="openai", base_url=upstream.base_url, model="m"))
        llm.retry = FAST_RETRY  # type: ignore[attr-defined]
        text, _, _ = collect(llm.stream(with_sampling(request(), Sampling(temperature=0.2, top_k=5))))
        collect(llm.stream(with_sampling(request(), Sampling(top_k=5))))
    first, retried, later = (r.body for r in upstream.requests if upstream.is_generation(r.method, r.path))
    assert text == "ok" and first["top_k"] == 5
    assert "top_k" not in retried and retried["temperature"] == 0.2
    assert "top_k" not in later  # learnt once for the endpoint



@pytest.mark.engine
@pytest.mark.slow
def test_the_local_model_samples_with_the_requests_settings_over_its_options() -> None:
    # Configured to sample wildly from the whole vocabulary, with no fixed seed: two replies never agree. A
    # request's temperature 0 (greedy) makes them agree; so does its seed, for that request only.
    llm = create_llm(Endpoint(provider="local", model=str(real_model()),
                              options={"temperature": 2.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}))
    ask = request("Write one sentence about the sea.", stop=(), max_tokens=24)

    def reply(sampling: Sampling) -> str:
        return collect(llm.stream(with_sampling(ask, sampling)))[0]

    assert reply(Sampling(temperature=0.0)) == reply(Sampling(temperature=0.0))
    seeded = reply(Sampling(seed=11))
    assert reply(Sampling(seed=11)) == seeded
    # The seed was the request's own: the next request without one samples from the model's random seed again.
    assert reply(Sampling()) != seeded
