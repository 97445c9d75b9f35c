"""The chat provider keeps the last call's messages with their JSON and encodes only the new ones: every body
must still be the very bytes `json.dumps` makes of the whole request, whatever the conversation did since."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mylm.core.types import Message
from mylm.llm import LLMRequest
from mylm.providers import Endpoint
from mylm.providers.engine import RawJSON, compact_json
from mylm.providers.openai import OpenAIChat


def provider() -> OpenAIChat:
    return OpenAIChat(Endpoint(provider="openai", base_url="http://127.0.0.1:9/v1", model="m"))


def expected(chat: OpenAIChat, request: LLMRequest) -> bytes:
    """The body as it was built before any message was kept: every message's dict, encoded whole."""
    body: dict[str, Any] = {"model": "m", "messages": [m.to_dict() for m in request.messages], "stream": True,
                            "stream_options": {"include_usage": True}, "max_tokens": chat.max_tokens(request)}
    stops = chat.stops(request)
    if stops:
        body["stop"] = stops
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
MESSAGE = st.builds(Message, st.sampled_from(["system", "user", "assistant"]), TEXT)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grow", "replace", "shrink", "same", "equal copy"]),
                          st.lists(MESSAGE, max_size=3)), max_size=8), st.lists(TEXT, max_size=3))
def test_every_body_is_the_whole_requests_json(steps: list[tuple[str, list[Message]]], stops: list[str]) -> None:
    chat = provider()
    messages: tuple[Message, ...] = (Message("system", "You are a test. é ✓"),)
    for how, more in steps:
        if how == "grow":
            messages = messages + tuple(more)
        elif how == "replace":  # a compacted or rewritten history: the kept prefix is gone
            messages = tuple(more) or (Message("system", "new"),)
        elif how == "shrink":
            messages = messages[: len(messages) // 2]
        elif how == "equal copy":  # equal messages that are other objects
            messages = tuple(Message(m.role, "".join(m.content)) for m in messages)
        request = LLMRequest(messages=messages, stop=tuple(stops), max_tokens=64)
        assert chat.build_call(request).body == expected(chat, request)


def test_a_list_changed_after_the_call_is_not_read_as_kept() -> None:
    chat = provider()
    history = [Message("system", "s"), Message("user", "one")]
    chat.build_call(LLMRequest(messages=history, max_tokens=8))  # type: ignore[arg-type]
    history[1] = Message("user", "two")
    request = LLMRequest(messages=tuple(history), max_tokens=8)
    assert json.loads(chat.build_call(request).body)["messages"][1]["content"] == "two"
    assert chat.build_call(request).body == expected(chat, request)


@settings(deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(), TEXT, st.lists(st.integers())),
                       max_size=5), st.integers(min_value=0, max_value=5))
def test_raw_json_is_spliced_where_its_key_is(body: dict[str, Any], where: int) -> None:
    items = list(body.items())
    raw = [{"role": "user", "content": "x"}]
    items.insert(min(where, len(items)), ("\u00e9raw", raw))
    whole = dict(items)
    spliced = {k: (RawJSON(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) if k == "\u00e9raw" else v)
               for k, v in whole.items()}
    assert compact_json(spliced) == json.dumps(whole, ensure_ascii=False, separators=(",", ":"))
