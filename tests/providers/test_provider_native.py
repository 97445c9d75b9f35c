"""What is particular to each native wire format: body layout, prompt rendering, finish hints, odd error framing."""

from __future__ import annotations

from typing import Any

import pytest

from mylm.core.errors import StreamError
from mylm.providers import Endpoint, create_llm
from mylm.core.types import Message
from tests.providers.helpers import FAST_RETRY, collect, request
from tests.providers.native_servers import AnthropicServer, GeminiServer, LlamaCppServer, OllamaServer
from tests.providers.servers import Completion, LoopbackServer, Raw, sse
from tests.providers.toy_tokenizer import tokenize


def make(provider: str, server: LoopbackServer, **settings: Any) -> Any:
    llm = create_llm(Endpoint(provider=provider, base_url=server.base_url, **{"model": "m", **settings}))
    llm.retry = FAST_RETRY  # type: ignore[attr-defined]
    return llm


def posts(server: LoopbackServer) -> list[Any]:
    return [r for r in server.requests if server.is_generation(r.method, r.path)]


# ---------------------------------------------------------------------------------------------------- Ollama


def test_ollama_chat_puts_sampling_options_inside_options_and_the_rest_on_top() -> None:
    with OllamaServer(["ok"]) as server:
        collect(
            make("ollama", server, options={"num_ctx": 8192, "temperature": 0.2, "keep_alive": "10m"}).stream(
                request("Hi", max_tokens=99)
            )
        )
    [sent] = posts(server)
    assert sent.path == "/api/chat"
    assert sent.body == {
        "model": "m",
        "stream": True,
        "keep_alive": "10m",
        "messages": [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi"}],
        "options": {
            "num_predict": 99,
            "stop": ["</tool_code>", "<observation>"],
            "num_ctx": 8192,
            "temperature": 0.2,
        },
    }


def test_ollama_with_a_chat_format_sends_a_raw_prompt_to_generate() -> None:
    with OllamaServer(["ok"]) as server:
        collect(make("ollama", server, chat_format="llama3").stream(request("Hi")))
    [sent] = posts(server)
    assert sent.path == "/api/generate" and sent.body["raw"] is True
    assert sent.body["prompt"].endswith("Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert sent.body["options"]["stop"] == [
        "</tool_code>",
        "<observation>",
        "<|eot_id|>",
        "<|start_header_id|>",
    ]


def test_ollama_reports_a_length_cut() -> None:
    with OllamaServer([Completion("cut", finish="length")]) as server:
        finish = collect(make("ollama", server).stream(request()))[2]
    assert finish is not None and finish.reason == "length"


# ------------------------------------------------------------------------------------------------- llama.cpp


def test_llamacpp_renders_with_the_servers_own_template_and_caches_the_prompt() -> None:
    with LlamaCppServer(["ok"]) as server:
        collect(make("llamacpp", server).stream(request("Hi", max_tokens=64)))
    apply, *tokenized, sent = server.requests
    assert apply.path == "/apply-template"
    # The template renders stand-ins; the contents are tokenized by the server as plain text.
    assert [m["role"] for m in apply.body["messages"]] == ["system", "user"]
    assert [r.body for r in tokenized] == [
        {"content": "You are a test.", "add_special": False, "parse_special": False},
        {"content": "Hi", "add_special": False, "parse_special": False},
    ]
    assert sent.body["prompt"] == ["[system]", *tokenize("You are a test."), "\n[user]", *tokenize("Hi"),
                                   "\n[assistant]"]
    assert server.prompt_text(sent) == "[system]You are a test.\n[user]Hi\n[assistant]"
    assert (sent.body["n_predict"], sent.body["cache_prompt"], sent.body["stream"]) == (64, True, True)
    assert sent.body["stop"] == ["</tool_code>", "<observation>"]


def test_llamacpp_without_apply_template_falls_back_to_chatml_once() -> None:
    with LlamaCppServer(["one", "two"], template=False, tokenize=False) as server:
        llm = make("llamacpp", server)
        collect(llm.stream(request()))
        collect(llm.stream(request()))
    assert [r.path for r in server.requests] == ["/apply-template", "/tokenize", "/completion", "/completion"]
    assert posts(server)[1].body["prompt"].startswith("<|im_start|>system\n")
    assert "<|im_end|>" in posts(server)[1].body["stop"]


def test_llamacpp_with_a_chat_format_renders_locally() -> None:
    with LlamaCppServer(["ok"]) as server:
        collect(make("llamacpp", server, chat_format="gemma").stream(request("Hi")))
    assert [r.path for r in server.requests] == ["/tokenize", "/tokenize", "/completion"]
    sent = posts(server)[0]
    assert sent.body["prompt"][-1] == "<end_of_turn>\n<start_of_turn>model\n"
    assert server.prompt_text(sent).endswith("Hi<end_of_turn>\n<start_of_turn>model\n")


def test_llamacpp_names_the_stopping_word() -> None:
    with LlamaCppServer(["Call.\n<tool_code>x</tool_code> more"]) as server:
        text, _, finish = collect(make("llamacpp", server).stream(request()))
    assert text == "Call.\n<tool_code>x"
    assert finish is not None and (finish.reason, finish.stop_sequence) == ("word", "</tool_code>")


def test_llamacpp_old_style_error_line_is_not_lost() -> None:
    failure = {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}}
    with LlamaCppServer([Completion("x", error_after=failure)], error_style="field") as server:
        with pytest.raises(StreamError, match="slot unavailable"):
            collect(make("llamacpp", server).stream(request()))


