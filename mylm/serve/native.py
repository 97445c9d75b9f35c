"""`--tools native`: the request's tools forwarded to an upstream with native tool calling, and calls it leaves in
`content` rescued by mylm's parser.

The conversation goes upstream in OpenAI's chat shapes (assistant `tool_calls`, `tool` results), so a model with
native calling sees its own format. The reply's native calls are assembled from their streamed fragments and
validated against their schemas; its text is read by the streaming parser with the request's tool names, so a
call the upstream's tool parser missed (call JSON, a `<tool_call>` block, a fenced call printed as text) becomes a
native call too. An unusable reply is corrected upstream (an invalid native call gets its error as the call's
`tool` result), as in emulate mode.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

from ..agent.step import ModelStep, ToolDefinition
from ..core.types import ToolCall
from ..llm import LLM, LLMChunk, LLMRequest, NativeTools, ToolCallChunk
from ..protocol import jsonrepair
from ..protocol.defuse import defuse_special_tokens, neutralise
from ..protocol.verdict import reply_calls
from .wire import ChatRequest

#: The `tool` result of a valid native call that was not run because another part of the turn was unusable.
NOT_RUN = "Not run: this turn had an error (see the next message); call again once it is fixed."


@dataclasses.dataclass
class NativeCall:
    """A native call as assembled from its fragments: id and name from the first, the arguments' JSON text."""

    id: str | None = None
    name: str = ""
    arguments: str = ""


class Forwarding:
    """The upstream, for one attempt: each request carries `native` tools; native call fragments are assembled
    into `calls` instead of reaching the parser (which reads only the text)."""

    def __init__(self, llm: LLM, native: NativeTools) -> None:
        self.llm = llm
        self.native = native
        self.pieces: dict[int, NativeCall] = {}

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """The upstream's stream for `request` with the native tools, native call fragments held back."""
        stream = iter(self.llm.stream(dataclasses.replace(request, native=self.native)))
        try:
            for chunk in stream:
                if isinstance(chunk, ToolCallChunk):
                    call = self.pieces.setdefault(chunk.index, NativeCall())
                    call.id = call.id or chunk.id
                    call.name = call.name or chunk.name or ""
                    call.arguments += chunk.arguments
                    continue
                yield chunk
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    @property
    def calls(self) -> list[NativeCall]:
        """The native calls of the reply, in index order (nameless fragments dropped)."""
        return [self.pieces[i] for i in sorted(self.pieces) if self.pieces[i].name]


def wire_tools(tools: tuple[ToolDefinition, ...]) -> tuple[dict[str, Any], ...]:
    """The request's tools as OpenAI function tools (descriptions neutralised: the upstream's template writes
    them into its prompt, where a special token or a closing tag in one would end the tool list)."""
    return tuple({"type": "function", "function": {"name": t.name, "description": neutralise(t.description),
                                                   "parameters": dict(t.parameters)}} for t in tools)


def wire_choice(choice: str) -> str | dict[str, Any]:
    """`tool_choice` in OpenAI's shape."""
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def wire_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The conversation in OpenAI's chat shapes: the system messages joined first (strict templates want one),
    earlier calls as assistant `tool_calls`, results as `tool` messages (special tokens defused, as in the loop)."""
    system = "\n\n".join(defuse_special_tokens(m.content) for m in request.messages
                          if m.role == "system" and m.content)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in request.messages:
        if message.role == "user":
            out.append({"role": "user", "content": defuse_special_tokens(message.content)})
        elif message.role == "assistant":
            # "" rather than null beside calls: llama-cpp-python's server refuses a null content (OpenAI takes both).
            entry: dict[str, Any] = {"role": "assistant", "content": defuse_special_tokens(message.content)}
            if message.calls:
                entry["tool_calls"] = [call_entry(upstream_id(c.id), c.name,
                                                  json.dumps(dict(c.arguments), ensure_ascii=False))
                                       for c in message.calls]
            out.append(entry)
        elif message.role == "tool":
            # Neutralised as in emulate mode: a result cannot open reasoning (`<think>`), close the template's
            # `<tool_response>`, or hold a `<tool_call>` block the rescue would read back as the model's call.
            content = neutralise(message.content)
            out.append({"role": "tool", "tool_call_id": upstream_id(message.call_id or ""),
                        "content": f"Error: {content}" if message.is_error else content})
    return out


def upstream_id(call_id: str) -> str:
    """The id the upstream issued for a call an Anthropic client sends back (`toolu_X` was `call_X`)."""
    return "call_" + call_id.removeprefix("toolu_") if call_id.startswith("toolu_") else call_id


def call_entry(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """One assistant `tool_calls` entry."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def arguments_of(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A native call's arguments from their JSON text (tolerantly: the repairs the parser makes for calls in
    text), or why they cannot be read."""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        try:
            value, _ = jsonrepair.loads(text.strip(), autoclose=True)
        except (ValueError, RecursionError, IndexError) as error:
            return None, f"the arguments are not valid JSON ({error})"
    if not isinstance(value, dict):
        return None, "the arguments must be a JSON object"
    return value, None


def checked(step: ModelStep, corrections: Any, call: NativeCall) -> tuple[ToolCall, str | None]:
    """`call` read and validated as in emulate mode: the call, and the observation when it cannot run."""
    arguments, error = arguments_of(call.arguments)
    if arguments is None:
        message = corrections.escalated(f"{error}; send the call again with a JSON object of arguments")
        observation = step.prompts.render(
            "tool_error.j2", tool=call.name, message=neutralise(message), example=corrections.take_example()
        )
        return ToolCall(call.name, {}), observation
    return step.check_call(ToolCall(call.name, arguments), corrections)


#: A fenced block ending the reply (`​```json ... ```​`), which may hold the calls a native parser missed.
_TRAILING_FENCE = re.compile(r"(?ms)^[ \t]*(```|~~~)[\w-]*[ \t]*\n.*?\n[ \t]*\1[ \t]*\s*\Z")


def rescued(text: str, names: set[str]) -> tuple[tuple[ToolCall, ...], str] | None:
    """The calls a reply printed as JSON instead of calling natively (the whole reply, or a fenced block ending
    it), each naming one of `names`; with the text before them. None: the reply is not such calls."""
    candidates = [(text, "")]
    fence = _TRAILING_FENCE.search(text)
    if fence is not None:
        candidates.append((fence.group(0), text[: fence.start()].strip()))
    for candidate, before in candidates:
        calls, _ = reply_calls(candidate)
        if calls and all(call.name in names for call in calls):
            return calls, before
    return None
