"""What `mylm serve` does once per request or once per event so that its CPU cost stays low, checked for its
behaviour (never for its timing): worker threads reused, a step's grammar compiled once per tool set, and events
already waiting sent in one write."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mylm.prompts import PromptLoader
from mylm.serve import chat
from mylm.serve.bridge import Workers, produced
from mylm.serve.core import Core, CoreSettings
from mylm.serve.http import EventStream
from mylm.testing import ScriptedLLM
from tests.serve.support import SEARCH, WEATHER


def test_a_worker_thread_serves_request_after_request() -> None:
    workers = Workers(max_idle=2)
    seen: list[int] = []

    async def one() -> list[int]:
        return [item async for item in produced(lambda cancel: iter([threading.get_ident()]), workers=workers)]

    for _ in range(3):
        seen += asyncio.run(one())
        # The reader can finish before its worker is back in the pool: the next request waits for it here.
        assert workers.wait_idle(1, timeout=30)
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()


def test_more_requests_at_once_than_idle_workers_are_all_served() -> None:
    workers = Workers(max_idle=1)
    gate = threading.Barrier(5, timeout=30)  # every job must be running at once to pass it

    def job(cancel: Any) -> Any:
        gate.wait()
        yield threading.get_ident()

    async def all_at_once() -> list[int]:
        async def one() -> list[int]:
            return [item async for item in produced(job, workers=workers)]
        return [i for found in await asyncio.gather(*(one() for _ in range(5))) for i in found]

    assert len(set(asyncio.run(all_at_once()))) == 5
    assert len(workers._idle) <= 1


def test_a_failing_job_leaves_its_worker_serving() -> None:
    workers = Workers(max_idle=1)

    def failing(cancel: Any) -> Any:
        raise ValueError("upstream garbage")
        yield  # pragma: no cover

    async def run(produce: Any) -> list[Any]:
        return [item async for item in produced(produce, workers=workers)]

    try:
        asyncio.run(run(failing))
    except ValueError as error:
        assert "garbage" in str(error)
    else:
        raise AssertionError("the job's error was not re-raised")
    assert asyncio.run(run(lambda cancel: iter(["after"]))) == ["after"]


def _request(tools: list[dict[str, Any]], **fields: Any) -> Any:
    return chat.parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, **fields})


def test_requests_with_the_same_tools_share_one_compiled_step_but_not_its_state() -> None:
    loader = PromptLoader.default()
    core = Core(ScriptedLLM([]), loader, CoreSettings(constrain="grammar"))
    first, second = core.step(_request([WEATHER, SEARCH])), core.step(_request([WEATHER, SEARCH]))
    assert first is not second
    assert first.constraint is not None and first.constraint is second.constraint
    first.stops = ()
    first.opens_reasoning = True
    assert second.stops and second.opens_reasoning is None
    other = core.step(_request([WEATHER]))
    assert other.constraint is not first.constraint and set(other.names) == {"get_weather"}
    required = core.step(_request([WEATHER, SEARCH], tool_choice="required"))
    assert required.config.tool_choice == "required" and required.constraint is not first.constraint


def _sent(events: list[bytes], waiting: list[int]) -> list[dict[str, Any]]:
    """The ASGI messages an `EventStream` sends for `events`, while `waiting[i]` more were ready after the i-th."""
    backlog: list[int] = []
    messages: list[dict[str, Any]] = []

    async def source() -> AsyncIterator[bytes]:
        for event, more in zip(events, waiting):
            backlog[:] = [0] * more
            yield event

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never leaves
        return {}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    asyncio.run(EventStream(source(), more=backlog)({"type": "http"}, receive, send))
    return messages


def test_events_already_waiting_go_out_in_one_write_and_the_rest_at_once() -> None:
    messages = _sent([b"a", b"b", b"c", b"d"], [2, 1, 0, 0])
    bodies = [m["body"] for m in messages if m["type"] == "http.response.body"]
    assert bodies == [b"abc", b"d", b""]
    assert messages[-1]["more_body"] is False


def test_without_a_backlog_every_event_is_written_as_it_comes() -> None:
    bodies = [m["body"] for m in _sent([b"a", b"b"], [0, 0]) if m["type"] == "http.response.body"]
    assert bodies == [b"a", b"b", b""]



def test_the_generation_routes_answer_alike_with_and_without_starlettes_router(upstream: Any, served: str) -> None:
    """The generation POSTs skip Starlette's router (`app._Routed`); every other request still takes it, and the
    answers are the ones the routes always gave."""
    import requests

    upstream.script(["Hello there."])
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
    answered = requests.post(served + "/v1/chat/completions", json=body, timeout=30)
    assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["content"] == "Hello there."
    bad = requests.post(served + "/v1/chat/completions", data=b"{not json", timeout=30,
                        headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "error" in bad.json()
    for method, path in (("GET", "/v1/chat/completions"), ("POST", "/v1/chat/completions/"), ("PUT", "/api/chat")):
        other = requests.request(method, served + path, json=body, timeout=30)
        # In the API's own shape: OpenAI's error object, Ollama's string.
        assert other.status_code == 404 and f"no route {method} {path}" in other.text, (method, path)
    messages = requests.post(served + "/v1/messages", json={**body, "max_tokens": 10}, timeout=30,
                             headers={"anthropic-version": "2023-06-01"})
    assert messages.status_code == 200 or messages.json()["type"] == "error"


def test_a_base_url_with_a_v1_too_many_or_too_few_is_told_the_route_it_meant(upstream: Any, served: str) -> None:
    """The usual set-up mistake, seen through the official SDKs: Anthropic's base URL given with `/v1` (the SDK adds
    its own: `POST /v1/v1/messages`), OpenAI's without it (`POST /chat/completions`). The 404 says which route
    this server answers, in each API's error shape."""
    import anthropic
    import openai
    import pytest

    upstream.script(["unused"])
    with anthropic.Anthropic(base_url=served + "/v1", api_key="unused", max_retries=0) as claude, \
            pytest.raises(anthropic.NotFoundError) as missed:
        claude.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert "no route POST /v1/v1/messages; this server answers POST /v1/messages" in str(missed.value)
    assert missed.value.body["type"] == "error"  # type: ignore[index]  # Anthropic's own error shape
    with openai.OpenAI(base_url=served, api_key="unused", max_retries=0) as gpt, \
            pytest.raises(openai.NotFoundError) as missed_too:
        gpt.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "this server answers POST /v1/chat/completions (check the client's base URL)" in str(missed_too.value)
    assert upstream.requests == []  # nothing reached the model


