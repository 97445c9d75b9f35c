"""Calls a client keeps in its history as text (smolagents' `ToolCallingAgent`: "Calling tools:" and
"Observation:") are read back as calls and results (`mylm/serve/transcripts.py`); anything else stays text."""

from __future__ import annotations

from mylm.agent.step import ToolDefinition
from mylm.serve.transcripts import read_transcripts
from mylm.serve.wire import CallIn, ChatMessage, ChatRequest

TOOLS = tuple(ToolDefinition(name, "", {"type": "object", "properties": {}}) for name in
              ("read_file", "final_answer"))
# smolagents 1.26's history for one read, as it sent it through `mylm serve`.
CALLED = ("Calling tools:\n[{'id': 'call_413160fe79ec94b7df3b758d', 'type': 'function', 'function': {'name': "
          "'read_file', 'arguments': {'path': 'notes.txt'}}}]")


def request(*messages: ChatMessage) -> ChatRequest:
    return ChatRequest("local", (ChatMessage("user", "New task:\nWhat is in notes.txt?"), *messages), tools=TOOLS)


def test_a_transcribed_call_and_its_observation_become_a_call_and_its_result() -> None:
    read = read_transcripts(request(ChatMessage("assistant", CALLED),
                                    ChatMessage("user", "Observation:\nThe code name is heron-42.")))
    assert read.messages[1:] == (
        ChatMessage("assistant", "", calls=(CallIn("call_413160fe79ec94b7df3b758d", "read_file",
                                                   {"path": "notes.txt"}),)),
        ChatMessage("tool", "The code name is heron-42.", call_id="call_413160fe79ec94b7df3b758d"))


def test_an_error_result_a_call_id_and_json_arguments_are_read_too() -> None:
    called = ('Calling tools:\n[{"id": "c1", "type": "function", "function": {"name": "read_file", '
              '"arguments": "{\\"path\\": \\"a.txt\\"}"}}]')
    read = read_transcripts(request(ChatMessage("assistant", called),
                                    ChatMessage("user", "Call id: c1\nError:\nNo such file: a.txt")))
    assert read.messages[1].calls == (CallIn("c1", "read_file", {"path": "a.txt"}),)
    assert read.messages[2] == ChatMessage("tool", "No such file: a.txt", call_id="c1", is_error=True)


def test_anything_not_wholly_a_transcript_of_offered_tools_stays_text() -> None:
    unchanged = [
        request(ChatMessage("assistant", "I will read it.\n" + CALLED), ChatMessage("user", "Observation:\nx")),
        request(ChatMessage("assistant", CALLED.replace("read_file", "rm_rf")), ChatMessage("user", "Observation:\nx")),
        request(ChatMessage("assistant", "Calling tools:\n[__import__('os').system('true')]")),
        request(ChatMessage("assistant", "Calling tools:\n[]")),
        request(ChatMessage("user", CALLED)),
    ]
    for sent in unchanged:
        assert read_transcripts(sent) is sent
    # Without tools offered there is nothing to call.
    bare = ChatRequest("local", (ChatMessage("assistant", CALLED),))
    assert read_transcripts(bare) is bare


def test_results_for_only_some_of_the_calls_leave_the_turn_as_text() -> None:
    two = CALLED[:-1] + ", {'id': 'c2', 'type': 'function', 'function': {'name': 'read_file', 'arguments': " \
        "{'path': 'b.txt'}}}]"
    sent = request(ChatMessage("assistant", two), ChatMessage("user", "Observation:\nonly one"))
    assert read_transcripts(sent).messages == sent.messages
    both = read_transcripts(request(ChatMessage("assistant", two), ChatMessage("user", "Observation:\none"),
                                    ChatMessage("user", "Observation:\ntwo")))
    assert [m.role for m in both.messages] == ["user", "assistant", "tool", "tool"]
    assert [m.call_id for m in both.messages[2:]] == ["call_413160fe79ec94b7df3b758d", "c2"]


def test_a_call_with_no_result_yet_is_a_call() -> None:
    read = read_transcripts(request(ChatMessage("assistant", CALLED), ChatMessage("user", "Go on.")))
    assert read.messages[1].calls and read.messages[2] == ChatMessage("user", "Go on.")
