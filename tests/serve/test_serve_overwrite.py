"""A call that would write a file the conversation shows is there (a listing named it) and no call has read is
sent back once (`overwrites` in `mylm/serve/checks.py`). Asked which file of the project defines parse_release,
smolagents' Qwen2.5-Coder-1.5B wrote a made-up `def parse_release` into release.py, the user's own file, five
times over."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from mylm.serve.checks import asks_no_change
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "list_files", "description": "List the files.",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]}}}]
QUESTION = "Which file of this project defines the function parse_release?"


def _listed(question: str = QUESTION) -> list[dict[str, Any]]:
    return [{"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "list_files", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "notes.txt\nrelease.py\ntasks.py"}]


def _served(messages: list[dict[str, Any]], *replies: str) -> tuple[Any, list[dict[str, Any]]]:
    with OpenAIServer(list(replies)) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=messages)  # type: ignore[arg-type]
    sent = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]
    return reply.choices[0].message, sent


def test_a_listed_file_never_read_is_not_overwritten_unasked() -> None:
    write = call("write_file", json.dumps({"path": "release.py", "content": "def parse_release(path):\n    pass\n"}))
    message, sent = _served(_listed(), write, call("read_file", '{"path": "tasks.py"}'))
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [  # type: ignore[union-attr]
        ("read_file", {"path": "tasks.py"})]
    told = sent[1]["messages"][-1]["content"]
    assert "release.py is already in the project and has not been read" in told
    assert "call read_file on release.py first" in told and "parse_release" in told  # the task restated


@pytest.mark.parametrize("messages", [
    # Read first: the model knows what it replaces.
    _listed("Add a docstring to the file that imports parse_release.") + [{"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function",
                  "function": {"name": "read_file", "arguments": '{"path": "release.py"}'}}]},
                 {"role": "tool", "tool_call_id": "c2", "content": "from tasks import parse_release"}],
    # A file the task names may be rewritten whole; a new file replaces nothing.
    _listed("Rewrite release.py so that it prints hello."),
])
def test_a_write_after_a_read_or_asked_for_goes_out(messages: list[dict[str, Any]]) -> None:
    write = call("write_file", json.dumps({"path": "release.py", "content": "print('hello')\n"}))
    message, sent = _served(messages, write)
    assert [c.function.name for c in message.tool_calls] == ["write_file"] and len(sent) == 1  # type: ignore[union-attr]


def test_a_new_file_asked_for_or_a_second_try_goes_out() -> None:
    new = call("write_file", json.dumps({"path": "answer.txt", "content": "tasks.py"}))
    message, sent = _served(_listed("Put the name of the file that defines parse_release into answer.txt."), new)
    assert [c.function.name for c in message.tool_calls] == ["write_file"] and len(sent) == 1  # type: ignore[union-attr]
    again = call("write_file", json.dumps({"path": "release.py", "content": "x"}))
    message, sent = _served(_listed(), again, again)
    assert [c.function.name for c in message.tool_calls] == ["write_file"] and len(sent) == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(("task", "question"), [
    (QUESTION, True),
    ("What is the release code name written in notes.txt?", True),
    ("How many Python files are in this directory?", True),
    ("Can you add a test for parse_release?", False),
    ("Write the release code name from notes.txt into release.txt.", False),
    ("Fix the failing test.", False),
    ("The build fails on CI.", False),
])
def test_a_question_that_asks_for_nothing_to_change(task: str, question: bool) -> None:
    assert asks_no_change(task) is question


def test_a_new_file_written_for_a_question_is_sent_back_once() -> None:
    # The llm CLI's 1.5B, asked which file defines parse_release, read release.py, then wrote a new
    # parse_release.py (a copy of it) and answered that name.
    messages = _listed() + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
            "name": "read_file", "arguments": '{"path": "release.py"}'}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "from tasks import parse_release"}]
    write = call("write_file", json.dumps({"path": "parse_release.py", "content": "from tasks import parse_release"}))
    message, sent = _served(messages, write, "release.py")
    assert message.content == "release.py" and not message.tool_calls
    told = sent[1]["messages"][-1]["content"]
    assert "the task is a question and asks for no file to be written or changed" in told


EDIT = "In greet.py, change the greeting from Hello to Hi. Keep everything else as it is."
GREET = 'def greet(name):\n    return f"Hello, {name}!"\n'


def _missed(path: str, result: str, task: str = EDIT) -> list[dict[str, Any]]:
    return [{"role": "user", "content": task},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "read_file", "arguments": json.dumps({"path": path})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": result}]


@pytest.mark.parametrize(("path", "result"), [
    # The Agents SDK's (Responses) 1.5B read a made-up src/greet.py, was told so, and wrote a new one.
    ("src/greet.py", "error: no file named 'src/greet.py' in the project"),
    ("app/greet.py", "ENOENT: no such file or directory, open '/home/u/project/app/greet.py'"),
    ("lib/greet.py", "<tool_use_error>File does not exist.</tool_use_error>"),
    ("greeting.py", "Error: could not read greeting.py"),
])
def test_a_file_to_change_written_where_the_client_said_nothing_is_is_sent_back(path: str, result: str) -> None:
    write = call("write_file", json.dumps({"path": path, "content": 'def greet(name):\n    return f"Hi, {name}!"\n'}))
    message, sent = _served(_missed(path, result), write, call("read_file", '{"path": "greet.py"}'))
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [  # type: ignore[union-attr]
        ("read_file", {"path": "greet.py"})]
    told = sent[1]["messages"][-1]["content"]
    assert f"{path} is not there" in told and "Call read_file on greet.py" in told
    assert "change greet.py itself" in told


@pytest.mark.parametrize(("messages", "path"), [
    # The read worked: the file is there, and the model knows what it replaces.
    (_missed("src/greet.py", 'def greet(name):\n    return f"Hello, {name}!"\n'), "src/greet.py"),
    # A listing shows it, whatever a read said before.
    (_missed("src/greet.py", "error: no file named 'src/greet.py'") + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
            "name": "list_files", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "src/greet.py\nnotes.txt"}], "src/greet.py"),
    # A task that asks to change nothing, or asks for that very file.
    (_missed("src/greet.py", "error: no file named 'src/greet.py'", "Write a greeting function."), "src/greet.py"),
    (_missed("src/greet.py", "error: no file named 'src/greet.py'",
             "In greet.py, change Hello to Hi, and copy it to src/greet.py."), "src/greet.py"),
])
def test_a_write_the_conversation_does_not_show_is_missing_goes_out(messages: list[dict[str, Any]],
                                                                     path: str) -> None:
    write = call("write_file", json.dumps({"path": path, "content": GREET.replace("Hello", "Hi")}))
    message, sent = _served(messages, write)
    assert [c.function.name for c in message.tool_calls] == ["write_file"] and len(sent) == 1  # type: ignore[union-attr]


def test_the_missing_file_written_again_goes_out() -> None:
    write = call("write_file", json.dumps({"path": "src/greet.py", "content": "x = 1\n"}))
    message, sent = _served(_missed("src/greet.py", "error: no file named 'src/greet.py' in the project"), write, write)
    assert [c.function.name for c in message.tool_calls] == ["write_file"] and len(sent) == 2  # type: ignore[union-attr]



def _read(result: str, path: str = "greet.py", task: str = EDIT) -> list[dict[str, Any]]:
    return _missed(path, result, task)


@pytest.mark.parametrize(("shown", "path", "task"), [
    # The llm CLI's 1.5B wrote greet.py as "Hi" alone; here after reading it.
    (GREET, "greet.py", EDIT),
    # Claude Code's Read numbers each line; OpenCode's wraps the numbered lines.
    ('     1→def greet(name):\n     2→    return f"Hello, {name}!"\n', "/home/u/project/greet.py", EDIT),
    ('<file>\n00001| def greet(name):\n00002|     return f"Hello, {name}!"\n\n(End of file - total 2 lines)\n</file>',
     "greet.py", EDIT),
    # A file the task asks to add to, written as the new line alone.
    ("# Project\n\nSetup: run make.\nTests: run make test.\n", "README.md", "Add a line 'Shipped.' to README.md."),
])
def test_a_file_read_then_written_whole_with_most_of_it_lost_is_sent_back(shown: str, path: str, task: str) -> None:
    lost = call("write_file", json.dumps({"path": path, "content": "Hi"}))
    whole = call("write_file", json.dumps({"path": path, "content": GREET.replace("Hello", "Hi")}))
    message, sent = _served(_read(shown, path, task), lost, whole)
    assert [json.loads(c.function.arguments)["content"] for c in message.tool_calls] == [  # type: ignore[union-attr]
        GREET.replace("Hello", "Hi")]
    told = sent[1]["messages"][-1]["content"]
    assert f"replaces the whole of {path}" in told and "keeping 0 of them" in told
    assert "every line it had, with the change made" in told


@pytest.mark.parametrize(("shown", "content", "task"), [
    # The change itself: one line of two, two of three.
    (GREET, GREET.replace("Hello", "Hi"), EDIT),
    ("a = 1\nb = 2\nc = 3\n", "a = 10\nb = 20\nc = 3\n", "In greet.py, change a to 10 and b to 20."),
    # A rewrite asked for, and a file written after a read that failed.
    (GREET, "Hi", "Rewrite greet.py so that it holds Hi."),
    ("error: no file named 'greet.py' in the project", "Hi", EDIT),
])
def test_a_change_that_keeps_the_file_goes_out(shown: str, content: str, task: str) -> None:
    message, sent = _served(_read(shown, "greet.py", task),
                            call("write_file", json.dumps({"path": "greet.py", "content": content})))
    assert [c.function.name for c in message.tool_calls] == ["write_file"] and len(sent) == 1  # type: ignore[union-attr]


def test_the_lossy_write_made_again_goes_out() -> None:
    lost = call("write_file", json.dumps({"path": "greet.py", "content": "Hi"}))
    message, sent = _served(_read(GREET), lost, lost)
    assert [json.loads(c.function.arguments)["content"] for c in message.tool_calls] == ["Hi"]  # type: ignore[union-attr]
    assert len(sent) == 2
