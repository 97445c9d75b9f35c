"""An answer naming a file the conversation listed but never opened, to a question asking which file holds
something, is sent back once and the retry must read that file (`opened` in `mylm/serve/checks.py`). Asked which
file defines parse_release, five of six framework agents in front of Qwen2.5-Coder-1.5B listed the project and
answered `release.py`, which only imports it, without reading it."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest

from mylm.agent.unread import asks_which_file
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving
from tests.serve.test_serve_made_up import LIST, READ, TASK, _tools

LISTED = [{"role": "user", "content": TASK},
          {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
              "name": "list_files", "arguments": "{}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "greet.py\nnotes.txt\nrelease.py\ntasks.py"}]


@pytest.mark.parametrize(("question", "asks"), [
    (TASK, True),
    ("In which file is the port set?", True),
    ("Where is parse_release defined?", True),
    ("What file contains the database URL?", True),
    ("Which files are in the project?", False),
    ("What is the release code name written in notes.txt?", False),
    ("Summarise release.py.", False),
])
def test_a_question_asking_which_file_holds_something(question: str, asks: bool) -> None:
    assert asks_which_file(question) is asks


def test_a_listed_file_named_unopened_is_sent_back_to_read_it() -> None:
    with OpenAIServer(["release.py", call("read_file", '{"path": "release.py"}')]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ), messages=LISTED)  # type: ignore[arg-type]
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("read_file", {"path": "release.py"})]
    corrected = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")][1]
    told = corrected["messages"][-1]["content"]
    assert "release.py has not been read yet" in told and re.search(r"<name>read_file</name>", told)


@pytest.mark.parametrize("messages, answer", [
    # Read already (its name is in a call's arguments): the answer goes out.
    (LISTED + [{"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
        "name": "read_file", "arguments": '{"path": "tasks.py"}'}}]},
               {"role": "tool", "tool_call_id": "c2", "content": "def parse_release(path): ..."}], "tasks.py"),
    # A question that does not ask which file holds something.
    ([{**LISTED[0], "content": "Which files are in the project?"}, *LISTED[1:]], "greet.py, release.py, tasks.py"),
    # A name nothing listed (made up after a call: not this check's).
    (LISTED, "parser.py"),
    # A search quoted the file's lines: what it holds there was seen.
    ([LISTED[0], {**LISTED[1], "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "grep", "arguments": '{"pattern": "def parse_release"}'}}]},
      {**LISTED[2], "content": "tasks.py:1:def parse_release(path):"}], "tasks.py"),
])
def test_it_is_not_sent_back_when_read_or_not_asked(messages: list[dict[str, Any]], answer: str) -> None:
    with OpenAIServer([answer]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ), messages=messages)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == answer
    assert len([r for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]) == 1