def test_the_route_a_misplaced_path_meant() -> None:
    from mylm.serve.app import meant_route

    posts = ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/api/chat")
    assert meant_route("/v1/v1/responses", posts) == "/v1/responses"
    assert meant_route("/openai/v1/chat/completions", posts) == "/v1/chat/completions"
    assert meant_route("/v1/v1/messages/count_tokens", posts) == "/v1/messages/count_tokens"
    assert meant_route("/responses", posts) == "/v1/responses"
    assert meant_route("/v1/chat/completions/", posts) == "/v1/chat/completions"
    assert meant_route("/models", ("/v1/models", "/api/tags")) == "/v1/models"
    for nothing in ("/v1/completions", "/", "/v1/responses/abc", "/admin"):
        assert meant_route(nothing, posts) is None, nothing
    assert meant_route("/v1/v1/responses", ()) is None


def test_the_404_names_only_a_route_the_server_answers_for_that_method(upstream: Any, served: str) -> None:
    import requests

    wrong = requests.get(served + "/v1/v1/models", timeout=30)
    assert wrong.status_code == 404 and "this server answers GET /v1/models" in wrong.text
    # /v1/responses takes POST only: a GET to a doubled path gets no hint that would fail again.
    other = requests.get(served + "/v1/v1/responses", timeout=30)
    assert other.status_code == 404 and "this server answers" not in other.text


