"""The behaviours every provider shares, run against each wire format's loopback server."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest

from mylm.core.cancel import CancelToken
from mylm.core.errors import (
    AuthenticationError,
    CancelledError,
    ConfigError,
    LLMTimeoutError,
    ModelNotFoundError,
    StreamError,
)
from mylm.llm import TextChunk
from mylm.providers import Endpoint, create_llm, list_models
from mylm.providers.engine import HTTPProvider
from mylm.core.types import Usage
from tests.providers.helpers import FAST_RETRY, TOOL_CALL, collect, read_until_call, request
from tests.providers.native_servers import AnthropicServer, GeminiServer, LlamaCppServer, OllamaServer
from tests.providers.servers import (
    FILLER,
    Completion,
    Hang,
    HTTPError,
    LoopbackServer,
    OpenAIServer,
    Raw,
    pieces,
)

KEY = "sk-CANARY-provider-key-42"


@dataclass(frozen=True)
class Case:
    """One wire format: its server, how to configure mylm for it, and its own error and stop shapes."""

    provider: str
    server: Callable[..., LoopbackServer]
    #: Where the request carries the stop strings.
    stops: Callable[[Any], Any]
    #: A realistic body of an error, for a given message and code.
    error: Callable[[str, str], Any]
    #: The key header and how its value looks.
    key_header: tuple[str, str]
    reasoning: bool = True
    #: A 400 as this server words "stop is not accepted".
    stop_rejection: Any = None
    endpoint: dict[str, Any] = field(default_factory=dict)


def _openai_error(message: str, code: str) -> Any:
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


CASES = [
    Case(
        "openai",
        OpenAIServer,
        lambda b: b["stop"],
        _openai_error,
        ("authorization", f"Bearer {KEY}"),
        stop_rejection=_openai_error("Unsupported parameter: 'stop' is not supported with this model.", "x"),
    ),
    Case(
        "openai-completions",
        OpenAIServer,
        lambda b: b["stop"],
        _openai_error,
        ("authorization", f"Bearer {KEY}"),
        reasoning=False,
        endpoint={"chat_format": "plain"},
    ),
    Case(
        "ollama",
        OllamaServer,
        lambda b: b["options"]["stop"],
        lambda m, c: {"error": m},
        ("authorization", f"Bearer {KEY}"),
    ),
    Case(
        "ollama",
        OllamaServer,
        lambda b: b["options"]["stop"],
        lambda m, c: {"error": m},
        ("authorization", f"Bearer {KEY}"),
        endpoint={"chat_format": "llama3"},
    ),
    Case(
        "llamacpp",
        LlamaCppServer,
        lambda b: b["stop"],
        lambda m, c: {"error": {"code": 500, "message": m, "type": c}},
        ("authorization", f"Bearer {KEY}"),
        reasoning=False,
    ),
    Case(
        "anthropic",
        AnthropicServer,
        lambda b: b["stop_sequences"],
        lambda m, c: {"type": "error", "error": {"type": c, "message": m}, "request_id": "req_1"},
        ("x-api-key", KEY),
        stop_rejection={
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "stop_sequences: each stop sequence must contain non-whitespace",
            },
        },
    ),
    Case(
        "gemini",
        GeminiServer,
        lambda b: b["generationConfig"]["stopSequences"],
        lambda m, c: {"error": {"code": 500, "message": m, "status": c}},
        ("x-goog-api-key", KEY),
        stop_rejection={
            "error": {
                "code": 400,
                "message": "Invalid value at 'generation_config.stop_sequences'",
                "status": "INVALID_ARGUMENT",
            }
        },
    ),
]
IDS = [c.provider + ("+" + c.endpoint["chat_format"] if "chat_format" in c.endpoint else "") for c in CASES]


@pytest.fixture(params=CASES, ids=IDS)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def server(case: Case) -> Iterator[LoopbackServer]:
    with case.server(models=["test-model", "other-model"]) as running:
        yield running


def llm(case: Case, server: LoopbackServer, **overrides: Any) -> HTTPProvider:
    settings = {
        "provider": case.provider,
        "base_url": server.base_url,
        "model": "test-model",
        "api_key": KEY,
        "api_key_source": "MYLM_API_KEY",
        **case.endpoint,
        **overrides,
    }
    provider = create_llm(Endpoint(**settings))
    assert isinstance(provider, HTTPProvider)
    provider.retry = FAST_RETRY
    return provider


def test_provider_streams_text_reasoning_finish_and_usage(case: Case, server: LoopbackServer) -> None:
    reasoning = "Weighing it." if case.reasoning else ""
    server.script([Completion("The answer is 42.", reasoning=reasoning)])
    text, thought, finish = collect(llm(case, server).stream(request()))
    assert (text, thought) == ("The answer is 42.", reasoning)
    assert finish is not None and finish.reason in ("stop", "end_turn", "eos")
    assert finish.usage is not None and finish.usage.completion_tokens == len(pieces(text))
    assert finish.usage.prompt_tokens >= 17


def test_provider_sends_the_stops_and_the_key_where_its_format_wants_them(
    case: Case, server: LoopbackServer
) -> None:
    server.script(["ok"])
    collect(llm(case, server).stream(request()))
    [sent] = [r for r in server.requests if server.is_generation(r.method, r.path)]
    assert case.stops(sent.body)[:2] == ["</tool_code>", "<observation>"]
    name, value = case.key_header
    assert sent.headers[name] == value
    assert KEY not in sent.path and KEY not in str(sent.query)


def test_provider_server_side_stop_ends_the_turn_at_the_call(case: Case, server: LoopbackServer) -> None:
    server.script([f"Checking.\n{TOOL_CALL}\n<observation>invented</observation>"])
    text, _, finish = collect(llm(case, server).stream(request()))
    assert text == "Checking.\n" + TOOL_CALL.removesuffix("</tool_code>")
    assert finish is not None


def test_provider_early_close_releases_a_server_that_ignores_stops(case: Case) -> None:
    with case.server(stop_mode="ignore") as server:
        server.script([Completion(TOOL_CALL, endless=True)])
        seen = read_until_call(llm(case, server).stream(request()))
        assert server.disconnected.wait(30), "the server never saw the client go away"
    assert len(seen) < len(TOOL_CALL) + len(FILLER)


def test_provider_error_object_mid_stream_is_a_stream_error(case: Case, server: LoopbackServer) -> None:
    server.script([Completion("Part", error_after=case.error("Overloaded", "overloaded_error"))])
    got = []
    with pytest.raises(StreamError, match="mid-stream: Overloaded"):
        for chunk in llm(case, server).stream(request()):
            got.append(chunk)
    assert "".join(c.text for c in got if isinstance(c, TextChunk)) == "Part"


def test_provider_retries_server_errors_then_succeeds(case: Case, server: LoopbackServer) -> None:
    server.script([HTTPError(503, case.error("busy", "unavailable"), {"Retry-After": "0"}), "fine"])
    assert collect(llm(case, server).stream(request()))[0] == "fine"
    assert sum(server.is_generation(r.method, r.path) for r in server.requests) == 2


def test_provider_401_names_the_variable_never_the_key(case: Case, server: LoopbackServer) -> None:
    server.script([HTTPError(401, case.error(f"invalid x-api-key {KEY}", "authentication_error"))])
    with pytest.raises(AuthenticationError) as caught:
        collect(llm(case, server).stream(request()))
    assert "MYLM_API_KEY" in str(caught.value) and KEY not in str(caught.value)


def test_provider_404_on_the_model_lists_the_servers_models(case: Case, server: LoopbackServer) -> None:
    server.script([HTTPError(404, case.error("model 'nope' not found", "not_found_error"))])
    with pytest.raises(ModelNotFoundError, match="other-model, test-model"):
        collect(llm(case, server, model="nope").stream(request()))


def test_provider_lists_models(case: Case, server: LoopbackServer) -> None:
    endpoint = Endpoint(provider=case.provider, base_url=server.base_url, api_key=KEY)
    assert list_models(endpoint) == ["other-model", "test-model"]


REJECTING = [c for c in CASES if c.stop_rejection is not None]


@pytest.mark.parametrize("case", REJECTING, ids=[c.provider for c in REJECTING])
def test_provider_stop_rejection_is_learned(case: Case, server: LoopbackServer) -> None:
    server.script([HTTPError(400, case.stop_rejection), "ok", "again"])
    provider = llm(case, server)
    assert collect(provider.stream(request()))[0] == "ok"
    assert collect(provider.stream(request()))[0] == "again"
    sent = [r.body for r in server.requests if server.is_generation(r.method, r.path)]
    assert len(sent) == 3
    with pytest.raises((KeyError, TypeError)):
        case.stops(sent[1])


def test_provider_stream_cut_short_is_an_error(case: Case, server: LoopbackServer) -> None:
    full = list(server.events(Completion("Some words here."), _fake_request(case, server)))
    # Half the events, then the connection drops: no finish, no end marker.
    server.script([Raw(full[: len(full) // 2], content_type=server.content_type, then="close")] * 4)
    with pytest.raises(StreamError):
        collect(llm(case, server).stream(request()))


def test_provider_deadline_and_cancel_end_a_silent_server(case: Case, server: LoopbackServer) -> None:
    server.script([Hang(), Hang()])
    with pytest.raises(LLMTimeoutError):
        collect(llm(case, server).stream(request(timeout=0.2)))
    token = CancelToken()
    waiter = threading.Thread(target=lambda: server.wait_for_requests(_posts(server) + 1) and token.cancel())
    waiter.start()
    with pytest.raises(CancelledError):
        collect(llm(case, server).stream(request(cancel=token)))
    waiter.join()


def _posts(server: LoopbackServer) -> int:
    return len(server.requests)


def _fake_request(case: Case, server: LoopbackServer) -> Any:
    from tests.providers.servers import RecordedRequest

    paths = {
        "openai": "/v1/chat/completions",
        "openai-completions": "/v1/completions",
        "ollama": "/api/generate" if case.endpoint else "/api/chat",
        "llamacpp": "/completion",
        "anthropic": "/v1/messages",
        "gemini": "/v1beta/models/test-model:streamGenerateContent",
    }
    return RecordedRequest("POST", paths[case.provider], {}, {}, {"model": "test-model"}, b"")


def test_provider_missing_model_is_a_config_error_listing_models() -> None:
    with OllamaServer(models=["llama3.2"]) as server:
        provider = create_llm(Endpoint(provider="ollama", base_url=server.base_url))
        with pytest.raises(
            ConfigError, match="needs a model name: set --model or MYLM_MODEL; the server has: llama3.2"
        ):
            collect(provider.stream(request()))


def test_provider_usage_sums_across_calls() -> None:
    with OllamaServer(["a", "b"]) as server:
        provider = create_llm(Endpoint(provider="ollama", base_url=server.base_url, model="m"))
        finishes = [collect(provider.stream(request()))[2] for _ in range(2)]
    total = sum((f.usage for f in finishes if f is not None and f.usage is not None), Usage())
    assert total == Usage(34, 2)