# ------------------------------------------------------------------------------------------------- Anthropic


def test_anthropic_sends_system_apart_alternating_turns_and_no_blank_stops() -> None:
    with AnthropicServer(["ok"]) as server:
        messages = (
            Message("system", "S"),
            Message("user", "a"),
            Message("user", "b"),
            Message("assistant", "c"),
            Message("user", "d"),
        )
        req = request(stop=("</tool_code>", "\n", "  "))
        req = type(req)(messages=messages, stop=req.stop, deadline=req.deadline)
        collect(make("anthropic", server, api_key="k-123").stream(req))
    [sent] = posts(server)
    assert sent.path == "/v1/messages"
    assert sent.headers["anthropic-version"] == "2023-06-01" and sent.headers["x-api-key"] == "k-123"
    assert "authorization" not in sent.headers
    assert sent.body["system"] == "S"
    assert sent.body["messages"] == [
        {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "d"},
    ]
    assert sent.body["stop_sequences"] == ["</tool_code>"]
    assert sent.body["max_tokens"] == 4096


def test_anthropic_reports_the_stop_sequence_and_cached_prompt_tokens() -> None:
    with AnthropicServer(["A <observation> b"]) as server:
        text, _, finish = collect(make("anthropic", server).stream(request()))
    assert text == "A "
    assert finish is not None and (finish.reason, finish.stop_sequence) == ("stop_sequence", "<observation>")
    assert finish.usage is not None and finish.usage.prompt_tokens == 20


# ---------------------------------------------------------------------------------------------------- Gemini


def test_gemini_request_layout_and_key_in_a_header_only() -> None:
    with GeminiServer(["ok"]) as server:
        collect(
            make(
                "gemini",
                server,
                model="models/gemini-2.0-flash",
                api_key="AIza-secret",
                options={"temperature": 0, "safetySettings": []},
            ).stream(request(stop=("a", "b", "c", "d", "e", "f")))
        )
    [sent] = posts(server)
    assert sent.path == "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
    assert sent.query == {"alt": "sse"} and sent.headers["x-goog-api-key"] == "AIza-secret"
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": "List the files."}]}],
        "systemInstruction": {"parts": [{"text": "You are a test."}]},
        "safetySettings": [],
        "generationConfig": {
            "maxOutputTokens": 4096,
            "stopSequences": ["a", "b", "c", "d", "e"],
            "temperature": 0,
        },
    }


def test_gemini_model_turns_use_the_model_role() -> None:
    with GeminiServer(["ok"]) as server:
        req = request()
        req = type(req)(
            messages=(*req.messages, Message("assistant", "x"), Message("user", "y")), deadline=req.deadline
        )
        collect(make("gemini", server).stream(req))
    assert [c["role"] for c in posts(server)[0].body["contents"]] == ["user", "model", "user"]


def test_gemini_blocked_prompt_is_reported() -> None:
    blocked = sse(
        {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}}, crlf=True
    )
    with GeminiServer([Raw([blocked])]) as server:
        with pytest.raises(StreamError, match=r"refused the prompt \(SAFETY\)"):
            collect(make("gemini", server).stream(request()))


def test_llamacpp_apply_template_is_retried_while_the_model_loads() -> None:
    """llama-server answers 503 'Loading model' until its model is loaded: that is retried like any call."""
    with LlamaCppServer(loading=2) as server:
        server.script([Completion("Ready.")])
        llm = make("llamacpp", server)
        assert collect(llm.stream(request()))[0] == "Ready."
        templates = [r for r in server.requests if r.path == "/apply-template"]
    assert len(templates) == 3


def test_llamacpp_apply_template_auth_failure_is_an_authentication_error() -> None:
    from mylm.core.errors import AuthenticationError

    with LlamaCppServer(template=True) as server:
        server.other = lambda request: (401, {"error": {"code": 401, "message": "Invalid API Key"}})  # type: ignore[method-assign]
        llm = make("llamacpp", server, api_key="bad", api_key_source="MYLM_API_KEY")
        with pytest.raises(AuthenticationError, match="MYLM_API_KEY"):
            collect(llm.stream(request()))
