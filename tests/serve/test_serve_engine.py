"""`mylm serve` in front of real small models under the grammar: llama-cpp-python's server (SmolLM2 through its
chat template; Gemma 3 as a raw completion with mylm's chat format) and `--provider local` in-process. Every
tool call the SDKs receive validates against its schema (checked with the independent `jsonschema` package)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from mylm.prompts import PromptLoader
from mylm.providers import Endpoint, create_llm
from mylm.serve.app import ServeConfig, create_app
from mylm.serve.core import Core, CoreSettings
from mylm.serve.server import Background
from tests.providers.engine_support import SERVER_NEEDS, EngineServer
from tests.support import need_real_model

pytestmark = [pytest.mark.engine, pytest.mark.slow]
jsonschema = pytest.importorskip("jsonschema")

SMOLLM, GEMMA = "smollm2-135m", "gemma3-270m"
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def _need(model: str) -> Path:
    return need_real_model(model, needs=SERVER_NEEDS)


def _serve(endpoint: Endpoint) -> Background:
    loader = PromptLoader.default()
    # Generous: two shared cores under a full test run make a 270M model take minutes over a tool list.
    core = Core(create_llm(endpoint, prompts=loader), loader,
                CoreSettings(constrain="grammar", max_corrections=1, max_tokens=96, timeout=1800))
    return Background(create_app(core, ServeConfig(model="small")))


@pytest.fixture(scope="module")
def smollm() -> Iterator[str]:
    server = EngineServer(_need(SMOLLM), n_ctx=4096, threads=2)
    try:
        server.wait_ready(timeout=180)
        with _serve(Endpoint(provider="openai", base_url=server.base_url, model="smollm2",
                             options={"temperature": 0.0, "seed": 7})) as url:
            yield url
    finally:
        server.stop()


def _valid(arguments: Any) -> dict[str, Any]:
    found = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(found, PARAMETERS)
    return dict(found)


def test_openai_sdk_gets_schema_valid_calls_streaming_and_not(smollm: str) -> None:
    api = openai.OpenAI(base_url=smollm + "/v1", api_key="x", max_retries=0, timeout=1800)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                               "parameters": PARAMETERS}}]
    reply = api.chat.completions.create(model="small", messages=QUESTION, tools=tools, tool_choice="required",
                                        max_tokens=96)
    calls = reply.choices[0].message.tool_calls or []
    assert reply.choices[0].finish_reason == "tool_calls" and calls
    for tool_call in calls:
        assert tool_call.function.name == "get_weather"
        _valid(tool_call.function.arguments)
    streamed: dict[int, str] = {}
    for chunk in api.chat.completions.create(model="small", messages=QUESTION, tools=tools, stream=True,
                                             tool_choice="required", max_tokens=96):
        for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            streamed[piece.index] = streamed.get(piece.index, "") + (piece.function.arguments or "")
    assert streamed and all(_valid(arguments) for arguments in streamed.values())


def test_anthropic_sdk_gets_a_schema_valid_tool_use(smollm: str) -> None:
    api = anthropic.Anthropic(base_url=smollm, api_key="x", max_retries=0, timeout=1800)
    tools = [{"name": "get_weather", "description": "Weather in a city.", "input_schema": PARAMETERS}]
    message = api.messages.create(model="small", max_tokens=96, messages=QUESTION, tools=tools,
                                  tool_choice={"type": "any"})
    uses = [block for block in message.content if block.type == "tool_use"]
    assert message.stop_reason == "tool_use" and uses
    assert all(_valid(block.input) for block in uses)  # type: ignore[union-attr]


def test_local_provider_under_the_grammar() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
    local = Endpoint(provider="local", model=str(_need(SMOLLM)), options={"temperature": 0.0, "seed": 7})
    with _serve(local) as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=1800)
        reply = api.chat.completions.create(model="small", messages=QUESTION, tools=tools, tool_choice="required",
                                            max_tokens=96)
        assert all(_valid(c.function.arguments) for c in reply.choices[0].message.tool_calls or [])
        assert reply.choices[0].message.tool_calls


def test_a_base_model_through_raw_completions_and_a_chat_format_under_the_grammar() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
    server = EngineServer(_need(GEMMA), n_ctx=4096, threads=2)
    try:
        server.wait_ready(timeout=180)
        raw = Endpoint(provider="openai-completions", base_url=server.base_url, model="gemma3",
                       chat_format="gemma", options={"temperature": 0.0, "seed": 7})
        with _serve(raw) as url:
            api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=1800)
            reply = api.chat.completions.create(model="small", messages=QUESTION, tools=tools,
                                                tool_choice="required", max_tokens=96)
            calls = reply.choices[0].message.tool_calls or []
            assert calls and all(_valid(c.function.arguments) for c in calls)
    finally:
        server.stop()


def test_native_mode_forwards_tools_to_llama_cpp_python_function_calling() -> None:
    """`--tools native` in front of llama-cpp-python's own tool calling (`chatml-function-calling`): the calls are
    the engine's native ones, streamed and not, and the tool result goes back as a `tool` message it accepts."""
    server = EngineServer(_need(SMOLLM), n_ctx=4096, threads=2, extra=("--chat_format", "chatml-function-calling"))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                               "parameters": PARAMETERS}}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    try:
        server.wait_ready(timeout=180)
        endpoint = Endpoint(provider="openai", base_url=server.base_url, model="smollm2",
                            options={"temperature": 0.0, "seed": 7})
        loader = PromptLoader.default()
        core = Core(create_llm(endpoint, prompts=loader), loader,
                    CoreSettings(tools="native", max_corrections=1, max_tokens=96, timeout=1800))
        with Background(create_app(core, ServeConfig(model="small"))) as url:
            api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=1800)
            reply = api.chat.completions.create(model="small", messages=QUESTION, tools=tools, tool_choice=choice,
                                                max_tokens=96)
            (tool_call,) = reply.choices[0].message.tool_calls or []
            # The engine's own id, passed through: mylm neither renders nor re-numbers the call.
            assert tool_call.id.startswith("call__0_get_weather") and reply.choices[0].finish_reason == "tool_calls"
            _valid(tool_call.function.arguments)
            streamed: dict[int, str] = {}
            for chunk in api.chat.completions.create(model="small", messages=QUESTION, tools=tools, stream=True,
                                                     tool_choice=choice, max_tokens=96):
                for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    streamed[piece.index] = streamed.get(piece.index, "") + (piece.function.arguments or "")
            assert streamed and all(_valid(arguments) for arguments in streamed.values())
            conversation = [*QUESTION, reply.choices[0].message.model_dump(exclude_none=True),
                            {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny, 21 C"}]
            answer = api.chat.completions.create(model="small", messages=conversation, tools=tools,
                                                 tool_choice="none", max_tokens=32)
            assert answer.choices[0].finish_reason in ("stop", "length") and answer.choices[0].message.content
    finally:
        server.stop()
