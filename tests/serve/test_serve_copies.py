"""An answer copied from what the client wrote around the question (its system prompt, or a block it wrapped into
the user's message) is sent back once with the task restated (`mylm/serve/checks.py`). Claude Code in front of the
1.5B got its own `<system-reminder>` back as the answer."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from mylm.serve.checks import copied
from mylm.serve.wire import ChatMessage, ChatRequest
from tests.providers.servers import OpenAIServer
from tests.serve.support import serving

REMINDER = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# currentDate\n"
    "Today's date is 2026-11-29.\n\n      IMPORTANT: this context may or may not be relevant to your tasks. You "
    "should not respond to this context unless it is highly relevant to your task.\n</system-reminder>\n")
QUESTION = "Which language is this project written in, mostly?"
#: The reply the 1.5B gave: the reminder's words, with its own spacing.
COPY = ("As you answer the user's questions, you can use the following context: # currentDate Today's date is "
        "2026-11-29. IMPORTANT: this context may or may not be relevant to your tasks. You should not respond to "
        "this context unless it is highly relevant to your task.")
TOOLS: list[Any] = [{"name": "Read", "description": "Read a file from the local filesystem.",
                     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                                      "required": ["file_path"]}}]


def _request(*messages: ChatMessage) -> ChatRequest:
    return ChatRequest("m", tuple(messages))


def test_an_answer_made_of_the_clients_reminder_is_a_copy() -> None:
    request = _request(ChatMessage("user", REMINDER + QUESTION))
    assert copied(COPY, request)
    # Stitched from the system prompt and the reminder, in another case.
    system = "You are an interactive CLI tool that helps users with software engineering tasks. " * 2
    stitched = system[:90].upper() + COPY[:120]
    assert copied(stitched, _request(ChatMessage("system", system), ChatMessage("user", REMINDER + QUESTION)))


def test_short_answers_tool_results_and_the_users_own_words_are_not() -> None:
    request = _request(ChatMessage("user", REMINDER + QUESTION))
    # A short answer may rightly repeat a reminder's fact.
    assert not copied("Today's date is 2026-11-29.", request)
    # Quoting a tool's result is answering.
    notes = "Release notes, draft. The release code name is amber-7f3a. Ship it on Friday after the tests pass. " * 2
    with_result = _request(ChatMessage("user", REMINDER + QUESTION), ChatMessage("tool", notes, call_id="c1"))
    assert not copied(notes, with_result)
    # The user's own words are not the client's.
    long_question = "Please summarise the following paragraph for me in one line. " * 3
    assert not copied(long_question, _request(ChatMessage("user", long_question)))
    # Nothing the client wrote at all.
    assert not copied(COPY, _request(ChatMessage("user", QUESTION)))


def test_served_the_copy_is_sent_back_once_with_the_users_question() -> None:
    answer = "Mostly Python, with a little shell."
    with OpenAIServer([COPY, answer]) as upstream, serving(upstream.base_url) as url, \
            anthropic.Anthropic(base_url=url, api_key="unused") as api:
        reply = api.messages.create(model="m", max_tokens=256, tools=TOOLS, messages=[
            {"role": "user", "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": QUESTION}]}])
    assert [block.text for block in reply.content if block.type == "text"] == [answer]
    assert len(upstream.requests) == 2
    retried = upstream.requests[1].body["messages"]  # type: ignore[index]
    last = json.dumps(retried[-1], ensure_ascii=False)
    assert "repeated the instructions and reminders" in last and QUESTION in last
    assert "system-reminder" not in last.split("The task is:")[1]
    # The copy itself is left out of the conversation.
    assert not any(m["role"] == "assistant" and "currentDate" in json.dumps(m) for m in retried)


def test_served_a_second_copy_goes_out_as_the_answer() -> None:
    with OpenAIServer([COPY, COPY]) as upstream, serving(upstream.base_url) as url, \
            anthropic.Anthropic(base_url=url, api_key="unused") as api:
        reply = api.messages.create(model="m", max_tokens=256, tools=TOOLS, messages=[
            {"role": "user", "content": REMINDER + QUESTION}])
    assert len(upstream.requests) == 2
    assert "currentDate" in "".join(block.text for block in reply.content if block.type == "text")


def test_served_a_copy_of_the_echo_correction_itself_is_not_the_answer() -> None:
    # Sent back for copying the reminder, the model copied mylm's echo correction instead: that is mylm's words
    # too, so it is sent back again, and the model's own answer after it goes out.
    with OpenAIServer([COPY, "Python."]) as probe, serving(probe.base_url) as url, \
            anthropic.Anthropic(base_url=url, api_key="unused") as api:
        api.messages.create(model="m", max_tokens=256, tools=TOOLS, messages=[
            {"role": "user", "content": REMINDER + QUESTION}])
    sent = probe.requests[-1].body["messages"][-1]["content"]  # type: ignore[index]
    echo = sent[sent.index("Your reply repeated the instructions and reminders"):]  # the correction alone
    answer = "Mostly Python, with a little shell."
    with OpenAIServer([COPY, echo, answer]) as upstream, serving(upstream.base_url) as url, \
            anthropic.Anthropic(base_url=url, api_key="unused") as api:
        reply = api.messages.create(model="m", max_tokens=256, tools=TOOLS, messages=[
            {"role": "user", "content": REMINDER + QUESTION}])
    assert [block.text for block in reply.content if block.type == "text"] == [answer]
    assert len(upstream.requests) == 3
