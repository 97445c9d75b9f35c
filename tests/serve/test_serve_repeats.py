"""A call the client's conversation already holds, made again with the same result, is sent back once
(`mylm/serve/checks.py`); made again after that, the model is asked for its answer, no tools. Codex in front of the
1.5B sent `write_stdin {session_id: 1}` back eight times, each answered "Unknown process id 1", until its turn
limit."""

from __future__ import annotations

import json
from typing import Any

import openai

from mylm.agent.step import ToolDefinition
from mylm.serve.checks import Repeat, repeated
from mylm.serve.wire import CallIn, ChatMessage, ChatRequest
from tests.providers.servers import OpenAIServer
from tests.serve.support import call, serving

WRITE_STDIN = {"session_id": 1, "chars": "echo hi"}
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "write_stdin", "description": "Write to a running session.",
    "parameters": {"type": "object", "properties": {"session_id": {"type": "number"}, "chars": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "exec_command", "description": "Run a command.", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]


def _history(*results: str, name: str = "write_stdin", arguments: dict[str, Any] | None = None) -> list[ChatMessage]:
    messages = [ChatMessage("user", "Say hi in the running shell.")]
    for index, result in enumerate(results):
        messages.append(ChatMessage("assistant", calls=(CallIn(f"c{index}", name, arguments or WRITE_STDIN),)))
        messages.append(ChatMessage("tool", result, call_id=f"c{index}"))
    return messages


def test_a_call_made_twice_with_the_same_result_is_a_repeat() -> None:
    failed = "write_stdin failed: Unknown process id 1"
    request = ChatRequest("m", tuple(_history(failed, failed)))
    assert repeated(request, "write_stdin", dict(WRITE_STDIN)) == Repeat("write_stdin", failed, previous=True,
                                                                         times=2)
    # Arguments are compared as JSON values, whatever their order.
    assert repeated(request, "write_stdin", {"chars": "echo hi", "session_id": 1}) is not None


def test_what_changes_from_run_to_run_is_not_a_different_result() -> None:
    # Codex's exec_command heads each result with a fresh chunk id and the wall time: its 1.5B ran
    # `cat -- notes.txt` and fed the text to write_stdin, over and over, each cat a "new" result.
    def ran(chunk: str, seconds: str) -> str:
        return (f"Chunk ID: {chunk}\nWall time: {seconds} seconds\nProcess exited with code 0\nOutput:\n"
                "The release code name is cobalt-601e.\n")
    cat = {"cmd": "cat -- notes.txt"}
    request = ChatRequest("m", tuple(_history(ran("78f568", "0.0000"), ran("e770ca", "0.0012"), name="exec_command",
                                              arguments=cat)))
    assert repeated(request, "exec_command", cat) is not None
    # The code name itself (a word with hex digits, not all of them) and whole numbers still tell results apart.
    other = ChatRequest("m", tuple(_history(ran("78f568", "0.0000"), ran("e770ca", "0.0012").replace("601e", "602e"),
                                            name="exec_command", arguments=cat)))
    assert repeated(other, "exec_command", cat) is None
    exited = ChatRequest("m", tuple(_history("3 passed, 1 failed in 0.12s", "4 passed, 0 failed in 0.10s")))
    assert repeated(exited, "write_stdin", dict(WRITE_STDIN)) is None
    head = ChatRequest("m", tuple(_history("4f2a9c1e", "9b0d3e77")))  # `git rev-parse HEAD` after a commit
    assert repeated(head, "write_stdin", dict(WRITE_STDIN)) is None


def test_once_a_changed_result_or_other_arguments_it_is_not() -> None:
    assert repeated(ChatRequest("m", tuple(_history("x"))), "write_stdin", dict(WRITE_STDIN)) is None
    # Run again after something changed (the tests after an edit): a different result each time.
    assert repeated(ChatRequest("m", tuple(_history("1 failed", "0 failed"))), "write_stdin",
                    dict(WRITE_STDIN)) is None
    assert repeated(ChatRequest("m", tuple(_history("x", "x"))), "write_stdin", {"session_id": 2}) is None


def test_served_the_repeat_is_sent_back_once_with_the_result_and_the_task() -> None:
    failed = "write_stdin failed: Unknown process id 1"
    history: list[dict[str, Any]] = [{"role": "user", "content": "Say hi in the running shell."}]
    for index in range(2):
        history += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{index}", "type": "function",
                     "function": {"name": "write_stdin", "arguments": json.dumps(WRITE_STDIN)}}]},
                    {"role": "tool", "tool_call_id": f"c{index}", "content": failed}]
    same = call("write_stdin", json.dumps(WRITE_STDIN))
    other = call("exec_command", '{"cmd": "echo hi"}')
    with OpenAIServer([same, other]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=TOOLS, messages=history)
        # Made again after the correction, the model is stuck: asked for its answer, no tools, as the agent's
        # loop asks it (Codex's 1.5B fed notes.txt's text to write_stdin until the client gave up).
        upstream.script([same, same, "The shell is gone: there is no session 1 to say hi in."])
        insisted = api.chat.completions.create(model="m", tools=TOOLS, messages=history)
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["exec_command"]  # type: ignore[union-attr]
    assert not insisted.choices[0].message.tool_calls
    assert insisted.choices[0].message.content == "The shell is gone: there is no session 1 to say hi in."
    sent = json.dumps(upstream.requests[1].body["messages"][-1], ensure_ascii=False)  # type: ignore[index]
    assert "same result" in sent and "Unknown process id 1" in sent and "Say hi in the running shell." in sent
    asked = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")][-1]
    told = asked["messages"][-1]["content"]
    assert "You have called write_stdin 3 times with the same arguments" in told and "no more tools" in told