def test_chat_chunks_made_from_a_template_are_the_bytes_encoding_each_chunk_gives() -> None:
    import json

    from mylm.serve.wire import CallOut, Finished, ReasoningOut, TextOut

    request = chat.parse({"model": "módel \"x\"", "messages": [{"role": "user", "content": "hi"}], "stream": True})

    async def items() -> AsyncIterator[Any]:
        for item in (TextOut("héllo \"q\" \n"), ReasoningOut("thinks…"), CallOut("call_1", "f", '{"a": "ü"}'),
                     Finished("tool_calls")):
            yield item

    async def collect() -> list[bytes]:
        return [event async for event in chat.events(request, items(), {})]

    events = asyncio.run(collect())
    assert events[-1] == b"data: [DONE]\n\n"
    for event in events[:-1]:
        document = json.loads(event.removeprefix(b"data: ").removesuffix(b"\n\n"))
        # Exactly what encoding the whole chunk gives (compact, non-ASCII kept, the keys in the API's order).
        assert event == b"data: " + json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
        assert list(document) == ["id", "object", "created", "model", "choices"]
        assert list(document["choices"][0]) == ["index", "delta", "logprobs", "finish_reason"]
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "tool_calls"


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(), min_size=1, max_size=4), model=st.text(min_size=1, max_size=10))
def test_content_chunks_written_directly_are_the_bytes_encoding_each_chunk_gives(texts: list[str], model: str) -> None:
    """`chat.events` writes a content chunk without building it (`content`): for any text, the bytes must be those
    of encoding the whole chunk, and `http.dumps` those of `json.dumps` with its arguments."""
    import json

    from mylm.serve.http import dumps
    from mylm.serve.wire import TextOut

    request = chat.parse({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True})

    async def items() -> AsyncIterator[Any]:
        for text in texts:
            yield TextOut(text)

    async def collect() -> list[bytes]:
        return [event async for event in chat.events(request, items(), {})]

    events = asyncio.run(collect())
    head = json.loads(events[0][6:])
    for text, event in zip(texts, events[1:]):
        document = {**{k: head[k] for k in ("id", "object", "created", "model")},
                    "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}]}
        whole = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
        assert event == b"data: " + whole + b"\n\n"
        assert dumps(document) == whole


@settings(max_examples=300, deadline=None)
@given(said=st.lists(st.tuples(st.booleans(), st.text()), max_size=4),
       reason=st.sampled_from(["stop", "length", "tool_calls"]), model=st.text(min_size=1, max_size=10))
def test_every_chunk_made_from_kept_bytes_is_the_bytes_encoding_it_gives(said: list[tuple[bool, str]], reason: str,
                                                                        model: str) -> None:
    """The role chunk, reasoning chunks and the finishing chunk are written from bytes made once (`chat.events`):
    for any text and reason, the bytes of encoding each whole chunk, in its order."""
    import json

    from mylm.serve.wire import Finished, ReasoningOut, TextOut

    request = chat.parse({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True})

    async def items() -> AsyncIterator[Any]:
        for reasoning, text in said:
            yield ReasoningOut(text) if reasoning else TextOut(text)
        yield Finished(reason)  # type: ignore[arg-type]

    async def collect() -> list[bytes]:
        return [event async for event in chat.events(request, items(), {})]

    events = asyncio.run(collect())
    head = {k: v for k, v in json.loads(events[0][6:]).items() if k != "choices"}
    deltas = [{"role": "assistant", "content": ""},
              *({"reasoning_content" if reasoning else "content": text} for reasoning, text in said), {}]
    finishes = [None] * (len(deltas) - 1) + [reason]
    assert len(events) == len(deltas) + 1 and events[-1] == b"data: [DONE]\n\n"
    for event, delta, finish in zip(events, deltas, finishes):
        document = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        assert event == b"data: " + json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def test_the_events_after_the_reply_ends_go_out_in_the_write_that_ends_the_stream() -> None:
    """Once the worker's reply has ended, what is left of the answer is made without waiting: it is not written
    on its own before the empty write that ends the chunked body (one write fewer per request)."""
    from mylm.serve.bridge import Backlog

    backlog = Backlog()

    async def source() -> AsyncIterator[bytes]:
        async for item in produced(lambda cancel: iter([b"a", b"b"]), backlog=backlog):
            yield item
        yield b"[DONE]"  # made after the end, as an API's closing event is

    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    asyncio.run(EventStream(source(), more=backlog)({"type": "http"}, receive, send))
    bodies = [(m["body"], m["more_body"]) for m in messages if m["type"] == "http.response.body"]
    assert b"".join(body for body, _ in bodies) == b"ab[DONE]"
    assert bodies[-1][0].endswith(b"[DONE]") and bodies[-1][1] is False
    assert all(body for body, _ in bodies), "an empty write ended the stream"


def test_a_client_leaving_mid_stream_ends_it_in_its_own_task_without_leaving_the_task_cancelled() -> None:
    """The events are written in the request's task (no task of their own): the client leaving cancels that task
    while it writes, the stream ends as a disconnect ends it (its events closed), and the task goes on uncancelled;
    a cancel from elsewhere (the server shutting down) still propagates."""
    closed: list[str] = []

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"x"
                await asyncio.sleep(0.001)
        finally:
            closed.append("events")

    async def send(message: dict[str, Any]) -> None:
        pass

    async def client_leaves() -> tuple[bool, int]:
        leave = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await leave.wait()
            return {"type": "http.disconnect"}

        asyncio.get_running_loop().call_later(0.05, leave.set)
        await EventStream(endless(), closed=lambda: closed.append("closed"))({"type": "http"}, receive, send)
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)  # a cancel left pending would be raised here
        return True, task.cancelling() if hasattr(task, "cancelling") else 0

    assert asyncio.run(client_leaves()) == (True, 0)
    assert closed == ["events", "closed"]

    async def cancelled_from_outside() -> None:
        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()
            return {}

        stream = asyncio.ensure_future(EventStream(endless())({"type": "http"}, receive, send))
        await asyncio.sleep(0.02)
        stream.cancel()
        try:
            await stream
        except asyncio.CancelledError:
            return
        raise AssertionError("a cancel from outside was swallowed")

    closed.clear()
    asyncio.run(cancelled_from_outside())
    assert closed == ["events"]


