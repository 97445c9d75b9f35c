"""A fenced JSON call (issue 31, item 1): the form Qwen2.5-Coder writes most, prose then a ```json block holding
`{"name": ..., "arguments": ...}`. In emulate mode it must come back as a native call, streamed and not, and never
reach the client as text. The reading is the parser's (branch `parser`); these are serve's side of it."""

from __future__ import annotations

import json

import openai

from tests.providers.servers import OpenAIServer
from tests.serve.support import openai_client

READ = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
#: Qwen2.5-Coder-1.5B's reply in the issue's capture, as it wrote it.
FENCED = ("I'll read the file to see what it says.\n\n```json\n"
          '{"name": "read_file", "arguments": {"path": "hello.txt"}}\n```')
QUESTION = [{"role": "user", "content": "What does hello.txt say?"}]


def client(url: str) -> openai.OpenAI:
    return openai_client(url)  # type: ignore[no-any-return]


def test_a_fenced_json_call_is_a_native_call(upstream: OpenAIServer, served: str) -> None:
    upstream.script([FENCED])
    choice = client(served).chat.completions.create(model="m", tools=[READ], messages=QUESTION).choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls or []
    assert tool_call.function.name == "read_file"
    assert json.loads(tool_call.function.arguments) == {"path": "hello.txt"}
    assert "```" not in (choice.message.content or "") and '"name"' not in (choice.message.content or "")


def test_a_streamed_fenced_json_call_is_a_native_call_and_never_text(upstream: OpenAIServer, served: str) -> None:
    upstream.script([FENCED])
    content, calls, finish = "", {}, None
    for chunk in client(served).chat.completions.create(model="m", stream=True, tools=[READ], messages=QUESTION):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                entry = calls.setdefault(piece.index, {"name": "", "arguments": ""})
                entry["name"] += (piece.function.name or "") if piece.function else ""
                entry["arguments"] += (piece.function.arguments or "") if piece.function else ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [("read_file", {"path": "hello.txt"})]


def test_native_mode_already_rescues_the_same_reply() -> None:
    from tests.serve.support import serving

    with OpenAIServer() as upstream, serving(upstream.base_url, tools="native") as url:
        upstream.script([FENCED])
        choice = client(url).chat.completions.create(model="m", tools=[READ], messages=QUESTION).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert choice.message.tool_calls[0].function.name == "read_file"  # type: ignore[index]
