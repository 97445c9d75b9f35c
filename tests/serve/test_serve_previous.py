"""`previous_response_id` on `/v1/responses`: the last responses kept in memory (bounded, per server), the new
input sent after the conversation the named response ended; an unknown id is OpenAI's 400."""

from __future__ import annotations

import json

import openai
import pytest

from mylm.serve.stored import StoredResponses
from mylm.serve.wire import CallOut, ChatMessage, Finished
from tests.providers.servers import OpenAIServer
from tests.serve.support import call
from tests.serve.test_serve_responses import WEATHER, client


def generations(upstream: OpenAIServer) -> list[dict]:
    return [r.body for r in upstream.requests if upstream.is_generation(r.method, r.path)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_output_after_previous_response_id_continues_that_conversation(
    upstream: OpenAIServer, served: str, stream: bool
) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}'), "It is sunny in Paris."])
    api = client(served)
    if stream:
        first = next(e.response for e in api.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER],
                                                              stream=True) if e.type == "response.completed")
    else:
        first = api.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER])
    assert first.store is True
    function_call = next(item for item in first.output if item.type == "function_call")
    answer = api.responses.create(
        model="m", tools=[WEATHER], previous_response_id=first.id, instructions="Be brief.",
        input=[{"type": "function_call_output", "call_id": function_call.call_id, "output": "sunny"}])  # type: ignore[union-attr]
    assert answer.output_text == "It is sunny in Paris." and answer.previous_response_id == first.id
    sent = generations(upstream)[1]["messages"]
    assert "Be brief." in sent[0]["content"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert sent[1]["content"] == "Weather in Paris?"
    assert "<name>get_weather</name>" in sent[2]["content"] and json.dumps({"city": "Paris"}) in sent[2]["content"]
    assert "<observation>\nsunny\n</observation>" in sent[3]["content"]


def test_an_unknown_or_unstored_id_is_openais_400_and_nothing_goes_upstream(
    upstream: OpenAIServer, served: str
) -> None:
    upstream.script(["Hi."])
    api = client(served)
    unstored = api.responses.create(model="m", input="Hello", store=False)
    assert unstored.store is False
    for rid in ("resp_never", unstored.id):
        with pytest.raises(openai.BadRequestError) as raised:
            api.responses.create(model="m", input="and then?", previous_response_id=rid)
        assert raised.value.code == "previous_response_not_found" and raised.value.param == "previous_response_id"
        assert rid in raised.value.message
    assert len(generations(upstream)) == 1


def test_the_store_is_bounded_and_drops_the_least_recently_used() -> None:
    stored = StoredResponses(kept=2)
    ask = (ChatMessage("system", "rules"), ChatMessage("user", "hi"))
    stored.put("a", ask, [Finished("stop", None, "one")])
    stored.put("b", ask, [CallOut("call_1", "get_weather", '{"city": "Paris"}'), Finished("tool_calls", None, "")])
    assert stored.get("a") is not None  # used: "b" is now the oldest
    stored.put("c", ask, [Finished("stop", None, "three")])
    assert stored.get("b") is None and stored.get("a") is not None and stored.get("c") is not None
    kept = stored.get("a")
    assert kept is not None and [m.role for m in kept] == ["user", "assistant"] and kept[-1].content == "one"
