"""A reading tool's optional paging arguments the task never asked for are left out of the call, so the client
reads the file whole (`mylm/serve/checks.py`, `whole_reads`). Through OpenCode the 1.5B read notes.txt with
`offset: 1, limit: 1`, saw "Release notes, draft." and answered "Release"; the code name was on the next line."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving

#: OpenCode's read tool, as it offers it.
READ: dict[str, Any] = {"type": "function", "function": {
    "name": "read", "description": "Reads a file from the local filesystem.", "parameters": {
        "type": "object", "required": ["filePath"], "properties": {
            "filePath": {"type": "string"}, "offset": {"type": "number"}, "limit": {"type": "number"}}}}}
#: A tool that must be given its range.
SLICE: dict[str, Any] = {"type": "function", "function": {
    "name": "read_lines", "description": "Read some lines of a file.", "parameters": {
        "type": "object", "required": ["path", "start", "end"], "properties": {
            "path": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}}}}}


def _sent_call(task: str, reply: str, tools: list[Any]) -> dict[str, Any]:
    with OpenAIServer([reply]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        out = api.chat.completions.create(model="m", tools=tools, messages=[{"role": "user", "content": task}])
    (made,) = out.choices[0].message.tool_calls or []
    return dict(json.loads(made.function.arguments))  # type: ignore[union-attr]


def test_paging_nobody_asked_for_is_left_out() -> None:
    sent = _sent_call("What is the release code name written in notes.txt? Answer with the code name only.",
                      call("read", '{"filePath": "notes.txt", "offset": 1, "limit": 1}'), [READ])
    assert sent == {"filePath": "notes.txt"}


@pytest.mark.parametrize("task", ["Show me the first line of notes.txt.", "What are lines 3 to 5 of notes.txt?"])
def test_paging_the_task_asks_for_is_kept(task: str) -> None:
    sent = _sent_call(task, call("read", '{"filePath": "notes.txt", "offset": 1, "limit": 1}'), [READ])
    assert sent == {"filePath": "notes.txt", "offset": 1, "limit": 1}


def test_a_range_the_tool_requires_is_kept() -> None:
    sent = _sent_call("What does notes.txt say?", call("read_lines", '{"path": "notes.txt", "start": 1, "end": 2}'),
                      [SLICE])
    assert sent == {"path": "notes.txt", "start": 1, "end": 2}
