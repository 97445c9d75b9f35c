"""An answer given before anything was read, to a question that names a file, is sent back once with the call to
copy (`mylm/agent/unread.py`). Found with the OpenAI Agents SDK in front of the 1.5B at its default temperature:
asked for the code name in notes.txt, it answered "Release1.0" with its two file tools unused."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from mylm.agent.step import ToolDefinition
from mylm.agent.unread import Unread, unread
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving

PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
READ = ToolDefinition("read_file", "Read a file of the project and return its text.", PATH)
WRITE = ToolDefinition("write_file", "Write a file.", {"type": "object", "properties": {
    "path": {"type": "string"}, "text": {"type": "string"}}})
LIST = ToolDefinition("list_files", "List the files of the project.", {"type": "object", "properties": {}})
# The file tools of the coding agents, as they name them and their path parameters.
CLAUDE_READ = ToolDefinition("Read", "Reads a file from the local filesystem.", {
    "type": "object", "properties": {"file_path": {"type": "string"}, "limit": {"type": "number"}},
    "required": ["file_path"]})
OPENCODE_READ = ToolDefinition("read", "Read a file.", {
    "type": "object", "properties": {"filePath": {"type": "string"}}, "required": ["filePath"]})
SHELL = ToolDefinition("shell", "Run a command.", {
    "type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}})
QUESTION = "What is the release code name written in notes.txt? Answer with the code name only."


VIEW_IMAGE = ToolDefinition("view_image", "Attach a local image.", PATH)
VIEW_FILE = ToolDefinition("view_file", "Show a file.", PATH)
# Codex's shell tool (0.171), and the argv form of its older `shell`.
CODEX_EXEC = ToolDefinition("exec_command", "Runs a command in a PTY.", {
    "type": "object", "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}}, "required": ["cmd"]})


@pytest.mark.parametrize("tools, expected", [
    ((LIST, READ), Unread("notes.txt", "read_file", "path", "notes.txt")),
    ((WRITE, CLAUDE_READ), Unread("notes.txt", "Read", "file_path", "notes.txt")),
    ((OPENCODE_READ,), Unread("notes.txt", "read", "filePath", "notes.txt")),
    ((CODEX_EXEC, READ), Unread("notes.txt", "read_file", "path", "notes.txt")),  # a reading tool first
    ((CODEX_EXEC,), Unread("notes.txt", "exec_command", "cmd", "cat -- notes.txt")),
    ((SHELL, WRITE), Unread("notes.txt", "shell", "command", ["cat", "--", "notes.txt"])),
    ((WRITE, LIST), None),  # nothing that reads a file: never sent back
    # Codex's image viewer is no reader of text, and `read` comes before `view`.
    ((VIEW_IMAGE, CODEX_EXEC), Unread("notes.txt", "exec_command", "cmd", "cat -- notes.txt")),
    ((VIEW_FILE, READ), Unread("notes.txt", "read_file", "path", "notes.txt")),
    ((VIEW_FILE,), Unread("notes.txt", "view_file", "path", "notes.txt")),
])
def test_the_file_a_question_names_and_the_tool_that_reads_it(tools: tuple[ToolDefinition, ...],
                                                             expected: Unread | None) -> None:
    assert unread(QUESTION, tools) == expected


@pytest.mark.parametrize("question, path", [
    ("Summarise src/app.py for me.", "src/app.py"),
    ("What does config.yaml set the port to?", "config.yaml"),
    ("Is the key in .env.local?", ".env.local"),
    ("How do I install v1.5 of the tool, e.g. with pip?", None),
    ("What is 3.14 times 2.5?", None),
    ("Tell me about Python.", None),
    # A web address, and products spelled with a capitalised extension, are not files; a path still is.
    ("Is example.com up, and does it run ASP.NET or Socket.IO?", None),
    ("What does site/example.com hold?", "site/example.com"),
    ("Why does App.js not render?", "App.js"),
])
def test_only_a_word_shaped_as_a_file_name_counts(question: str, path: str | None) -> None:
    found = unread(question, (READ,))
    assert (found.path if found else None) == path


def _sent(upstream: OpenAIServer) -> list[str]:
    return [json.dumps(r.body["messages"], ensure_ascii=False) for r in upstream.requests
            if isinstance(r.body, dict) and r.body.get("messages")]


TOOLS: list[Any] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                      "parameters": dict(t.parameters)}} for t in (LIST, READ)]


def test_an_answer_before_any_read_is_sent_back_with_the_call_to_copy() -> None:
    read = call("read_file", '{"path": "notes.txt"}')
    with OpenAIServer(["<final_answer>Release1.0</final_answer>", read]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=[{"role": "user", "content": QUESTION}])
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("read_file",  # type: ignore[union-attr]
                                                                                     {"path": "notes.txt"})]
    corrected = _sent(upstream)[1]
    assert "the task names notes.txt" in corrected and "<name>read_file</name>" in corrected
    assert "Release1.0" not in corrected  # the made-up answer is left out: kept, it was copied after the look


def test_the_look_is_owed_whatever_corrections_went_before() -> None:
    """Not counted against --max-corrections: Codex's 1.5B spent both on an unknown tool and an echo, then
    answered without reading, and that answer went out."""
    with OpenAIServer(["<final_answer>Release1.0</final_answer>", call("read_file", '{"path": "notes.txt"}')]) \
            as upstream, serving(upstream.base_url, max_corrections=0) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=[{"role": "user", "content": QUESTION}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["read_file"]  # type: ignore[union-attr]


def test_it_is_sent_back_once_the_retry_must_read_and_never_once_a_tool_has_answered() -> None:
    """The retry's `tool_choice` is the reader (its grammar admits only that call, where the upstream takes one):
    told to read, the 1.5B at a client's default temperature still answered without reading. A scripted model
    that ignores it gets the `tool_required` correction, then its text goes out."""
    made_up = "<final_answer>Release1.0</final_answer>"
    with OpenAIServer([made_up] * 4 + ["It is cobalt."]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        first = api.chat.completions.create(model="m", tools=TOOLS, messages=[{"role": "user", "content": QUESTION}])
        after_a_read = api.chat.completions.create(model="m", tools=TOOLS, messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "read_file", "arguments": '{"path": "notes.txt"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "The release code name is cobalt."}])
    assert first.choices[0].message.content == "Release1.0"  # out of corrections: the reply's text, no half call
    assert after_a_read.choices[0].message.content == "It is cobalt."
    sent = _sent(upstream)
    assert len(sent) == 5 and "the task names notes.txt" in sent[1]
    assert "read_file" in json.loads(sent[2])[-1]["content"]  # the tool_required correction names the reader


@pytest.mark.parametrize("path", ["notes.txt", "/tmp/project/notes.txt"])
def test_a_call_that_reads_the_file_the_question_names_is_never_doubted(path: str) -> None:
    """Asked apart whether OpenCode's `read` (a dozen lines of description) does what the question asks, the 1.5B
    said no twice, and its call of read on notes.txt was sent back. A call that reads the named file (by a path
    ending in its name: OpenCode asks for absolute paths) goes out without the fit probe."""
    read = call("read_file", json.dumps({"path": path}))
    with OpenAIServer([read], fits=False) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=[{"role": "user", "content": QUESTION}])
    calls = reply.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["read_file"] and len(_sent(upstream)) == 1  # type: ignore[union-attr]


def test_a_call_that_reads_another_file_is_still_asked_about() -> None:
    read = call("read_file", '{"path": "other.md"}')
    answer = "<final_answer>I cannot tell.</final_answer>"  # given without a read: sent back, then a read is due
    with OpenAIServer([read, answer, read], fits=False) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=[{"role": "user", "content": QUESTION}])
    assert len(upstream.probes) == 2  # both wordings said no to the read of other.md
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["read_file"]  # type: ignore[union-attr]


def test_only_a_plain_file_name_reaches_a_shell_and_never_as_an_option() -> None:
    """The shape admits letters, digits, `_`, `-`, `.` and `/` only: a word holding `$(...)`, `;` or a space is not
    taken for a file; a name that starts with `-` comes after `--`."""
    assert unread("Show me a$(touch x).md or `x y`.md", (CODEX_EXEC,)) is None
    assert unread("What does b;id.txt say?", (CODEX_EXEC,)) == Unread("id.txt", "exec_command", "cmd", "cat -- id.txt")
    assert unread("What does -rf.txt say?", (CODEX_EXEC,)) == Unread("-rf.txt", "exec_command", "cmd",
                                                                       "cat -- -rf.txt")


@pytest.mark.parametrize("tool, arguments, reads", [
    (CODEX_EXEC, {"cmd": "cat notes.txt"}, True),
    (CODEX_EXEC, {"cmd": "head -n 5 ./docs/notes.txt | grep code"}, True),
    (SHELL, {"command": ["cat", "notes.txt"]}, True),
    (CODEX_EXEC, {"cmd": "ls"}, False),
    (CODEX_EXEC, {"cmd": "cat mynotes.txt"}, False),  # another file
    (READ, {"path": "notes.txt.bak"}, False),
    (WRITE, {"path": "notes.txt"}, False),  # writing it is not reading it
])
def test_a_shell_command_that_names_the_file_reads_it(tool: ToolDefinition, arguments: dict[str, Any],
                                                      reads: bool) -> None:
    """Claude Code's `Bash` and Codex's `exec_command` running `cat notes.txt` were judged unfit by the probe."""
    from mylm.agent.unread import reads_named_file

    assert reads_named_file(tool, arguments, QUESTION) is reads


def _history(*calls: tuple[str, dict[str, Any], str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for index, (name, arguments, result) in enumerate(calls):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{index}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(arguments)}}]},
                     {"role": "tool", "tool_call_id": f"c{index}", "content": result}]
    return messages


def test_other_tools_run_first_do_not_make_an_unread_answer_an_answer() -> None:
    """Claude Code's 1.5B called its task tools, then answered "v5.3.4" for the code name in notes.txt, never read:
    after other calls the answer is sent back all the same, and the correction says what is still unread."""
    history = _history(("list_files", {}, "greet.py\nnotes.txt"))
    with OpenAIServer(["<final_answer>v5.3.4</final_answer>", call("read_file", '{"path": "notes.txt"}')]) \
            as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=history)
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["read_file"]  # type: ignore[union-attr]
    corrected = json.loads(_sent(upstream)[1])[-1]["content"]
    assert "notes.txt has not been read yet" in corrected and "v5.3.4" not in _sent(upstream)[1]


@pytest.mark.parametrize("arguments", [
    {"path": "notes.txt"}, {"path": "/home/user/project/notes.txt"},
    {"prompt": "Find the code name in notes.txt"},  # handed to a sub-agent: its arguments name the file
])
def test_a_file_any_call_has_named_is_taken_as_looked_at(arguments: dict[str, Any]) -> None:
    history = _history(("read_file" if "path" in arguments else "Task", arguments, "cobalt"))
    with OpenAIServer(["It is cobalt."]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=history)
    assert reply.choices[0].message.content == "It is cobalt." and len(_sent(upstream)) == 1
