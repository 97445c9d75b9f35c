"""An answer to a task that asks for a file to be written, while nothing was written, is sent back once and the
retry must call the client's writer (`mylm/agent/unwritten.py`, `mylm/serve/checks.py`). Found with the OpenAI
Agents SDK in front of the 1.5B: asked to write the code name from notes.txt into release.txt, it read notes.txt
and answered "tundra-d367"; nothing was written."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from mylm.agent.step import ToolDefinition
from mylm.agent.unwritten import Unwritten, change_target, unwritten, write_target
from mylm.serve.checks import task_and_calls
from mylm.serve.wire import CallIn, ChatMessage, ChatRequest
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving

PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
READ = ToolDefinition("read_file", "Read a file of the project and return its text.", PATH)
WRITE = ToolDefinition("write_file", "Write a file.", {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]})
LIST = ToolDefinition("list_files", "List the files of the project.", {"type": "object", "properties": {}})
# The coding agents' tools, as they name them and their parameters.
CLAUDE_WRITE = ToolDefinition("Write", "Writes a file to the local filesystem.", {"type": "object", "properties": {
    "file_path": {"type": "string"}, "content": {"type": "string"}}, "required": ["file_path", "content"]})
CLAUDE_EDIT = ToolDefinition("Edit", "Performs exact string replacements in files.", {"type": "object", "properties": {
    "file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}}})
CODEX_EXEC = ToolDefinition("exec_command", "Runs a command in a PTY.", {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]})
TASK = "Write the release code name from notes.txt into a new file named release.txt, and nothing else."


@pytest.mark.parametrize("task, path", [
    (TASK, "release.txt"),
    ("Create hello.py that prints hi.", "hello.py"),
    ("Please save the list of files to files.txt", "files.txt"),
    ("Can you write a summary of README.md to summary.md?", "summary.md"),
    ("Read notes.txt. Then write its code name into out.txt.", "out.txt"),
    ("Make a file called todo.txt with three items.", "todo.txt"),
    ("Copy notes.txt to backup.txt", "backup.txt"),
    # Questions about writing, and tasks that write no file, ask for nothing.
    ("What does write_config write to settings.json?", None),
    ("Summarise notes.txt.", None),
    ("Write a poem about the sea.", None),
    ("Save it to example.com", None),  # a web address is no file
])
def test_the_file_a_task_asks_to_be_written(task: str, path: str | None) -> None:
    assert write_target(task) == path


def test_the_writer_and_what_counts_as_written() -> None:
    assert unwritten(TASK, (LIST, READ, WRITE), [("read_file", {"path": "notes.txt"})]) == Unwritten(
        "release.txt", "write_file", "path")
    assert unwritten(TASK, (CLAUDE_EDIT, CLAUDE_WRITE), []) == Unwritten("release.txt", "Write", "file_path")
    assert unwritten(TASK, (READ, CODEX_EXEC), []) == Unwritten("release.txt", "exec_command", "")
    # Any call of a writing or editing tool may have written it; so may a command naming the file.
    assert unwritten(TASK, (READ, WRITE), [("write_file", {"path": "release", "content": "x"})]) is None
    assert unwritten(TASK, (CLAUDE_EDIT, CLAUDE_WRITE), [("Edit", {"file_path": "release.txt"})]) is None
    assert unwritten(TASK, (CODEX_EXEC,), [("exec_command", {"cmd": "echo cobalt > release.txt"})]) is None
    assert unwritten(TASK, (CODEX_EXEC,), [("exec_command", {"cmd": "cat notes.txt"})]) is not None
    # A reader's call naming the file wrote nothing (AutoGen's 1.5B looked for release.txt before writing it).
    assert unwritten(TASK, (LIST, READ, WRITE), [("read_file", {"path": "notes.txt"}),
                                                 ("read_file", {"path": "release.txt"})]) == Unwritten(
        "release.txt", "write_file", "path")
    # No tool that writes: never sent back.
    assert unwritten(TASK, (LIST, READ), []) is None


def test_the_task_is_the_last_user_message_with_words_of_its_own() -> None:
    """Claude Code sends reminders alone in a user message beside a tool's result: not a new task."""
    request = ChatRequest("m", (
        ChatMessage("user", "<system-reminder>context</system-reminder>\n" + TASK),
        ChatMessage("assistant", calls=(CallIn("c1", "Read", {"file_path": "notes.txt"}),)),
        ChatMessage("tool", "The release code name is cobalt.", call_id="c1"),
        ChatMessage("user", "<system-reminder>Do not write malware.</system-reminder>")))
    assert task_and_calls(request) == (TASK, [("Read", {"file_path": "notes.txt"})])


