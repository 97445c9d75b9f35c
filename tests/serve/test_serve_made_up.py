"""An answer naming a file that nothing in the conversation shows, given before any tool ran to a task about the
user's project, is sent back once and the retry must call the client's lister (`mylm/serve/checks.py`). Asked
which file of the project defines parse_release, all six framework agents in front of the 1.5B answered a made-up
name (`parse_release.py`, `functions.py`) without listing anything."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from mylm.agent.step import ToolDefinition
from mylm.agent.unread import Unread, lister, unseen_file
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving

NONE: dict[str, Any] = {"type": "object", "properties": {}}
LIST = ToolDefinition("list_files", "List the files of the project.", NONE)
READ = ToolDefinition("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}},
                                                   "required": ["path"]})
CLAUDE_GLOB = ToolDefinition("Glob", "Fast file pattern matching.", {"type": "object", "properties": {
    "pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"]})
CLAUDE_LS = ToolDefinition("LS", "Lists files and directories.", {"type": "object", "properties": {
    "path": {"type": "string"}}, "required": ["path"]})
CODEX_EXEC = ToolDefinition("exec_command", "Runs a command.", {"type": "object", "properties": {
    "cmd": {"type": "string"}}, "required": ["cmd"]})
TASK = "Which file of this project defines the function parse_release? Answer with the file name only."


@pytest.mark.parametrize("tools, expected", [
    ((READ, LIST), Unread(".", "list_files", "", "")),
    ((CLAUDE_GLOB, CLAUDE_LS), Unread(".", "LS", "path", ".")),  # Glob needs a pattern: not a plain listing
    ((READ, CODEX_EXEC), Unread(".", "exec_command", "cmd", "ls -a")),
    ((READ,), None),
])
def test_the_call_that_lists_the_project(tools: tuple[ToolDefinition, ...], expected: Unread | None) -> None:
    assert lister(tools) == expected


def test_a_file_name_nothing_shows_is_made_up() -> None:
    assert unseen_file("parse_release.py", TASK) == "parse_release.py"
    assert unseen_file("It is in tasks.py.", "tasks.py\nrelease.py") is None
    assert unseen_file("The function parse_release.", TASK) is None  # no file's name at all


def _tools(*tools: ToolDefinition) -> list[Any]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": dict(t.parameters)}} for t in tools]


def test_a_made_up_file_before_any_call_is_sent_back_to_list_the_project() -> None:
    with OpenAIServer(["parse_release.py", call("list_files", "{}")]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ),
                                            messages=[{"role": "user", "content": TASK}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["list_files"]  # type: ignore[union-attr]
    sent = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]
    corrected = sent[1]["messages"]
    assert "before it is listed" in corrected[-1]["content"] and "list_files" in corrected[-1]["content"]
    assert "parse_release.py" not in json.dumps(corrected)  # the made-up answer is left out


@pytest.mark.parametrize("question", [
    "How many Python files does this project have? Answer with the number only.",
    "What is in the current directory?",
])
def test_an_answer_about_what_the_project_holds_before_any_call_is_sent_back_to_list_it(question: str) -> None:
    # Through pydantic-ai the 1.5B answered "How many Python files does this project have?" with "2", no tool run.
    with OpenAIServer(["2", call("list_files", "{}")]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ),
                                            messages=[{"role": "user", "content": question}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["list_files"]  # type: ignore[union-attr]


def test_a_task_about_the_project_that_asks_no_question_is_answered() -> None:
    with OpenAIServer(["Code sleeps in the dark,\nmodules hum a quiet tune,\ntests pass before dawn."]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ), messages=[
            {"role": "user", "content": "Write a haiku about this project."}])
    assert (reply.choices[0].message.content or "").startswith("Code sleeps") and len(upstream.requests) == 1


@pytest.mark.parametrize("messages", [
    # A question that is not about the project may name a file to create.
    [{"role": "user", "content": "How do I configure eslint? Answer in one line."}],
    # Once a tool has run, the answer goes out (the lister's output decides what it could see).
    [{"role": "user", "content": TASK},
     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
         "name": "list_files", "arguments": "{}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "greet.py\nrelease.py\ntasks.py"}],
])
def test_it_is_not_sent_back_off_the_project_or_after_a_call(messages: list[dict[str, Any]]) -> None:
    with OpenAIServer(["Create a .eslintrc.json file with your rules."]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(LIST, READ), messages=messages)
    assert reply.choices[0].message.content == "Create a .eslintrc.json file with your rules."
    assert len(upstream.requests) == 1


# Cline's own tools (cline 3.0.65), as its request carries them: lists of absolute paths, a web fetcher.
CLINE_READ = ToolDefinition("read_files", "Read the content of text files at the provided absolute paths.", {
    "type": "object", "properties": {"files": {"type": "array", "items": {"type": "object", "properties": {
        "path": {"type": "string"}, "start_line": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["path"]}}}, "required": ["files"]})
CLINE_FETCH = ToolDefinition("fetch_web_content", "Fetch content from URLs and analyze them using the provided "
                             "prompts.", {"type": "object", "properties": {"requests": {"type": "array", "items": {
                                 "type": "object", "properties": {"url": {"type": "string"}, "prompt": {
                                     "type": "string"}}, "required": ["url", "prompt"]}}}, "required": ["requests"]})
#: What Qwen2.5-Coder-1.5B called behind Cline, asked for the code name in notes.txt (run 22), twice in a row.
FETCHED = {"requests": [{"url": "https://example.com/project/notes.txt",
                         "prompt": "Extract the release code name from notes.txt."}]}


def test_a_call_to_a_placeholder_address_nothing_gave_is_sent_back_once() -> None:
    read = {"files": [{"path": "/home/me/project/notes.txt"}]}
    with OpenAIServer([call("fetch_web_content", json.dumps(FETCHED)), call("read_files", json.dumps(read))]) as \
            upstream, serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="k") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(CLINE_READ, CLINE_FETCH), messages=[
            {"role": "system", "content": "Working Directory: /home/me/project"},
            {"role": "user", "content": "What is the release code name written in notes.txt?"}])
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("read_files", read)]  # type: ignore[union-attr]
    sent = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]
    correction = sent[1]["messages"][-1]["content"]
    assert "goes to example.com, a placeholder address that neither the task nor any result gave" in correction


@pytest.mark.parametrize("said", ["Summarise https://example.com/project/notes.txt for me.",
                                  "What does the page at example.com/project/notes.txt say?"])
def test_an_example_address_the_user_gave_is_fetched(said: str) -> None:
    with OpenAIServer([call("fetch_web_content", json.dumps(FETCHED))]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="k") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(CLINE_READ, CLINE_FETCH),
                                            messages=[{"role": "user", "content": said}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["fetch_web_content"]  # type: ignore[union-attr]
    assert len([r for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]) == 1


@pytest.mark.parametrize("arguments, said, host", [
    (FETCHED, "", "example.com"),
    ({"command": "curl -s http://api.example.org/v1 | jq ."}, "", "api.example.org"),
    ({"url": "http://myhost.test:8080/x"}, "", "myhost.test"),
    ({"url": "example.com/notes.txt"}, "", "example.com"),
    ({"text": "see www.example.net/docs"}, "", "www.example.net"),
    ({"url": "HTTPS://EXAMPLE.COM"}, "", "example.com"),
    ({"url": "https://example.com/a"}, "fetch https://EXAMPLE.com/a please", None),
    ({"url": "https://docs.python.org/3/"}, "", None),
    ({"url": "https://notexample.com/"}, "", None),
    ({"email": "me@example.com"}, "", None),
    ({"path": "unit.test/x"}, "", None),  # bare, it is as likely a directory
    ({"path": "notes.txt"}, "", None),
])
def test_a_placeholder_host_is_one_reserved_for_examples_that_nothing_named(
        arguments: dict[str, Any], said: str, host: str | None) -> None:
    from mylm.agent.grounding import placeholder_host
    from mylm.core.types import ToolCall

    assert placeholder_host(ToolCall("fetch", arguments), said) == host


CLINE_EDITOR = ToolDefinition("editor", "An editor for controlled filesystem edits.", {"type": "object", "properties": {
    "path": {"type": "string"}, "old_text": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "new_text": {"type": "string"}}, "required": ["path", "new_text"]})
#: The 1.5B behind Cline, asked to write the code name into release.txt (run 22), after its first reply looped:
#: its plan, then its calls as Python in a fenced block. It went out as the answer, and nothing was written.
PLANNED = """To complete this task, we need to read the content from the `notes.txt` file, extract the release code \
name, and then write it into a new file named `release.txt`. Here are the steps and tool calls:

