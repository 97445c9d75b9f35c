"""Calls a client kept in its history as text, read back as calls.

smolagents' `ToolCallingAgent` asks for native tool calls, then writes each turn back into its history as text:
an assistant message `Calling tools:\\n[{'id': ..., 'type': 'function', 'function': {'name': ..., 'arguments':
{...}}}]` (Python's repr of the calls) and a user message `Observation:\\n...` (or `Error:\\n...`) with the result.
Served as written, the model saw its calls in a form its prompt never taught and its results as the user's words:
mylm's checks saw no call at all (a file read twice was still "never read", a repeated call was never caught),
and a model that knows only mylm's protocol read the same file until the client's step limit. Read back, the
conversation is the one mylm's protocol would have given: each call canonical, each result an `<observation>`.

Only a whole message in that shape is read, and only when every call names a tool the request offers; anything
else stays the client's text, as written.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from .wire import CallIn, ChatMessage, ChatRequest

#: An assistant message that is only a transcript of calls.
_CALLS = re.compile(r"\A\s*Calling tools:\s*(\[.*\])\s*\Z", re.DOTALL)
#: The user message that carries a call's result (smolagents: `Observation:`, `Error:`; an optional call id).
_RESULT = re.compile(r"\A(?:Call id: *(?P<id>\S+)\s*\n)?(?P<label>Observation|Error):[ \t]*\n?(?P<body>.*)\Z",
                     re.DOTALL)
#: Beyond this a transcript is not read (a literal that large is no client's call list).
_MAX_CHARS = 200_000


def read_transcripts(request: ChatRequest) -> ChatRequest:
    """`request` with each transcribed call turn (and the results after it) as native calls and tool messages;
    `request` itself when it holds none."""
    if not request.tools or not any(m.role == "assistant" and not m.calls and "Calling tools" in m.content
                                    for m in request.messages):
        return request
    offered = {tool.name for tool in request.tools}
    messages = list(request.messages)
    out: list[ChatMessage] = []
    changed = False
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        calls = _calls(message, offered) if message.role == "assistant" and not message.calls else None
        if not calls:
            out.append(message)
            continue
        results: list[ChatMessage] = []
        while index < len(messages) and len(results) < len(calls) and messages[index].role == "user":
            result = _RESULT.match(messages[index].content)
            if result is None:
                break
            call = calls[len(results)]
            results.append(ChatMessage("tool", result.group("body").rstrip(), call_id=call.id,
                                       is_error=result.group("label") == "Error"))
            index += 1
        if len(results) not in (0, len(calls)):
            # Results for only some of the calls: which belongs to which is a guess, so the turn stays text.
            out.append(message)
            index -= len(results)
            continue
        out.append(ChatMessage("assistant", "", calls=tuple(calls)))
        out.extend(results)
        changed = True
    return dataclasses.replace(request, messages=tuple(out)) if changed else request


def _calls(message: ChatMessage, offered: set[str]) -> list[CallIn] | None:
    """The calls `message` transcribes, or None unless it is wholly a list of calls of offered tools."""
    found = _CALLS.match(message.content) if len(message.content) <= _MAX_CHARS else None
    if found is None:
        return None
    try:
        items = ast.literal_eval(found.group(1))  # literals only: nothing in it runs
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        try:
            items = json.loads(found.group(1))
        except (ValueError, RecursionError):
            return None
    if not isinstance(items, list) or not items:
        return None
    calls = []
    for position, item in enumerate(items):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or function.get("name") not in offered:
            return None
        arguments = _arguments(function.get("arguments"))
        if arguments is None:
            return None
        ident = item.get("id")
        calls.append(CallIn(ident if isinstance(ident, str) and ident else f"call_{position}",
                            str(function["name"]), arguments))
    return calls


def _arguments(value: Any) -> Mapping[str, Any] | None:
    """A call's arguments as an object: as given, or decoded from JSON text; None if neither."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None
