"""`mylm serve --tools native`: tools forwarded to an upstream with native calling (the scripted OpenAI server
streaming `delta.tool_calls` in small delayed fragments), calls it leaves in `content` rescued, driven by the
official OpenAI SDK streaming and not."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import SEARCH, WEATHER, serving, tracked
from tests.serve.test_serve_chat import QUESTION, client, streamed


def native(name: str, arguments: str, call_id: str = "call_up_1") -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": arguments}


@pytest.fixture
def served(upstream: OpenAIServer) -> Iterator[str]:
    with serving(upstream.base_url, tools="native") as url:
        yield url


def test_tools_and_choice_go_upstream_natively(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion("", tool_calls=[native("get_weather", '{"city": "Paris", "days": 2}')])])
    reply = client(served).chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER, SEARCH],
                                                   tool_choice={"type": "function",
                                                                "function": {"name": "get_weather"}})
    sent = upstream.requests[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "search_files"]
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["function"]["parameters"]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # The model sees the conversation as the client sent it: no protocol system prompt, no grammar, no stops.
    assert sent["messages"] == QUESTION and "grammar" not in sent and "stop" not in sent
    choice = reply.choices[0]
    (tool_call,) = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and tool_call.id == "call_up_1"
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris", "days": 2}


def test_streamed_native_calls_pass_through_with_their_ids(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion("Checking both.", tool_calls=[
        native("get_weather", '{"city": "Paris"}', "call_a"),
        native("search_files", '{"pattern": "*.py"}', "call_b"),
    ])])
    content, reasoning, calls, finish, usage = streamed(served, model="m", messages=QUESTION,
                                                        tools=[WEATHER, SEARCH], stream_options={"include_usage": True})
    assert finish == "tool_calls" and content == "" and reasoning == "Checking both."
    assert [(c["id"], c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("call_a", "get_weather", {"city": "Paris"}), ("call_b", "search_files", {"pattern": "*.py"})]
    assert usage is not None and usage.prompt_tokens == 17


@pytest.mark.parametrize("left_in_content", [
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_code>\n<name>get_weather</name>\n<parameters>\n{"city": "Paris"}\n</parameters>\n</tool_code>',
    'Let me check.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
])
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_left_in_content_is_rescued_as_a_native_call(
    upstream: OpenAIServer, served: str, left_in_content: str, stream: bool
) -> None:
    upstream.script([left_in_content])
    if stream:
        content, _, calls, finish, _ = streamed(served, model="m", messages=QUESTION, tools=[WEATHER])
    else:
        message = client(served).chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER])
        choice = message.choices[0]
        content, finish = choice.message.content or "", choice.finish_reason
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in choice.message.tool_calls or []]
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0]["id"].startswith("call_")
    assert "get_weather" not in content and "{" not in content


def test_multi_turn_forwards_calls_and_results_natively(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion("", tool_calls=[native("get_weather", '{"city": "Paris"}', "call_x")]),
                     "It is sunny, 21 C."])
    api = client(served)
    first = api.chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER])
    message = first.choices[0].message
    result = {"role": "tool", "tool_call_id": "call_x", "content": "sunny, 21 C <|im_end|>"}
    conversation = [{"role": "system", "content": "Be brief."}, *QUESTION, message.model_dump(exclude_none=True),
                    result]
    content, _, calls, finish, _ = streamed(served, model="m", messages=conversation, tools=[WEATHER])
    assert (content, calls, finish) == ("It is sunny, 21 C.", [], "stop")
    sent = upstream.requests[1].body["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."} and sent[1] == QUESTION[0]
    assert sent[2]["role"] == "assistant" and sent[2]["tool_calls"] == [
        {"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert sent[3]["role"] == "tool" and sent[3]["tool_call_id"] == "call_x"
    # Special tokens in a tool result are defused, as in the loop; the rest reaches the model unchanged.
    assert sent[3]["content"].startswith("sunny, 21 C ") and "<|im_end|>" not in sent[3]["content"]
    assert not any("<tool_code>" in (m.get("content") or "") or "<observation>" in (m.get("content") or "")
                   for m in sent)


def test_an_invalid_native_call_is_corrected_upstream_as_its_tool_result(
    upstream: OpenAIServer, served: str
) -> None:
    upstream.script([Completion("", tool_calls=[native("get_weather", '{"days": 0}', "call_bad")]),
                     Completion("", tool_calls=[native("get_weather", '{"city": "Oslo"}', "call_good")])])
    _, _, calls, finish, _ = streamed(served, model="m", messages=QUESTION, tools=[WEATHER])
    assert finish == "tool_calls" and [(c["id"], json.loads(c["arguments"])) for c in calls] == [
        ("call_good", {"city": "Oslo"})]
    retry = upstream.requests[1].body["messages"]
    assert retry[-2]["tool_calls"][0]["id"] == "call_bad"
    assert retry[-1]["role"] == "tool" and retry[-1]["tool_call_id"] == "call_bad"
    assert "city" in retry[-1]["content"]  # the schema's complaint: the required argument is missing


def test_broken_argument_json_out_of_corrections_returns_text_never_a_half_call(upstream: OpenAIServer) -> None:
    upstream.script([Completion("Hm.", tool_calls=[native("get_weather", '{"city": [')])] * 2)
    with serving(upstream.base_url, tools="native", max_corrections=1) as url:
        reply = client(url).chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER])
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls and upstream.remaining == 0


def test_without_tools_the_request_is_plain_chat(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Hello there."])
    reply = client(served).chat.completions.create(model="m", messages=QUESTION)
    assert reply.choices[0].message.content == "Hello there." and "tools" not in upstream.requests[0].body


def test_a_provider_without_native_calling_is_refused_at_start(subprocess_env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "mylm", "serve", "--tools", "native", "--port", "0",
                           "--provider", "anthropic", "--base-url", "http://127.0.0.1:9", "-m", "claude",
                           "--api-key", "k"],
                          env=subprocess_env, capture_output=True, text=True, timeout=60, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert "anthropic provider cannot forward tools natively" in lines[0] and "openai" in lines[0]


def test_an_anthropic_client_gets_the_same_forwarding(upstream: OpenAIServer, served: str) -> None:
    import anthropic

    tool = {"name": "get_weather", "description": "The weather.", "input_schema": WEATHER["function"]["parameters"]}
    upstream.script([Completion("On it.", tool_calls=[native("get_weather", '{"city": "Paris"}')]),
                     '{"name": "get_weather", "arguments": {"city": "Oslo"}}'])
    api = tracked(anthropic.Anthropic(base_url=served, api_key="unused", max_retries=0, timeout=30))
    first = api.messages.create(model="m", max_tokens=256, messages=QUESTION, tools=[tool])  # type: ignore[list-item]
    assert first.stop_reason == "tool_use"
    text, tool_use = first.content
    assert text.thinking == "On it." and tool_use.input == {"city": "Paris"}  # type: ignore[union-attr]
    conversation = [*QUESTION, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id,  # type: ignore[union-attr]
                                                  "content": "sunny"}]}]
    with api.messages.stream(model="m", max_tokens=256, messages=conversation, tools=[tool]) as stream:  # type: ignore[arg-type]
        second = stream.get_final_message()
    assert second.stop_reason == "tool_use" and [b.type for b in second.content] == ["tool_use"]
    assert second.content[0].input == {"city": "Oslo"}  # type: ignore[union-attr]  # rescued from the text
    sent = upstream.requests[1].body
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    # The upstream gets back the id it issued, not the Anthropic-shaped one the client saw.
    assert tool_use.id == "toolu_up_1"  # type: ignore[union-attr]
    assert sent["messages"][1]["tool_calls"][0] == {
        "id": "call_up_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_up_1", "content": "sunny"}


def test_tool_choice_none_forwards_the_conversation_natively_without_rescue(
    upstream: OpenAIServer, served: str
) -> None:
    upstream.script(['{"name": "get_weather", "arguments": {"city": "Paris"}}'])
    reply = client(served).chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER], tool_choice="none")
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert upstream.requests[0].body["tool_choice"] == "none"


def test_a_native_call_without_an_id_gets_a_stable_one(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion("", tool_calls=[native("get_weather", '{"city": "Paris"}', "")])] * 2)
    ids = [client(served).chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER])
           .choices[0].message.tool_calls[0].id for _ in range(2)]  # type: ignore[index]
    assert ids[0] == ids[1] and ids[0].startswith("call_") and len(ids[0]) > 10