WRITE_FILE = ToolDefinition("write_file", "Write a file.", {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]})
READ_FILE = ToolDefinition("read_file", "Read a file.", {"type": "object", "properties": {
    "path": {"type": "string"}}, "required": ["path"]})
WRITTEN = {"path": "release.txt", "content": "Release code name: tundra-bd87\n"}


def _written_then_read() -> list[ChatMessage]:
    return [ChatMessage("user", "Write the release code name from notes.txt into release.txt."),
            ChatMessage("assistant", calls=(CallIn("c1", "write_file", WRITTEN),)),
            ChatMessage("tool", "wrote 31 characters to release.txt", call_id="c1"),
            ChatMessage("assistant", calls=(CallIn("c2", "read_file", {"path": "release.txt"}),)),
            ChatMessage("tool", WRITTEN["content"], call_id="c2")]


def test_a_file_written_again_with_the_same_arguments_is_a_repeat_at_once() -> None:
    # The llm CLI in front of the 1.5B wrote release.txt, read it back, and wrote the same again until its chain
    # limit of 5 failed the run, the file long done.
    request = ChatRequest("m", tuple(_written_then_read()), tools=(WRITE_FILE, READ_FILE))
    assert repeated(request, "write_file", dict(WRITTEN)) == Repeat(
        "write_file", "wrote 31 characters to release.txt", previous=False, wrote=True, times=1)
    assert repeated(request, "write_file", {**WRITTEN, "content": "other"}) is None
    # Read again, a file is not a write: two like results first, as for any call.
    assert repeated(request, "read_file", {"path": "release.txt"}) is None
    # write_stdin feeds a process (no path): not a file written.
    assert repeated(ChatRequest("m", tuple(_history("x")), tools=(ToolDefinition(
        "write_stdin", "", {"type": "object", "properties": {"session_id": {"type": "number"}}}),)),
        "write_stdin", dict(WRITE_STDIN)) is None


def test_served_a_file_written_again_is_sent_back_saying_so() -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Write the release code name from notes.txt into release.txt."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
            "name": "read_file", "arguments": '{"path": "notes.txt"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "The release code name is tundra-bd87."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "write_file", "arguments": json.dumps(WRITTEN)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "wrote 31 characters to release.txt"}]
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": dict(t.parameters)}} for t in (WRITE_FILE, READ_FILE)]
    with OpenAIServer([call("write_file", json.dumps(WRITTEN)), "Done: release.txt holds the code name."]) as upstream, \
            serving(upstream.base_url) as url, openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=tools, messages=history)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "Done: release.txt holds the code name."
    sent = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]
    assert "write_file already did this, with these same arguments" in sent[1]["messages"][-1]["content"]


def test_an_answer_written_before_a_line_loop_goes_out_without_the_loop() -> None:
    # The Agents SDK printed the 1.5B's report of its edit followed by 48 lines of "```python": the loop was
    # corrected three times, the same each time, and out of corrections the looping text went out.
    answer = ("The greeting in greet.py has been changed from \"Hello\" to \"Hi\". The updated file content is as "
              "follows:\n```python\ndef greet(name):\n    return f'Hi, {name}!'\n```\n")
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    with OpenAIServer([answer + "```python\n" * 80] * 2) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=[weather], messages=[  # type: ignore[list-item]
            {"role": "user", "content": "In greet.py, change the greeting from Hello to Hi."}])
    text = reply.choices[0].message.content or ""
    assert text.startswith("The greeting in greet.py") and text.endswith("return f'Hi, {name}!'\n```")
    assert len([r for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]) == 2


def test_out_of_corrections_a_looping_reply_goes_out_said_once() -> None:
    loop = "Let me see.\n" + "```\n" * 80
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    with OpenAIServer([loop] * 3) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=[weather], messages=[  # type: ignore[list-item]
            {"role": "user", "content": "What is up?"}])
    assert (reply.choices[0].message.content or "").count("```") <= 1


def test_an_answer_quoting_the_result_the_repeat_correction_showed_again_goes_out() -> None:
    # OpenCode's 1.5B read notes.txt twice; made a third time, the read was sent back with the file shown again,
    # and its answer, that file's line, was taken for an echo of the correction twice and went out empty.
    shown = "1: Release notes, draft.\n2: The release code name is juniper-f38c.\n3: Ship it on Friday.\n"
    read = {"filePath": "/home/u/project/notes.txt"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "What is the release code name written in "
                                                                  "notes.txt? Answer with the code name only."}]
    for index in range(2):
        history += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{index}", "type": "function",
                     "function": {"name": "read", "arguments": json.dumps(read)}}]},
                    {"role": "tool", "tool_call_id": f"c{index}", "content": shown}]
    tools: list[Any] = [{"type": "function", "function": {"name": "read", "description": "Read a file.",
                         "parameters": {"type": "object", "properties": {"filePath": {"type": "string"}},
                                        "required": ["filePath"]}}}]
    answer = "The release code name is juniper-f38c."
    with OpenAIServer([call("read", json.dumps(read)), answer]) as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=tools, messages=history)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == answer and not reply.choices[0].message.tool_calls
    assert len(upstream.requests) == 2
