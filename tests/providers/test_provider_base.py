"""Endpoint settings, URL rules, error-body reading, retry policy and chat formats, without any server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mylm.core.errors import ConfigError, HTTPStatusError, RateLimitError, ServerError
from mylm.prompts import PromptLoader
from mylm.providers import PROVIDERS, Endpoint, infer_provider
from mylm.providers.base import merge_turns, model_rejects_stop, normalise_base_url, redact_url
from mylm.providers.failures import RetryPolicy, error_fields, parse_failure, retry_after_seconds
from mylm.providers.formats import CHAT_FORMATS, chat_format, render_prompt
from mylm.core.types import Message


def test_endpoint_defaults_to_a_local_ollama() -> None:
    resolved = Endpoint().resolved()
    assert (resolved.provider, resolved.base_url) == ("ollama", "http://localhost:11434")


@pytest.mark.parametrize(
    ("url", "provider"),
    [
        ("http://localhost:11434", "ollama"),
        ("http://127.0.0.1:11434/", "ollama"),
        ("http://localhost:11434/v1", "openai"),
        ("http://localhost:8080/v1", "openai"),
        ("https://api.anthropic.com", "anthropic"),
        ("https://generativelanguage.googleapis.com", "gemini"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "openai"),
        ("https://openrouter.ai/api/v1", "openai"),
    ],
)
def test_provider_is_inferred_only_where_the_url_is_unambiguous(url: str, provider: str) -> None:
    assert infer_provider(url) == provider


@pytest.mark.parametrize(
    ("provider", "url", "expected"),
    [
        ("openai", "http://127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
        ("openai", "http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1"),
        ("openai", "http://h:1/v1/chat/completions", "http://h:1/v1"),
        ("openai-completions", "http://h:1/v1/completions", "http://h:1/v1"),
        ("ollama", "http://h:11434/api/chat", "http://h:11434"),
        ("ollama", "http://h:11434/v1", "http://h:11434"),
        ("llamacpp", "http://h:8080/completion", "http://h:8080"),
        ("anthropic", "https://api.anthropic.com/v1/messages", "https://api.anthropic.com"),
    ],
)
def test_base_url_is_normalised(provider: str, url: str, expected: str) -> None:
    assert normalise_base_url(provider, url) == expected


def test_endpoint_rejects_unknown_provider_and_bad_url() -> None:
    with pytest.raises(ConfigError, match="choose one of openai, openai-completions"):
        Endpoint(provider="bard")
    with pytest.raises(ConfigError, match="MYLM_BASE_URL"):
        Endpoint(base_url="localhost:8080")


def test_endpoint_repr_never_shows_the_key() -> None:
    endpoint = Endpoint(api_key="sk-secret-value-123")
    assert "sk-secret-value-123" not in repr(endpoint) and "sk-secret-value-123" not in str(
        endpoint.resolved()
    )


def test_redact_url_drops_credentials_and_query() -> None:
    assert redact_url("https://user:pw@host:8443/v1?key=abc") == "https://host:8443/v1"


def test_merge_turns_splits_system_and_joins_same_role_runs() -> None:
    system, turns = merge_turns(
        [Message("system", "S"), Message("user", "a"), Message("user", "b"), Message("assistant", "c")]
    )
    assert system == "S"
    assert turns == [Message("user", "a\n\nb"), Message("assistant", "c")]


@pytest.mark.parametrize(
    ("model", "rejects"),
    [
        ("o3", True),
        ("o3-mini", False),
        ("o4-mini", True),
        ("openai/gpt-5", True),
        ("gpt-4o", False),
        (None, False),
    ],
)
def test_models_known_to_reject_stop(model: str | None, rejects: bool) -> None:
    assert model_rejects_stop(model) is rejects


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        (
            {"error": {"message": "m", "type": "invalid_request_error", "param": "stop", "code": None}},
            ("m", "invalid_request_error", "stop"),
        ),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            ("Overloaded", "overloaded_error", ""),
        ),
        (
            {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
            ("quota", "RESOURCE_EXHAUSTED", ""),
        ),
        ({"error": "model 'x' not found"}, ("model 'x' not found", "", "")),
        (
            {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400},
            ("bad", "BadRequestError", ""),
        ),
        (
            {"error": "Model is overloaded", "error_type": "overloaded"},
            ("Model is overloaded", "overloaded", ""),
        ),
        (
            {"error": {"code": 400, "message": "exceeds ctx", "type": "exceed_context_size_error"}},
            ("exceeds ctx", "exceed_context_size_error", ""),
        ),
    ],
)
def test_error_fields_read_every_known_shape(body: object, fields: tuple[str, str, str]) -> None:
    assert error_fields(body) == fields


def test_parse_failure_scrubs_the_key_and_reads_html() -> None:
    failure = parse_failure(
        502, b"<html><h1>Bad gateway</h1>\n<p>key sk-abcdef</p></html>", {}, secret="sk-abcdef"
    )
    assert failure.message == "Bad gateway key [REDACTED]"


def test_retry_after_reads_ms_seconds_and_dates() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after_seconds({"retry-after": "soon"}) is None


def test_backoff_grows_exponentially_with_jitter_and_respects_the_deadline() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, random=lambda: 0.5)
    error = ServerError("down", status=500)
    assert [policy.delay(error, n, 100.0) for n in range(3)] == [0.75, 1.5, 3.0]
    with pytest.raises(ServerError, match="no time left"):
        policy.delay(ServerError("down", status=500), 0, 0.1)
    with pytest.raises(HTTPStatusError):
        policy.delay(HTTPStatusError("bad", status=400), 0, 100.0)
    limited = RateLimitError("slow", status=429, retry_after=2.0)
    assert policy.delay(limited, 0, 100.0) == 2.0


EXPECTED = {
    "chatml": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
    "<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n",
    "llama3": "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|><|start_header_id|>user"
    "<|end_header_id|>\n\nmore<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "mistral": "[INST] S\n\nhi [/INST]yo</s>[INST] more [/INST]",
    "gemma": "<start_of_turn>user\nS\n\nhi<end_of_turn>\n<start_of_turn>model\nyo<end_of_turn>\n<start_of_turn>user\n"
    "more<end_of_turn>\n<start_of_turn>model\n",
    "plain": "S\n\nUser: hi\n\nAssistant: yo\n\nUser: more\n\nAssistant:",
}


@pytest.mark.parametrize("name", sorted(CHAT_FORMATS))
def test_chat_formats_render_exactly(name: str) -> None:
    messages = [
        Message("system", "S"),
        Message("user", "hi"),
        Message("assistant", "yo"),
        Message("user", "more"),
    ]
    assert render_prompt(PromptLoader.default(), chat_format(name), messages) == EXPECTED[name]


def test_user_chat_format_is_found_on_the_search_path(tmp_path: object) -> None:
    from pathlib import Path

    root = Path(str(tmp_path)) / "mine"
    (root / "chat").mkdir(parents=True)
    (root / "chat" / "vicuna.j2").write_text(
        "{% for m in messages %}{{ m.role|upper }}: {{ m.content }}\n{% endfor %}ASSISTANT:"
    )
    loader = PromptLoader.default(root)
    assert render_prompt(loader, chat_format("vicuna"), [Message("user", "hi")]) == "USER: hi\nASSISTANT:"
    with pytest.raises(ConfigError, match="invalid chat format"):
        chat_format("../system")


def test_importing_providers_does_not_import_requests() -> None:
    from pathlib import Path

    import mylm

    code = "import sys, mylm.providers; sys.exit(3 if 'requests' in sys.modules else 0)"
    root = Path(mylm.__file__).resolve().parent.parent
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0
    assert set(PROVIDERS) == {"openai", "openai-completions", "ollama", "llamacpp", "anthropic", "gemini", "local"}


def test_transport_connect_timeout_is_not_blamed_on_the_deadline() -> None:
    """A connect timeout with plenty of run left is an unreachable endpoint (retryable), not the deadline."""
    import time

    import requests

    from mylm.core.errors import EndpointUnreachableError
    from mylm.providers.failures import Place
    from mylm.providers.transport import CallGuard, HTTPCall, send

    class TimesOutConnecting:
        def request(self, *args: object, **kwargs: object) -> None:
            raise requests.exceptions.ConnectTimeout("connect timed out")

    place = Place("openai", "http://10.0.0.1/v1", "m", "MYLM_API_KEY", False)
    guard = CallGuard(time.monotonic() + 60, None, place)  # 60 s of the run left, the read timeout is 300
    try:
        with pytest.raises(EndpointUnreachableError) as caught:
            send(TimesOutConnecting(), HTTPCall("POST", "http://10.0.0.1/v1/chat/completions", {}), guard,  # type: ignore[arg-type]
                 connect_timeout=10, read_timeout=300)
    finally:
        guard.close()
    assert caught.value.retryable and "no answer within 10 s" in str(caught.value)


def test_every_registered_provider_carries_its_capabilities_on_its_class() -> None:
    """A provider is one module plus one registry line: the class answers everything else."""
    from mylm.providers import REGISTRY, provider_class

    for name in REGISTRY:
        cls = provider_class(name)
        assert cls.name == name
        # `local` runs in-process: no server, so no URL.
        assert cls.default_base_url.startswith(("http://", "https://")) or name == "local"
        resolved = Endpoint(provider=name).resolved()
        assert resolved.base_url == cls.normalise_base_url(cls.default_base_url)
        assert cls.grammar_support in ("native", "compatible", "none")
    assert provider_class("anthropic").key_vars == ("ANTHROPIC_API_KEY",)
    assert "GEMINI_API_KEY" in Endpoint(provider="gemini").key_hint
    assert (provider_class("openai").max_stops, provider_class("gemini").max_stops) == (4, 5)
    with pytest.raises(ConfigError, match="unknown provider"):
        provider_class("bard")


def test_stop_limits_come_from_the_class() -> None:
    from mylm.llm import LLMRequest
    from mylm.providers.anthropic import Anthropic
    from mylm.providers.openai import OpenAIChat

    request = LLMRequest((Message("user", "hi"),), stop=("a", " ", "b", "c", "d", "e"))
    assert OpenAIChat(Endpoint(provider="openai")).stops(request) == ["a", " ", "b", "c"]
    assert Anthropic(Endpoint(provider="anthropic", model="m")).stops(request) == ["a", "b", "c", "d", "e"]