def test_first_done_returns_on_either_future_or_the_timeout_and_leaves_no_callback() -> None:
    from mylm.serve.http import first_done

    async def check() -> None:
        loop = asyncio.get_running_loop()
        one, other = loop.create_future(), loop.create_future()
        loop.call_later(0.01, other.set_result, 1)
        await first_done(one, other, 30)
        assert other.done() and not one.done()
        late = loop.create_future()
        started = loop.time()
        await first_done(one, late, 0.02)
        assert loop.time() - started >= 0.01 and not one.done() and not late.done()
        # Neither future keeps a callback of the waits (a future that outlives many waits must not gather them).
        assert not one._callbacks and not late._callbacks  # type: ignore[attr-defined]

    asyncio.run(check())


def test_a_requests_sampling_and_stops_reach_its_step_and_no_other() -> None:
    """The step's prototype is kept per tools and config without sampling: a request's sampling and stop strings
    are its own copy's; a request asking for none shares the prototype's (frozen) config."""
    loader = PromptLoader.default()
    core = Core(ScriptedLLM([]), loader, CoreSettings(constrain="grammar"))
    plain = core.step(_request([WEATHER]))
    warm = core.step(_request([WEATHER], temperature=0.3, top_k=5, stop=["END"]))
    again = core.step(_request([WEATHER]))
    assert warm.constraint is plain.constraint
    assert warm.config.sampling.temperature == 0.3 and warm.config.sampling.top_k == 5 and "END" in warm.stops
    assert plain.config.sampling == again.config.sampling and plain.config.sampling.temperature is None
    assert "END" not in plain.stops and "END" not in again.stops
    assert warm.config.max_tokens == plain.config.max_tokens == core.settings.max_tokens
    capped = core.step(_request([WEATHER], max_tokens=7))
    assert capped.config.max_tokens == 7 and capped.constraint is not None


@settings(max_examples=500, deadline=None)
@given(value=st.one_of(st.text(), st.text(alphabet="abcXYZ019_-.:/ é\u00b2\u0660\ud800", max_size=140)))
def test_fast_checks_of_names_and_text_accept_and_clean_what_the_general_ones_do(value: str) -> None:
    """`wire.text` skips the surrogate cleaning for ASCII text and `wire.tool_name` checks a name with one regex:
    for any string, the same value or the same refusal as cleaning everything and checking each character."""
    from mylm.core.decoding import clean_text
    from mylm.core.errors import RequestError
    from mylm.serve.wire import MAX_NAME, text, tool_name

    assert text(value, "p") == clean_text(value)[0]
    cleaned = clean_text(value)[0]
    expected = bool(cleaned) and len(cleaned) <= MAX_NAME and cleaned.isascii() and all(
        c.isalnum() or c in "_-.:" for c in cleaned)
    try:
        assert tool_name(value, "p") == cleaned and expected
    except RequestError:
        assert not expected


@settings(max_examples=200, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["temperature", "top_p", "top_k", "seed", "min_p", "presence_penalty",
                                               "frequency_penalty", "repeat_penalty", "repetition_penalty",
                                               "model", "stream"]),
                              st.one_of(st.none(), st.floats(0, 1), st.integers(0, 5)), max_size=4))
@example(fields={"repetition_penalty": 0.0, "repeat_penalty": None})
def test_a_request_without_sampling_fields_gets_the_same_sampling_as_one_read_field_by_field(
        fields: dict[str, Any]) -> None:
    from mylm.core.errors import RequestError
    from mylm.llm import Sampling

    try:
        found = chat.sampling(fields)
    except RequestError:  # a value out of its range: refused by the field-by-field reading
        assert set(fields) - {"model", "stream"}
        return
    if not set(fields) - {"model", "stream"}:
        assert found == Sampling()
    else:  # read field by field: a field set to null reads as not set
        expected: dict[str, Any] = {k: None if v is None else float(v) if k not in ("top_k", "seed") else v
                                    for k, v in fields.items()
                                    if k not in ("model", "stream", "repeat_penalty", "repetition_penalty")}
        # vLLM's spelling is read where llama.cpp's is missing or null (found by hypothesis: both, one null).
        repeat = fields.get("repeat_penalty")
        repeat = fields.get("repetition_penalty") if repeat is None else repeat
        if repeat is not None:
            expected["repeat_penalty"] = float(repeat)
        assert found == Sampling(**expected)
