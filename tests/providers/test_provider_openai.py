"""The OpenAI-compatible chat and completions providers against a loopback server speaking their SSE format."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from typing import Any

import pytest

from mylm.core.cancel import CancelToken
from mylm.core.errors import (
    AuthenticationError,
    CancelledError,
    ContextOverflowError,
    EndpointUnreachableError,
    HTTPStatusError,
    LLMTimeoutError,
    ModelNotFoundError,
    RateLimitError,
    ServerError,
    StreamError,
)
from mylm.llm import TextChunk
from mylm.providers import Endpoint, create_llm, list_models
from mylm.providers.openai import OpenAIChat, OpenAICompletions
from mylm.core.types import Usage
from tests.providers.helpers import FAST_RETRY, TOOL_CALL, collect, read_until_call, request
from tests.providers.servers import (
    FILLER,
    Completion,
    Hang,
    HTTPError,
    OpenAIServer,
    Raw,
    Trickle,
    pieces,
    sse,
)

KEY = "sk-test-CANARY-0123456789"


def chat(server: OpenAIServer, **overrides: Any) -> OpenAIChat:
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "test-model",
        "api_key": KEY,
        "api_key_source": "MYLM_API_KEY",
        **overrides,
    }
    return OpenAIChat(Endpoint(provider="openai", **settings), retry=FAST_RETRY)


# ------------------------------------------------------------------------------------------- the happy path


def test_openai_streams_text_finish_and_usage(openai_server: OpenAIServer) -> None:
    openai_server.script(["Hello, wörld! 👋 All done."])
    text, reasoning, finish = collect(chat(openai_server).stream(request()))
    assert text == "Hello, wörld! 👋 All done."
    assert reasoning == ""
    assert finish is not None and finish.reason == "stop"
    assert finish.usage == Usage(prompt_tokens=17, completion_tokens=len(pieces(text)))


def test_openai_request_carries_model_messages_stops_cap_and_bearer_key(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    collect(chat(openai_server, options={"temperature": 0}).stream(request("Hi", max_tokens=77)))
    [sent] = openai_server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["accept-encoding"] == "identity"
    assert sent.body == {
        "model": "test-model",
        "messages": [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 77,
        "stop": ["</tool_code>", "<observation>"],
        "temperature": 0,
    }


def test_openai_without_key_sends_no_authorization(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    collect(chat(openai_server, api_key=None).stream(request()))
    assert "authorization" not in openai_server.requests[0].headers


def test_openai_server_side_stop_leaves_the_call_without_its_closing_tag(openai_server: OpenAIServer) -> None:
    openai_server.script([f"Let me look.\n{TOOL_CALL}\n<observation>fake</observation>"])
    text, _, finish = collect(chat(openai_server).stream(request()))
    # The server drops the stop string, as OpenAI does; the agent's parser accepts the block without it.
    assert text == "Let me look.\n" + TOOL_CALL.removesuffix("</tool_code>")
    assert finish is not None and finish.reason == "stop"


def test_openai_reasoning_content_arrives_as_reasoning_chunks(openai_server: OpenAIServer) -> None:
    openai_server.script([Completion("Answer.", reasoning="Thinking it over.")])
    text, reasoning, _ = collect(chat(openai_server).stream(request()))
    assert (text, reasoning) == ("Answer.", "Thinking it over.")


@pytest.mark.parametrize("knobs", [{"done": False}, {"crlf": True}, {"pings": False, "usage": False}])
def test_openai_framing_variants_give_the_same_text(knobs: dict[str, Any]) -> None:
    with OpenAIServer(["Same text, any framing."], **knobs) as server:
        text, _, finish = collect(chat(server).stream(request()))
    assert text == "Same text, any framing."
    assert finish is not None and finish.reason == "stop"


def test_openai_bytes_split_anywhere_even_inside_utf8_decode_intact(openai_server: OpenAIServer) -> None:
    events = b"".join(
        sse({"choices": [{"index": 0, "delta": {"content": part}}]}) for part in ("Grüße ", "🌍!")
    )
    events += sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + sse("[DONE]")
    openai_server.script([Raw([events[i : i + 3] for i in range(0, len(events), 3)])])
    text, _, finish = collect(chat(openai_server).stream(request()))
    assert text == "Grüße 🌍!"
    assert finish is not None and finish.reason == "stop"


def test_openai_close_delimited_body_without_chunking_is_read_as_it_arrives(
    openai_server: OpenAIServer,
) -> None:
    events = [sse({"choices": [{"index": 0, "delta": {"content": "abc"}, "finish_reason": "length"}]})]
    openai_server.script([Raw(events, chunked=False)])
    text, _, finish = collect(chat(openai_server).stream(request()))
    assert text == "abc"
    assert finish is not None and finish.reason == "length"


def test_openai_answer_without_streaming_is_accepted(openai_server: OpenAIServer) -> None:
    document = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Whole."}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    openai_server.script([Raw([json.dumps(document).encode()], content_type="application/json")])
    text, _, finish = collect(chat(openai_server).stream(request()))
    assert text == "Whole."
    assert finish is not None and finish.usage == Usage(5, 2)


def test_openai_completions_renders_the_chat_format_and_sends_its_end_marker(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script(["Done."])
    llm = OpenAICompletions(
        Endpoint(provider="openai-completions", base_url=openai_server.base_url, chat_format="chatml"),
        retry=FAST_RETRY,
    )
    text, _, _ = collect(llm.stream(request("Hi")))
    # A plain OpenAI-compatible server has no llama.cpp `/tokenize` at its root: the prompt is one string.
    probe, sent = openai_server.requests
    assert probe.path == "/tokenize" and sent.path == "/v1/completions"
    assert sent.body["prompt"] == (
        "<|im_start|>system\nYou are a test.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert sent.body["stop"] == ["</tool_code>", "<observation>", "<|im_end|>", "<|im_start|>"]
    assert "messages" not in sent.body
    assert text == "Done."


def test_openai_completions_cuts_a_spelled_out_end_marker_when_the_server_ignores_stops() -> None:
    with OpenAIServer(
        ["The answer is 4.<|im_end|>\n<|im_start|>user\nmade up"], stop_mode="ignore"
    ) as server:
        llm = OpenAICompletions(
            Endpoint(provider="openai-completions", base_url=server.base_url), retry=FAST_RETRY
        )
        text, _, finish = collect(llm.stream(request()))
    assert text == "The answer is 4."
    assert finish is not None and (finish.reason, finish.stop_sequence) == ("stop", "<|im_end|>")


def test_openai_lists_models_and_factory_infers_openai(openai_server: OpenAIServer) -> None:
    openai_server.models = ["b-model", "a-model"]
    assert list_models(Endpoint(base_url=openai_server.base_url)) == ["a-model", "b-model"]
    assert openai_server.requests[-1].path == "/v1/models"
    assert isinstance(create_llm(Endpoint(base_url=openai_server.root_url)), OpenAIChat)


def test_openai_bare_host_port_gets_v1(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    llm = create_llm(Endpoint(base_url=openai_server.root_url, model="m"))
    collect(llm.stream(request()))
    assert openai_server.requests[0].path == "/v1/chat/completions"


# ------------------------------------------------------------------------------------------ stop handling


def test_openai_model_that_rejects_stop_gets_none(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    collect(chat(openai_server, model="o4-mini").stream(request()))
    assert "stop" not in openai_server.requests[0].body


def test_openai_stop_rejected_once_is_dropped_and_remembered() -> None:
    with OpenAIServer(["first", "second"], stop_mode="reject") as server:
        llm = chat(server)
        assert collect(llm.stream(request()))[0] == "first"
        assert collect(llm.stream(request()))[0] == "second"
        bodies = [r.body for r in server.requests]
    assert ["stop" in b for b in bodies] == [True, False, False]


def test_openai_stops_are_capped_at_four(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    collect(chat(openai_server).stream(request(stop=("a1", "b2", "c3", "d4", "e5"))))
    assert openai_server.requests[0].body["stop"] == ["a1", "b2", "c3", "d4"]


def test_openai_max_tokens_renamed_when_the_server_asks(openai_server: OpenAIServer) -> None:
    error = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
    openai_server.script([HTTPError(400, error), "ok"])
    assert collect(chat(openai_server).stream(request()))[0] == "ok"
    second = openai_server.requests[1].body
    assert "max_tokens" not in second and second["max_completion_tokens"] == 4096


def test_openai_early_close_disconnects_from_a_server_that_ignores_stops() -> None:
    with OpenAIServer([Completion(f"Looking.\n{TOOL_CALL}", endless=True)], stop_mode="ignore") as server:
        seen = read_until_call(chat(server).stream(request()))
        assert server.disconnected.wait(30), "the server never saw the client go away"
    assert seen.startswith("Looking.\n" + TOOL_CALL)
    assert len(seen) < len("Looking.\n" + TOOL_CALL) + len(FILLER)


# ------------------------------------------------------------------------------------------- HTTP errors


def test_openai_401_names_the_key_variable_and_never_the_key(openai_server: OpenAIServer) -> None:
    body = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    openai_server.script([HTTPError(401, body)])
    with pytest.raises(AuthenticationError) as caught:
        collect(chat(openai_server).stream(request()))
    message = str(caught.value)
    assert "MYLM_API_KEY" in message and "Incorrect API key provided" in message
    assert KEY not in message and KEY not in repr(caught.value.args)
    assert caught.value.status == 401 and len(openai_server.requests) == 1


def test_openai_401_without_a_key_says_to_set_one(openai_server: OpenAIServer) -> None:
    openai_server.script([HTTPError(401, {"error": {"message": "Missing bearer authentication in header"}})])
    with pytest.raises(AuthenticationError, match="no API key was sent; set MYLM_API_KEY"):
        collect(chat(openai_server, api_key=None, api_key_source=None).stream(request()))


def test_openai_404_on_the_model_lists_the_servers_models(openai_server: OpenAIServer) -> None:
    openai_server.models = ["llama-3.2-3b", "qwen2.5-7b"]
    body = {
        "error": {
            "message": "The model `nope` does not exist.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    openai_server.script([HTTPError(404, body)])
    with pytest.raises(ModelNotFoundError) as caught:
        collect(chat(openai_server, model="nope").stream(request()))
    assert "'nope' not found" in str(caught.value)
    assert "llama-3.2-3b, qwen2.5-7b" in str(caught.value)


def test_openai_404_on_the_route_points_at_the_base_url(openai_server: OpenAIServer) -> None:
    openai_server.script([HTTPError(404, "404 page not found")])
    with pytest.raises(ModelNotFoundError, match="no such route.*--base-url / MYLM_BASE_URL"):
        collect(chat(openai_server).stream(request()))


def test_openai_context_overflow_says_so(openai_server: OpenAIServer) -> None:
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    openai_server.script([HTTPError(400, body)])
    with pytest.raises(ContextOverflowError, match="no longer fits the model's context window"):
        collect(chat(openai_server).stream(request()))
    assert len(openai_server.requests) == 1


def test_openai_error_object_inside_a_200_stream_is_an_error(openai_server: OpenAIServer) -> None:
    failure = {
        "error": {"message": "The server had an error while processing your request.", "type": "server_error"}
    }
    openai_server.script([Completion("Partial", error_after=failure)])
    chunks = []
    with pytest.raises(StreamError, match="mid-stream: The server had an error"):
        for chunk in chat(openai_server).stream(request()):
            chunks.append(chunk)
    assert "".join(c.text for c in chunks if isinstance(c, TextChunk)) == "Partial"
    assert len(openai_server.requests) == 1, "text had arrived, so the call must not be retried"


def test_openai_stream_cut_off_before_the_finish_is_an_error(openai_server: OpenAIServer) -> None:
    piece = sse({"choices": [{"index": 0, "delta": {"content": "half an ans"}}]})
    openai_server.script([Raw([piece], then="close")])
    with pytest.raises(StreamError, match="ended before the answer was complete|broke"):
        collect(chat(openai_server).stream(request()))


def test_openai_connection_dropped_after_the_finish_still_gives_the_answer(
    openai_server: OpenAIServer,
) -> None:
    events = [
        sse({"choices": [{"index": 0, "delta": {"content": "whole"}}]}),
        sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]
    openai_server.script([Raw(events, then="close")])
    text, _, finish = collect(chat(openai_server).stream(request()))
    assert text == "whole" and finish is not None and finish.reason == "stop"


def test_openai_web_page_answer_is_reported(openai_server: OpenAIServer) -> None:
    openai_server.script([Raw([b"<html><body>Open WebUI</body></html>"], content_type="text/html")])
    with pytest.raises(StreamError, match="web page"):
        collect(chat(openai_server).stream(request()))


def test_openai_redirect_is_not_followed(openai_server: OpenAIServer) -> None:
    openai_server.script([HTTPError(307, "", {"Location": "http://127.0.0.2:1/v1/chat/completions"})])
    with pytest.raises(HTTPStatusError, match="does not follow redirects") as caught:
        collect(chat(openai_server).stream(request()))
    assert caught.value.status == 307 and len(openai_server.requests) == 1


# ------------------------------------------------------------------------------------------------ retries


def test_openai_retries_429_honouring_retry_after(openai_server: OpenAIServer) -> None:
    limited = HTTPError(
        429,
        {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
        {"Retry-After": "0"},
    )
    openai_server.script([limited, limited, "ok"])
    assert collect(chat(openai_server).stream(request()))[0] == "ok"
    assert len(openai_server.requests) == 3


def test_openai_retry_after_beyond_the_cap_fails_at_once_with_the_servers_value(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script(
        [HTTPError(429, {"error": {"message": "Slow down"}}, {"Retry-After": "86400"}), "ok"]
    )
    with pytest.raises(RateLimitError, match="retry after 86400 s"):
        collect(chat(openai_server).stream(request()))
    assert len(openai_server.requests) == 1


def test_openai_retry_after_beyond_the_deadline_fails_at_once(openai_server: OpenAIServer) -> None:
    openai_server.script([HTTPError(503, {"error": {"message": "busy"}}, {"Retry-After": "20"}), "ok"])
    with pytest.raises(ServerError, match="remaining time"):
        collect(chat(openai_server).stream(request(timeout=5)))
    assert len(openai_server.requests) == 1


def test_openai_insufficient_quota_is_not_retried(openai_server: OpenAIServer) -> None:
    body = {
        "error": {
            "message": "You exceeded your current quota.",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    openai_server.script([HTTPError(429, body), "ok"])
    with pytest.raises(RateLimitError, match="quota") as caught:
        collect(chat(openai_server).stream(request()))
    assert not caught.value.retryable and len(openai_server.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 408])
def test_openai_transient_statuses_are_retried(openai_server: OpenAIServer, status: int) -> None:
    openai_server.script([HTTPError(status, {"error": {"message": "try later"}}), "ok"])
    assert collect(chat(openai_server).stream(request()))[0] == "ok"
    assert len(openai_server.requests) == 2


def test_openai_gives_up_after_three_retries(openai_server: OpenAIServer) -> None:
    openai_server.script([HTTPError(500, {"error": {"message": "down"}})] * 5)
    with pytest.raises(ServerError, match="gave up after 4 attempts"):
        collect(chat(openai_server).stream(request()))
    assert len(openai_server.requests) == 4


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_openai_client_errors_are_not_retried(openai_server: OpenAIServer, status: int) -> None:
    openai_server.script([HTTPError(status, {"error": {"message": "no"}}), "ok"])
    with pytest.raises(HTTPStatusError):
        collect(chat(openai_server).stream(request()))
    assert sum(r.method == "POST" for r in openai_server.requests) == 1


def test_openai_x_should_retry_false_is_obeyed(openai_server: OpenAIServer) -> None:
    openai_server.script(
        [HTTPError(500, {"error": {"message": "permanent"}}, {"x-should-retry": "false"}), "ok"]
    )
    with pytest.raises(ServerError):
        collect(chat(openai_server).stream(request()))
    assert len(openai_server.requests) == 1


def test_openai_connection_dropped_before_any_content_is_retried(openai_server: OpenAIServer) -> None:
    openai_server.script([Raw([], then="close"), "ok"])
    assert collect(chat(openai_server).stream(request()))[0] == "ok"
    assert len(openai_server.requests) == 2


def test_openai_unreachable_endpoint_names_the_url_and_how_to_configure_it() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = OpenAIChat(Endpoint(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY), retry=FAST_RETRY)
    with pytest.raises(EndpointUnreachableError) as caught:
        collect(llm.stream(request()))
    message = str(caught.value)
    assert f"http://127.0.0.1:{port}/v1" in message and "MYLM_BASE_URL" in message and "--base-url" in message
    assert "connection refused" in message and KEY not in message


# ------------------------------------------------------------------------------- deadlines, cancel, limits


def test_openai_deadline_ends_a_server_that_never_answers(openai_server: OpenAIServer) -> None:
    openai_server.script([Hang()])
    with pytest.raises(LLMTimeoutError, match="time limit"):
        collect(chat(openai_server).stream(request(timeout=0.3)))
    assert openai_server.disconnected.wait(30)


def test_openai_deadline_ends_a_slowloris_stream(openai_server: OpenAIServer) -> None:
    # One byte every 20 ms keeps resetting the 300 s idle timeout; only the deadline can end this.
    openai_server.script([Trickle(0.02)])
    with pytest.raises(LLMTimeoutError, match="time limit"):
        collect(chat(openai_server).stream(request(timeout=0.3)))


def test_openai_deadline_ends_a_server_trickling_its_headers(openai_server: OpenAIServer) -> None:
    # Before the headers are complete there is no response object to read from: only the guard's timer,
    # which shuts the socket at the deadline, can end this.
    openai_server.script([Trickle(0.02, in_headers=True)])
    with pytest.raises(LLMTimeoutError, match="time limit"):
        collect(chat(openai_server).stream(request(timeout=0.3)))
    assert openai_server.disconnected.wait(30)


def test_openai_idle_timeout_ends_a_silent_stream(openai_server: OpenAIServer) -> None:
    openai_server.script([Raw([sse({"choices": [{"index": 0, "delta": {"content": "a"}}]})], then="hang")])
    with pytest.raises(LLMTimeoutError, match="went silent for 0.2 s"):
        collect(chat(openai_server, read_timeout=0.2).stream(request()))


def test_openai_cancel_from_another_thread_aborts_a_blocked_read(openai_server: OpenAIServer) -> None:
    openai_server.script([Hang()])
    token = CancelToken()
    canceller = threading.Thread(target=lambda: openai_server.wait_for_requests(1) and token.cancel())
    canceller.start()
    with pytest.raises(CancelledError):
        collect(chat(openai_server).stream(request(cancel=token)))
    canceller.join()
    assert openai_server.disconnected.wait(30)


def test_openai_cancelled_token_sends_nothing(openai_server: OpenAIServer) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(CancelledError):
        collect(chat(openai_server).stream(request(cancel=token)))
    assert openai_server.requests == []


def test_openai_line_longer_than_the_limit_is_refused(openai_server: OpenAIServer) -> None:
    openai_server.script([Raw([b"data: " + b"x" * 65536] * 20, then="hang")])
    with pytest.raises(StreamError, match="line longer than 1024 KiB"):
        collect(chat(openai_server).stream(request()))


def test_openai_endless_body_is_capped(openai_server: OpenAIServer) -> None:
    piece = sse({"choices": [{"index": 0, "delta": {"content": "y" * 60000}}]})
    openai_server.delay = 0
    openai_server.script([Raw([piece] * 200)])  # about 12 MiB of text
    with pytest.raises(StreamError, match="grew past 8,388,608 characters"):
        collect(chat(openai_server).stream(request()))


def test_openai_long_answer_is_capped_by_its_text_not_its_framing(openai_server: OpenAIServer) -> None:
    # 1 MiB of answer in 9 MiB of wire: servers spend far more bytes on framing (ids, logprobs) than on text.
    text = "y" * 10_486
    piece = sse({"id": "x" * 84_000, "choices": [{"index": 0, "delta": {"content": text}}]})
    finish = sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    openai_server.delay = 0
    openai_server.script([Raw([piece] * 100 + [finish, sse("[DONE]")])])
    answer, _, finish = collect(chat(openai_server).stream(request()))
    assert answer == text * 100 and finish is not None and finish.reason == "stop"
    openai_server.script([Raw([piece] * 100 + [finish, sse("[DONE]")])])
    with pytest.raises(StreamError, match="grew past 500,000 characters"):
        collect(chat(openai_server, max_response_chars=500_000).stream(request()))


def test_openai_deeply_nested_json_event_is_one_error(openai_server: OpenAIServer) -> None:
    openai_server.script([Raw([b"data: " + b"[" * 200_000 + b"\n\n"])])
    with pytest.raises(StreamError, match="nested"):
        collect(chat(openai_server).stream(request()))


def test_openai_gzip_bomb_is_capped(openai_server: OpenAIServer) -> None:
    bomb = gzip.compress(b"data: " + b"0" * (64 * 1024 * 1024), compresslevel=9)
    openai_server.script([Raw([bomb], headers={"Content-Encoding": "gzip"})])
    with pytest.raises(StreamError, match="line longer than|more than 8 MiB"):
        collect(chat(openai_server).stream(request()))