1. **Read the content from `notes.txt`**: Use the `read_files` tool to read the contents of the `notes.txt` file.
2. **Write the release code name to `release.txt`**: Use the `editor` tool to create a new file named `release.txt`.

The final response will be the tool calls for the above steps.

```python
# Tool calls
# read_files to read contents of notes.txt
read_files_response = read_files({"files": [{"path": "/home/me/project/notes.txt", "start_line": 1, "end_line": 1}]})

# editor to create a new file named release.txt and insert the extracted release code name
editor_response = editor({"path": "/home/me/project/release.txt", "old_text": null, "new_text": ""})

print(editor_response)
```

The `editor_response` will provide the command to create the `release.txt` file. The final answer is the `!"""


def test_calls_written_as_code_in_a_fenced_block_are_sent_back_with_the_block_to_write() -> None:
    read = {"files": [{"path": "/home/me/project/notes.txt"}]}
    with OpenAIServer([PLANNED, call("read_files", json.dumps(read))]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="k") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(CLINE_READ, CLINE_EDITOR), messages=[
            {"role": "user", "content": "Write the release code name from notes.txt into a new file named "
                                        "release.txt, and nothing else."}])
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("read_files", read)]  # type: ignore[union-attr]
    sent = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]
    correction = sent[1]["messages"][-1]["content"]
    assert "wrote a call of read_files as code inside a code block, so nothing was run" in correction
    # The block to write instead is the model's own first call, as mylm's protocol writes it.
    assert "<name>read_files</name>" in correction and '"start_line": 1' in correction


@pytest.mark.parametrize("answer", [
    "Call it like this:\n```python\nresult = read_files(paths)\n```",  # no arguments mylm can read as a call
    "```python\nimport tools\ntools.read_files({\"files\": []})\n```",  # a method of something else
    "Use `read_files({\"files\": []})` inline.",  # not in a fenced block
    "```python\ndef editor(path, new_text):\n    open(path, 'w').write(new_text)\n\neditor(path=\"a.txt\", "
    "new_text=\"hi\")\n```",  # a program that defines its own function of that name
])
def test_code_that_is_not_a_call_of_a_tool_is_an_answer(answer: str) -> None:
    with OpenAIServer([answer]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="k") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(CLINE_READ, CLINE_EDITOR), messages=[
            {"role": "user", "content": "How would I call the reader from Python?"}])
    assert reply.choices[0].message.content == answer and not reply.choices[0].message.tool_calls


def test_the_second_reply_with_a_call_as_code_is_taken_as_the_answer() -> None:
    with OpenAIServer([PLANNED, PLANNED]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="k") as api:
        reply = api.chat.completions.create(model="m", tools=_tools(CLINE_READ, CLINE_EDITOR), messages=[
            {"role": "user", "content": "Show me how the tools would be called, as Python."}])
    assert "read_files_response = read_files(" in (reply.choices[0].message.content or "")