def _tools(*tools: ToolDefinition) -> list[Any]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": dict(t.parameters)}} for t in tools]


def _sent(upstream: OpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]


READ_DONE: list[Any] = [
    {"role": "user", "content": TASK},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "read_file", "arguments": '{"path": "notes.txt"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "The release code name is tundra-d367.\n"}]


def test_an_answer_with_nothing_written_is_sent_back_and_the_retry_writes() -> None:
    write = call("write_file", '{"path": "release.txt", "content": "tundra-d367"}')
    with OpenAIServer(["tundra-d367", write]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ, WRITE), messages=READ_DONE)
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("write_file", {"path": "release.txt", "content": "tundra-d367"})]
    retried = _sent(upstream)[1]["messages"]
    assert "Nothing has been written yet" in retried[-1]["content"] and "write_file" in retried[-1]["content"]
    assert not any(m["role"] == "assistant" and "tundra-d367" in str(m.get("content")) for m in retried)


def test_looking_for_the_file_to_write_is_not_writing_it() -> None:
    """AutoGen's 1.5B (run 21) read notes.txt and release.txt, not there yet, then answered in words: the reads
    naming release.txt wrote nothing, so the answer is sent back and the retry writes."""
    looked = [*READ_DONE,
              {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
                  "name": "read_file", "arguments": '{"path": "release.txt"}'}}]},
              {"role": "tool", "tool_call_id": "c2", "content": "error: no file named 'release.txt' in the project"}]
    write = call("write_file", '{"path": "release.txt", "content": "tundra-d367"}')
    said = "No, the result does not answer the task. We need to create a new file named release.txt."
    with OpenAIServer([said, write]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ, WRITE), messages=looked)
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["write_file"]  # type: ignore[union-attr]
    assert "Nothing has been written yet" in _sent(upstream)[1]["messages"][-1]["content"]


