"""The server's side of two of the agent's checks, each sent back once a request:

- **An answer given before the file the question names was read** (`looked`; `agent/unread.py` says which words
  are files and which tool reads them). The Agents SDK's agent answered "Release1.0" for the code name in
  notes.txt with its `read_file` unused. The retry must call the reader (the server makes it the request's
  `tool_choice`): told to, the 1.5B at the client's temperature still answered without reading.
- **A call the client's conversation already holds, made again** (`repeated`). The agent runs its tools and sees
  a call give the same result; a server only sees the history its client sends back, so a call counts as
  repeated when the conversation holds it (same tool, same arguments) at least `TIMES` times, the last two with
  the same result. Codex in front of the 1.5B sent `write_stdin {session_id: 1}` back eight times, each answered
  "Unknown process id 1". Made again after that, the call goes out: the client decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..agent.corrections import Corrections
from ..agent.step import ModelStep, StepOutcome
from ..agent.turn import call_key
from ..agent.unread import unread
from ..core.types import ToolCall
from .wire import ChatRequest

#: Made this many times with the same last two results, a call is sent back once before it goes out again.
TIMES = 2


@dataclass(frozen=True)
class Repeat:
    """A call the conversation already holds: its result, and whether the model's previous call was this one."""

    tool: str
    output: str
    previous: bool


def repeated(request: ChatRequest, name: str, arguments: Mapping[str, Any]) -> Repeat | None:
    """The repeat a call of `name` with `arguments` would be in `request`'s conversation, or None."""
    key = call_key(ToolCall(name, dict(arguments)))
    results = {m.call_id: m.content for m in request.messages if m.role == "tool" and m.call_id}
    outputs: list[str | None] = []
    last = ""
    for message in request.messages:
        for call in message.calls if message.role == "assistant" else ():
            last = call_key(ToolCall(call.name, dict(call.arguments)))
            if last == key:
                outputs.append(results.get(call.id))
    if len(outputs) < TIMES or outputs[-1] is None or outputs[-1] != outputs[-2]:
        return None
    return Repeat(name, outputs[-1], previous=last == key)


def looked(outcome: StepOutcome, question: str, step: ModelStep,
           corrections: Corrections) -> tuple[StepOutcome, str | None]:
    """`outcome` (an answer to the open question), or, where the question names a file that nothing has read and
    the client offers a tool that reads one, the turn sent back with the `unlooked` correction, and the tool the
    retry must call; the made-up answer is left out (`kept`: kept, the model copied it after the look)."""
    if step.config.tool_choice != "auto":
        return outcome, None
    found = unread(question, step.listed)
    if found is None:
        return outcome, None
    return dataclasses.replace(
        outcome, problem=f"answered before any tool ran, without reading {found.path}", kind="tool_choice",
        correction=corrections.unlooked(found.tool, found.path, parameter=found.parameter, value=found.value,
                                        seen=False), kept=False), found.tool


def again(outcome: StepOutcome, request: ChatRequest, corrections: Corrections) -> StepOutcome:
    """`outcome` (calls), or, where its first call repeats one the conversation holds (`repeated`), the turn
    sent back with the `repeated_call` correction (the result it already has, the task restated)."""
    call = outcome.calls[0]
    found = repeated(request, call.name, call.arguments)
    if found is None:
        return outcome
    return dataclasses.replace(
        outcome, problem=f"{found.tool} again, with the same arguments and the same result", kind="call",
        correction=corrections.repeated_call(found.tool, found.output, previous=found.previous))
