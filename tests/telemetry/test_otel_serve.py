"""`mylm serve --otel`: each request a server span continuing the client's trace, each upstream call a span of
its own, corrections as events; exported over real OTLP/HTTP to a loopback receiver that decodes the protobuf,
with the official openai SDK as the client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import WEATHER, call
from tests.telemetry.otlp_receiver import OTLPReceiver, Span
from tests.telemetry.test_otel_export import (
    API_KEY,
    CALLER_SPAN,
    CALLER_TRACE,
    PROMPT_WORD,
    TRACEPARENT,
    _missing,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=f"{_missing()} is not installed: pip install 'mylm[otel,test]'"),
]

CLIENT_KEY = "client-canary-5Jx8Lq2Zr7"
SERVER, CLIENT = 2, 3
CHAT = "POST /v1/chat/completions"


def _env(**extra: str) -> dict[str, str]:
    from tests.support import REPO_ROOT

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(name, None)
    env.update(MYLM_API_KEY=API_KEY, MYLM_SERVE_KEY=CLIENT_KEY, **extra)
    return env


def _serve(env: dict[str, str], *args: str, python: tuple[str, ...] = (),
           head: list[str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """`mylm serve ARGS` on a free port, and its /v1 URL (from the line it prints when it listens); the stderr
    lines before that one go into `head`."""
    process = subprocess.Popen([sys.executable, *python, "-m", "mylm", "serve", "--port", "0", *args], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    seen = head if head is not None else []
    for line in process.stderr:
        seen.append(line)
        found = re.search(r"mylm serve: .* on (http://\S+/v1)", line)
        if found:
            return process, found.group(1)
    process.kill()
    raise AssertionError("mylm serve did not start: " + "".join(seen[-20:]))


def _stop(process: subprocess.Popen[str]) -> str:
    """Ctrl-C (the exporter flushes on the way out); the rest of its stderr."""
    process.send_signal(signal.SIGINT)
    try:
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, rest
    return rest


@pytest.fixture
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(delay=0.002) as server:
        yield server


def _children(spans: list[Span], parent: Span) -> list[Span]:
    return sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: s.start)


@pytest.mark.parametrize("capture", [False, True], ids=["shape-only", "content"])
def test_each_request_is_a_server_span_with_a_span_per_upstream_call_and_no_secret(
    capture: bool, isolated_user_state: Path, upstream: OpenAIServer
) -> None:
    if capture:
        config = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("otel_capture_content = true\n")
    with OTLPReceiver() as receiver:
        process, url = _serve(_env(), "--base-url", upstream.base_url, "-m", "test-model", "--constrain", "off",
                              "--otel", receiver.url)
        try:
            api = openai.OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0, timeout=60,
                                default_headers={"traceparent": TRACEPARENT})
            # Arguments that break the schema, then a good call: one correction, two upstream calls.
            upstream.script([Completion(call("get_weather", '{"days": 0}')),
                             Completion(call("get_weather", '{"city": "Paris"}'), prompt_tokens=40)])
            stream = api.chat.completions.create(
                model="client-name", tools=[WEATHER], stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": f"weather in Paris? {PROMPT_WORD} {API_KEY}"}])
            chunks = list(stream)
            assert any(c.choices and c.choices[0].finish_reason == "tool_calls" for c in chunks)
            upstream.script(["Plain words."])
            plain = openai.OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0, timeout=60)
            reply = plain.chat.completions.create(model="client-name",
                                                  messages=[{"role": "user", "content": "say something"}])
            assert reply.choices[0].message.content == "Plain words."
            with pytest.raises(openai.BadRequestError):
                plain.chat.completions.create(model="client-name", messages=[])
        finally:
            _stop(process)
        spans = list(receiver.spans)
    servers = sorted((s for s in spans if s.name == CHAT), key=lambda s: s.start)
    assert [s.kind for s in servers] == [SERVER] * 3
    tooled, answered, refused = servers

    # The first request continues the client's trace; its two upstream calls are client spans under it.
    assert tooled.trace_id == CALLER_TRACE and tooled.parent_id == CALLER_SPAN
    assert tooled.attributes["http.route"] == "/v1/chat/completions"
    assert tooled.attributes["http.request.method"] == "POST"
    assert tooled.attributes["http.response.status_code"] == 200
    assert tooled.attributes["mylm.serve.api"] == "chat" and tooled.attributes["mylm.serve.stream"] is True
    assert tooled.attributes["mylm.serve.client_model"] == "client-name"
    assert tooled.attributes["mylm.model_calls"] == 2 and tooled.attributes["mylm.corrections"] == 1
    assert tooled.status != 2 and "error.type" not in tooled.attributes
    (correction,) = [attrs for name, attrs in tooled.events if name == "mylm.correction"]
    assert correction["mylm.correction.kind"] == "call"
    first, second = _children(spans, tooled)
    for chat, attempt in ((first, 1), (second, 2)):
        assert chat.name == "chat test-model" and chat.kind == CLIENT and chat.trace_id == CALLER_TRACE
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.system"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "test-model"
        assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
        assert chat.attributes["mylm.attempt"] == attempt
        assert 0 <= chat.attributes["gen_ai.response.time_to_first_chunk"] <= (chat.end - chat.start) / 1e9
        assert tooled.start <= chat.start <= chat.end <= tooled.end
    assert first.attributes["gen_ai.usage.input_tokens"] == 17
    assert second.attributes["gen_ai.usage.input_tokens"] == 40 and "gen_ai.usage.output_tokens" in second.attributes
    assert first.end <= second.start

    # A request without tools (proxied as plain chat) is one call; no traceparent: a trace of its own.
    assert answered.parent_id == "" and answered.trace_id != CALLER_TRACE
    assert answered.attributes["mylm.serve.stream"] is False and answered.attributes["mylm.model_calls"] == 1
    (only,) = _children(spans, answered)
    assert only.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert only.attributes["gen_ai.usage.input_tokens"] == 17

    # A malformed request: its status and error type, and no upstream call.
    assert refused.attributes["http.response.status_code"] == 400
    assert refused.attributes["error.type"] == "invalid_request_error"
    assert _children(spans, refused) == []

    exported = b"".join(receiver.bodies)
    assert API_KEY.encode() not in exported and CLIENT_KEY.encode() not in exported
    if capture:
        assert PROMPT_WORD.encode() in exported
        assert PROMPT_WORD in tooled.attributes["gen_ai.input.messages"]
        (answer,) = json.loads(tooled.attributes["gen_ai.output.messages"])
        assert answer["finish_reason"] == "tool_calls"
        assert json.loads(answer["tool_calls"][0]["arguments"]) == {"city": "Paris"}
        assert json.loads(only.attributes["gen_ai.output.messages"])[0]["content"] == "Plain words."
        assert "mylm.correction.message" in correction
    else:
        assert PROMPT_WORD.encode() not in exported and b"Paris" not in exported
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "mylm.correction.message"))
                       for s in spans for k in [*s.attributes, *(k for _, a in s.events for k in a)])


def test_a_stream_the_upstream_breaks_is_an_error_span_after_its_200(
    isolated_user_state: Path, upstream: OpenAIServer
) -> None:
    with OTLPReceiver() as receiver:
        process, url = _serve(_env(), "--base-url", upstream.base_url, "-m", "test-model", "--otel", receiver.url)
        try:
            upstream.script([Completion("Half an answer", error_after={"error": {"message": "engine crashed"}})])
            api = openai.OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0, timeout=60)
            with pytest.raises(openai.APIError):
                list(api.chat.completions.create(model="m", stream=True,
                                                 messages=[{"role": "user", "content": "go"}]))
        finally:
            _stop(process)
        spans = list(receiver.spans)
    (request,) = [s for s in spans if s.name == CHAT]
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["error.type"] == "upstream_error" and request.status == 2


def test_without_an_endpoint_serve_imports_nothing_of_opentelemetry(
    isolated_user_state: Path, upstream: OpenAIServer
) -> None:
    def imported(env: dict[str, str]) -> set[str]:
        # -X importtime lists every module the process imports, on stderr.
        head: list[str] = []
        process, url = _serve(env, "--base-url", upstream.base_url, "-m", "m", python=("-X", "importtime"),
                              head=head)
        try:
            upstream.script([call("get_weather", '{"city": "Oslo"}')])
            api = openai.OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0, timeout=60)
            reply = api.chat.completions.create(model="m", tools=[WEATHER],
                                                messages=[{"role": "user", "content": "weather?"}])
            assert reply.choices[0].message.tool_calls
        finally:
            rest = _stop(process)
        return set(re.findall(r"\|\s+(opentelemetry[\w.]*)\s*$", "".join(head) + rest, re.MULTILINE))

    assert imported(_env()) == set()
    # The same with an endpoint does import it: the check above can fail.
    with OTLPReceiver() as receiver:
        assert "opentelemetry.sdk.trace" in imported(_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url))


def test_the_messages_api_and_native_tool_corrections_are_traced_alike(
    isolated_user_state: Path, upstream: OpenAIServer
) -> None:
    import anthropic

    weather = {"name": "get_weather", "description": WEATHER["function"]["description"],  # type: ignore[index]
               "input_schema": WEATHER["function"]["parameters"]}  # type: ignore[index]
    with OTLPReceiver() as receiver:
        process, url = _serve(_env(), "--base-url", upstream.base_url, "-m", "test-model", "--provider", "openai",
                              "--tools", "native", "--otel", receiver.url)
        try:
            # Native calls: arguments that break the schema, corrected upstream in the native format, then good.
            upstream.script([
                Completion("", tool_calls=[{"id": "call_bad", "name": "get_weather", "arguments": '{"days": 0}'}]),
                Completion("", tool_calls=[{"id": "call_ok", "name": "get_weather", "arguments": '{"city": "Oslo"}'}]),
            ])
            api = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key=CLIENT_KEY, max_retries=0, timeout=60,
                                      default_headers={"traceparent": TRACEPARENT})
            with api.messages.stream(model="claude-x", max_tokens=256, tools=[weather],  # type: ignore[list-item]
                                     messages=[{"role": "user", "content": "weather in Oslo?"}]) as stream:
                message = stream.get_final_message()
            assert message.stop_reason == "tool_use"
        finally:
            _stop(process)
        spans = list(receiver.spans)
    (request,) = [s for s in spans if s.name == "POST /v1/messages"]
    assert request.kind == SERVER and request.trace_id == CALLER_TRACE and request.parent_id == CALLER_SPAN
    assert request.attributes["mylm.serve.api"] == "messages" and request.attributes["mylm.serve.stream"] is True
    assert request.attributes["http.route"] == "/v1/messages" and request.attributes["http.response.status_code"] == 200
    assert request.attributes["mylm.corrections"] == 1
    assert [a["mylm.correction.kind"] for n, a in request.events if n == "mylm.correction"] == ["call"]
    calls = _children(spans, request)
    assert [c.attributes["mylm.attempt"] for c in calls] == [1, 2]
    assert all(c.kind == CLIENT and c.attributes["gen_ai.request.model"] == "test-model" for c in calls)


def test_a_client_leaving_mid_stream_ends_its_span_as_cancelled_not_failed(
    isolated_user_state: Path, upstream: OpenAIServer
) -> None:
    with OTLPReceiver() as receiver:
        process, url = _serve(_env(), "--base-url", upstream.base_url, "-m", "test-model", "--otel", receiver.url)
        try:
            upstream.script([Completion("Words ", endless=True)])  # generates until its client goes away
            api = openai.OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0, timeout=60)
            stream = api.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "go"}])
            assert next(iter(stream)).choices
            stream.close()
            spans = receiver.wait_for(CHAT)  # a bound, not a delay: the batch exporter sends it within seconds
        finally:
            _stop(process)
    (request,) = [s for s in spans if s.name == CHAT]
    assert request.attributes["error.type"] == "cancelled" and request.status != 2
    assert request.attributes["http.response.status_code"] == 200
