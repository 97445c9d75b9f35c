"""Anthropic's threads (`thread` on `/v1/messages`, server-held conversation state): the Anthropic SDK's tool
runner creates one and then sends only each new turn's messages; `mylm serve` keeps the thread (its system prompt,
tools and messages, the reply included) under the reply's id, and an id it does not hold is `thread_not_found`, on
which the SDK sends the whole conversation again."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import beta_tool

from mylm.serve.stored import SharedResponses, StoredResponses
from mylm.serve.wire import CallOut, ChatMessage, Finished, TextOut
from mylm.agent.step import ToolDefinition
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving


def generations(upstream: OpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if upstream.is_generation(r.method, r.path)]


def _runner_answer(url: str, stream: bool, notes: Path) -> tuple[str, list[str]]:
    """The Anthropic SDK's tool runner (its default: a thread) on a read task; its answer and the tool's calls."""
    calls: list[str] = []

    @beta_tool
    def read_file(path: str) -> str:
        """Read a file of the project and return its text.

        Args:
            path: The file's path in the project.
        """
        calls.append(path)
        return (notes.parent / path).read_text()

    api = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    runner = api.beta.messages.tool_runner(
        model="local", max_tokens=512, tools=[read_file], stream=stream, system="Answer briefly.",
        messages=[{"role": "user", "content": "What is the code name in notes.txt?"}])
    last: Any = None
    for item in runner:
        if stream:
            for _ in item:
                pass
            last = item.get_final_message()
        else:
            last = item
    return "".join(b.text for b in last.content if b.type == "text"), calls


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdks_tool_runner_continues_its_thread_with_only_the_new_turn(
    upstream: OpenAIServer, served: str, stream: bool, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("The code name is HERON.\n")
    upstream.script([call("read_file", '{"path": "notes.txt"}', "I will read it."), "The code name is HERON."])
    answer, calls = _runner_answer(served, stream, tmp_path / "notes.txt")
    assert (answer, calls) == ("The code name is HERON.", ["notes.txt"])
    # The second request held only the tool's result; the model was sent the whole conversation, system prompt and
    # tools included, as the thread holds it.
    sent = generations(upstream)[1]["messages"]
    assert "Answer briefly." in sent[0]["content"] and "<name>read_file</name>" in sent[0]["content"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert sent[1]["content"] == "What is the code name in notes.txt?"
    assert "<name>read_file</name>" in sent[2]["content"] and "HERON" in sent[3]["content"]


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url + "/v1/messages", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "x-api-key": "unused"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_a_thread_this_server_does_not_hold_is_thread_not_found_and_nothing_goes_upstream(
    upstream: OpenAIServer, served: str
) -> None:
    status, body = _post(served, {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}],
                                  "thread": {"type": "continue", "previous_message_id": "msg_never"}})
    assert status == 404 and body["error"]["type"] == "not_found_error"
    assert body["error"]["details"] == {"error_code": "thread_not_found"} and "msg_never" in body["error"]["message"]
    # A continue takes the system prompt and tools from the thread: repeating them is refused, by the error code
    # on which the SDK goes on without a thread.
    upstream.script(["Hello."])
    status, first = _post(served, {"model": "m", "max_tokens": 64, "thread": {"type": "create"},
                                   "messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and first["id"].startswith("msg_")
    status, body = _post(served, {"model": "m", "max_tokens": 64, "system": "Be brief.",
                                  "messages": [{"role": "user", "content": "And?"}],
                                  "thread": {"type": "continue", "previous_message_id": first["id"]}})
    assert status == 400 and body["error"]["details"] == {"error_code": "thread_unsupported_request"}
    status, body = _post(served, {"model": "m", "max_tokens": 64, "messages": [],
                                  "thread": {"type": "open"}})
    assert status == 400 and "thread.type" in body["error"]["message"]
    assert len(generations(upstream)) == 1


def test_the_sdk_sends_the_whole_conversation_again_to_a_server_that_lost_its_thread(
    upstream: OpenAIServer, tmp_path: Path
) -> None:
    """A server that keeps no thread (here: none at all; in life, one restarted or past its last few) answers every
    continue `thread_not_found`; the SDK replays the whole conversation, and, lost again, goes on without a thread."""
    (tmp_path / "notes.txt").write_text("The code name is HERON.\n")
    upstream.script([call("read_file", '{"path": "notes.txt"}', "I will read it."), "The code name is HERON."])
    with serving(upstream.base_url, stored=StoredResponses(kept=0)) as url:
        answer, calls = _runner_answer(url, False, tmp_path / "notes.txt")
    assert (answer, calls) == ("The code name is HERON.", ["notes.txt"])
    assert "HERON" in generations(upstream)[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("store", ["memory", "shared"])
def test_a_thread_is_kept_with_its_system_prompt_and_tools(store: str, tmp_path: Path) -> None:
    kept = StoredResponses(kept=2) if store == "memory" else SharedResponses(tmp_path / "kept.db", kept=2)
    asked = (ChatMessage("system", "rules"), ChatMessage("user", "hi"))
    tool = ToolDefinition("get_weather", "The weather.", {"type": "object", "properties": {"city": {"type": "string"}}})
    kept.keep_thread("msg_a", asked, [TextOut("Let me see."), CallOut("toolu_1", "get_weather", '{"city": "Paris"}'),
                                      Finished("tool_calls", None, "")], [tool])
    thread = kept.thread("msg_a")
    assert thread is not None and thread.tools == (tool,)
    assert [m.role for m in thread.messages] == ["system", "user", "assistant"]
    assert thread.messages[0].content == "rules" and thread.messages[-1].calls[0].id == "toolu_1"
    assert thread.messages[-1].calls[0].arguments == {"city": "Paris"}
    assert kept.get("msg_a") is None  # a thread is not a Responses answer
    kept.keep_thread("msg_b", asked, [Finished("stop", None, "")], [])
    assert kept.thread("msg_a") is not None  # used: msg_b is now the oldest
    kept.keep_thread("msg_c", asked, [Finished("stop", None, "")], [])
    assert kept.thread("msg_b") is None and kept.thread("msg_c") is not None