def test_it_is_sent_back_once_and_never_once_something_was_written() -> None:
    wrote = [*READ_DONE,
             {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
                 "name": "write_file", "arguments": '{"path": "release.txt", "content": "tundra-d367"}'}}]},
             {"role": "tool", "tool_call_id": "c2", "content": "wrote 11 characters"}]
    with OpenAIServer(["tundra-d367"] * 4 + ["Done: release.txt holds it."]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        first = api.chat.completions.create(model="m", tools=_tools(READ, WRITE), messages=READ_DONE)
        done = api.chat.completions.create(model="m", tools=_tools(READ, WRITE), messages=wrote)
    # Once, then the tool_required correction of the forced retry, then the reply's text: never a half call.
    assert first.choices[0].message.content == "tundra-d367"
    assert done.choices[0].message.content == "Done: release.txt holds it."
    assert sum("Nothing has been written yet" in json.dumps(b["messages"][-1]) for b in _sent(upstream)) == 1


def test_a_file_to_create_is_written_not_read_first() -> None:
    """A task naming only the file to create must not be sent to read it (there is nothing to read yet)."""
    write = call("write_file", '{"path": "hello.py", "content": "print(\\"hi\\")"}')
    task = "Create hello.py that prints hi."
    with OpenAIServer(["```python\nprint('hi')\n```", write]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(READ, WRITE),
                                            messages=[{"role": "user", "content": task}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["write_file"]  # type: ignore[union-attr]
    corrected = json.dumps(_sent(upstream)[1]["messages"][-1])
    assert "hello.py to be written" in corrected and "Nothing has been read" not in corrected


EDIT = "In greet.py, change the greeting from Hello to Hi. Keep everything else as it is."


@pytest.mark.parametrize("task, path", [
    (EDIT, "greet.py"),
    ("Change the greeting in greet.py to Hi.", "greet.py"),
    ("Please fix the typo in README.md", "README.md"),
    ("Rename the function greet to welcome in app/greet.py.", "app/greet.py"),
    ("Remove the last line from notes.txt", "notes.txt"),
    ("Can you update config.json so the port is 8080?", "config.json"),
    # Questions, and changes that name no file, ask for no file to be changed.
    ("What would change if greet.py returned None?", None),
    ("Fix the bug.", None),
    ("Update me on example.com", None),
])
def test_the_file_a_task_asks_to_be_changed(task: str, path: str | None) -> None:
    assert change_target(task) == path
    assert write_target(task) is None  # it must be read before it is changed: not a file to create


def test_a_change_is_made_with_the_clients_editor_where_it_has_one() -> None:
    assert unwritten(EDIT, (READ, WRITE), [("read_file", {"path": "greet.py"})]) == Unwritten(
        "greet.py", "write_file", "path", change=True)
    assert unwritten(EDIT, (CLAUDE_WRITE, CLAUDE_EDIT), []) == Unwritten("greet.py", "Edit", "file_path", change=True)
    assert unwritten(EDIT, (READ, WRITE), [("write_file", {"path": "greet.py", "content": "x"})]) is None


def test_an_edit_answered_after_reading_without_changing_is_sent_back() -> None:
    # Through pydantic-ai the 1.5B read greet.py, then answered its greeting unchanged: nothing was edited.
    read: list[Any] = [
        {"role": "user", "content": EDIT},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "read_file", "arguments": '{"path": "greet.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": 'def greet(name):\n    return f"Hello, {name}!"\n'}]
    write = call("write_file", '{"path": "greet.py", "content": "def greet(name):\\n    return f\\"Hi, {name}!\\"\\n"}')
    with OpenAIServer(['"Hello, {name}!"', write]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ, WRITE), messages=read)
    calls = reply.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["write_file"]  # type: ignore[union-attr]
    told = _sent(upstream)[1]["messages"][-1]["content"]
    assert "greet.py to be changed" in told and "the rest of the file kept" in told


def test_an_edit_answered_before_reading_is_sent_to_read_first() -> None:
    read = call("read_file", '{"path": "greet.py"}')
    with OpenAIServer(['"Hi, {name}!"', read]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ, WRITE),
                                            messages=[{"role": "user", "content": EDIT}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["read_file"]  # type: ignore[union-attr]
    assert "to be changed" not in json.dumps(_sent(upstream)[1]["messages"][-1])


def test_a_file_to_change_is_read_before_a_tool_replaces_it_whole() -> None:
    # Through the llm CLI the 1.5B, asked to change greet.py's greeting, wrote greet.py unread with "Hi" alone.
    blind = call("write_file", '{"path": "greet.py", "content": "Hi"}')
    read = call("read_file", '{"path": "greet.py"}')
    with OpenAIServer([blind, read]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(READ, WRITE),
                                            messages=[{"role": "user", "content": EDIT}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["read_file"]  # type: ignore[union-attr]
    told = _sent(upstream)[1]["messages"][-1]["content"]
    assert "greet.py is already in the project and has not been read" in told and "call read_file on greet.py" in told


@pytest.mark.parametrize("tools, reply", [
    ((READ, WRITE), call("write_file", '{"path": "greet.py", "content": "x"}')),   # read already (below)
    ((READ, CLAUDE_EDIT), call("Edit", '{"file_path": "greet.py", "old_string": "Hello", "new_string": "Hi"}')),
])
def test_an_edit_in_place_or_a_write_after_the_read_goes_out(tools: tuple[ToolDefinition, ...], reply: str) -> None:
    messages: list[Any] = [{"role": "user", "content": EDIT}]
    if tools[1] is WRITE:
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                      "function": {"name": "read_file", "arguments": '{"path": "greet.py"}'}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "def greet(name): ..."}]
    with OpenAIServer([reply]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        out = api.chat.completions.create(model="m", tools=_tools(*tools), messages=messages)
    assert len(out.choices[0].message.tool_calls or []) == 1 and len(_sent(upstream)) == 1
