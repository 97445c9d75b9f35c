"""`POST /v1/messages`: Anthropic's Messages API over the core, streaming Anthropic's named events."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from ..agent.step import ToolDefinition
from ..core.errors import RequestError
from ..core.types import Usage
from ..llm import Sampling
from .chat import format_schema
from .http import sse
from .stored import ResponseStore, Thread
from .wire import (
    MAX_TOP_K,
    CallIn,
    CallOut,
    ChatMessage,
    ChatRequest,
    Finished,
    Out,
    ReasoningOut,
    TextOut,
    array,
    checked_choice,
    checked_results,
    checked_tools,
    count,
    estimated_usage,
    flag,
    integer,
    number,
    obj,
    said,
    schema,
    stops,
    text,
    tool_name,
)

#: OpenAI's error types (and HTTP statuses) in Anthropic's words.
_KINDS = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
    504: "timeout_error",
}
_STOPS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
#: What keeps a silent stream open between blocks: Anthropic's own `ping` event (after `message_start` only).
KEEPALIVE = sse({"type": "ping"}, "ping")


class Blocks:
    """The content block a streamed message has open, shared by its events and the keep-alives between them."""

    def __init__(self) -> None:
        self.index = -1
        self.open_kind: str | None = None

    def start(self, kind: str) -> bytes:
        """Open the next block of `kind` (`text` or `thinking`)."""
        self.index += 1
        self.open_kind = kind
        block = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": ""}
        return sse({"type": "content_block_start", "index": self.index, "content_block": block},
                   "content_block_start")

    def delta(self, text: str) -> bytes:
        """More of the open block's text."""
        delta = ({"type": "text_delta", "text": text} if self.open_kind == "text"
                 else {"type": "thinking_delta", "thinking": text})
        return sse({"type": "content_block_delta", "index": self.index, "delta": delta}, "content_block_delta")

    def stop(self) -> bytes:
        """Close the open block."""
        self.open_kind = None
        return sse({"type": "content_block_stop", "index": self.index}, "content_block_stop")

    def keepalive(self) -> bytes:
        """What keeps a silent stream open: an empty delta of the open block, or, before any block, a `thinking`
        block opened with one. Anthropic's SDKs swallow `ping`, so a client that times out on the events its SDK
        yields saw nothing: Claude Code aborts and resends a request after 300 s without one (a 1.5B on two
        cores reads its 17k-token prompt for about that long). Between blocks, a `ping`."""
        if self.open_kind is not None:
            return self.delta("")
        if self.index == -1:
            return self.start("thinking") + self.delta("")
        return KEEPALIVE


def error_body(error: RequestError) -> dict[str, Any]:
    """Anthropic's error shape (with `details.error_code` for a thread's errors, which its SDK acts on)."""
    kind = _KINDS.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    body: dict[str, Any] = {"type": kind, "message": error.message}
    if error.code is not None and error.code.startswith("thread_"):
        body["details"] = {"error_code": error.code}
    return {"type": "error", "error": body}


def stream_error(error: RequestError) -> bytes:
    """An error after the stream has started: Anthropic's `error` event."""
    return sse(error_body(error), "error")


def parse(body: dict[str, Any], stored: ResponseStore | None = None) -> ChatRequest:
    """The request, checked: a `RequestError` names the first field that is wrong. A `thread` keeps the
    conversation in `stored` under the reply's id; continued, the thread's system prompt, tools and messages go
    before the new messages."""
    thread = _thread(body.get("thread"), body, stored)
    model = text(body.get("model"), "model", allow_empty=False)
    max_tokens = count(body.get("max_tokens"), "max_tokens")
    if max_tokens is None:
        raise RequestError("max_tokens: Field required", param="max_tokens")
    listed = array(body.get("messages"), "messages")
    if not listed and (thread is None or not thread.messages):
        raise RequestError("messages: at least one message is required", param="messages")
    # Anthropic's sampling fields and ranges (no seed, no penalties).
    sampling = Sampling(temperature=number(body.get("temperature"), "temperature", 0, 1),
                        top_p=number(body.get("top_p"), "top_p", 0, 1),
                        top_k=integer(body.get("top_k"), "top_k", 0, MAX_TOP_K))
    tools = checked_tools([_tool(t, f"tools.{i}") for i, t in enumerate(array(body.get("tools") or [], "tools"))],
                          "tools")
    choice, parallel = _choice(body.get("tool_choice"))
    conversation: list[ChatMessage] = []
    system = body.get("system")
    if thread is not None:  # a `continue`: what the thread holds comes first
        conversation.extend(thread.messages)
        tools = thread.tools
    elif system is not None:
        conversation.append(ChatMessage("system", _blocks_text(system, "system")))
    for i, message in enumerate(listed):
        conversation.extend(_message(message, f"messages.{i}"))
    threaded = body.get("thread") is not None
    return ChatRequest(
        response_id=f"msg_{uuid.uuid4().hex}" if threaded else None,
        keep=threaded,
        thread=threaded,
        model=model,
        messages=checked_results(tuple(conversation)),
        tools=tools,
        tool_choice=checked_choice(choice, tools, "tool_choice"),
        parallel=parallel,
        max_tokens=max_tokens,
        stop=stops(body.get("stop_sequences"), "stop_sequences"),
        stream=flag(body.get("stream"), "stream", False),
        sampling=sampling,
        output_schema=_output_schema(body),
    )


def parse_count(body: dict[str, Any]) -> ChatRequest:
    """A `/v1/messages/count_tokens` request: a Messages request without `max_tokens` (nor `stream`, nor a
    thread), checked as one."""
    if body.get("thread") is not None:
        raise RequestError("thread: count_tokens counts a whole conversation; send it without a thread",
                           param="thread")
    return parse({**body, "max_tokens": 1, "stream": False})


def _thread(value: Any, body: dict[str, Any], stored: ResponseStore | None) -> Thread | None:
    """What a `thread` continues (None: no thread, or a new one). Anthropic's server-held conversation (the
    Anthropic SDK's tool runner asks for one): `{"type": "create"}` keeps this request's conversation under the
    reply's id; `{"type": "continue", "previous_message_id": ...}` sends only the new messages, the system prompt
    and tools being the thread's. An id this server does not hold (it keeps the last few, in memory) is answered
    `thread_not_found`, on which the SDK sends the whole conversation again under a new thread."""
    if value is None:
        return None
    thread = obj(value, "thread")
    kind = text(thread.get("type"), "thread.type", allow_empty=False)
    if kind == "create":
        return None
    if kind != "continue":
        raise RequestError(f"thread.type must be 'create' or 'continue', not {kind[:40]!r}", param="thread.type")
    previous = text(thread.get("previous_message_id"), "thread.previous_message_id", allow_empty=False)
    repeated = [name for name in ("system", "tools") if body.get(name) is not None]
    if repeated:
        raise RequestError(f"{repeated[0]}: a thread's continue takes it from the thread; leave it out",
                           param=repeated[0], code="thread_unsupported_request")
    found = stored.thread(previous) if stored is not None else None
    if found is None:
        raise RequestError(f"thread.previous_message_id: no thread holds the message '{previous[:80]}' here",
                           status=404, param="thread.previous_message_id", code="thread_not_found")
    return found


def _output_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema the answer must follow: `output_config.format` (what the Anthropic SDK's
    `messages.parse(output_format=Model)` sends), or the beta's top-level `output_format`; None for text."""
    config = body.get("output_config")
    if config is not None and obj(config, "output_config").get("format") is not None:
        return format_schema(obj(config["format"], "output_config.format"), "output_config.format", nested=False)
    beta = body.get("output_format")
    return None if beta is None else format_schema(obj(beta, "output_format"), "output_format", nested=False)


def _tool(value: Any, param: str) -> ToolDefinition:
    tool = obj(value, param)
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise RequestError(f"{param}.type: only custom (client) tools are supported, not {kind!r}",
                           param=f"{param}.type")
    return ToolDefinition(
        name=tool_name(tool.get("name"), f"{param}.name"),
        description=text(tool.get("description"), f"{param}.description", required=False),
        parameters=schema(tool.get("input_schema"), f"{param}.input_schema"),
    )


def _choice(value: Any) -> tuple[str, bool]:
    """`tool_choice` in the core's words, and whether several calls may come in one reply."""
    if value is None:
        return "auto", True
    choice = obj(value, "tool_choice")
    kind = choice.get("type")
    parallel = not flag(choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use", False)
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool":
        return tool_name(choice.get("name"), "tool_choice.name"), parallel
    raise RequestError(f"tool_choice.type must be auto, any, tool or none, not {kind!r}", param="tool_choice.type")


def _blocks_text(value: Any, param: str) -> str:
    """Text content: a string, or text blocks."""
    if isinstance(value, str):
        return text(value, param)
    pieces = []
    for i, block in enumerate(array(value, param)):
        block = obj(block, f"{param}.{i}")
        if block.get("type") != "text":
            raise RequestError(f"{param}.{i}: only text blocks are supported here, not {block.get('type')!r}",
                               param=f"{param}.{i}.type")
        pieces.append(text(block.get("text"), f"{param}.{i}.text"))
    return "\n\n".join(pieces) if param == "system" else "".join(pieces)


def _message(value: Any, param: str) -> list[ChatMessage]:
    message = obj(value, param)
    role = message.get("role")
    if role == "system":
        # Claude Code sends system text inside the messages as well: it joins the system prompt's.
        return [ChatMessage("system", _blocks_text(message.get("content"), f"{param}.content"))]
    if role not in ("user", "assistant"):
        raise RequestError(f"{param}.role must be user, assistant or system, not {role!r}", param=f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [ChatMessage(role, text(content, f"{param}.content"))]
    texts: list[str] = []
    calls: list[CallIn] = []
    results: list[ChatMessage] = []
    for i, block in enumerate(array(content, f"{param}.content")):
        where = f"{param}.content.{i}"
        block = obj(block, where)
        kind = block.get("type")
        if kind == "text":
            texts.append(text(block.get("text"), f"{where}.text"))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # earlier reasoning is not sent back upstream, as the agent never records it
        elif kind == "tool_use" and role == "assistant":
            arguments = block.get("input", {})
            calls.append(CallIn(text(block.get("id"), f"{where}.id", allow_empty=False),
                                tool_name(block.get("name"), f"{where}.name"), obj(arguments, f"{where}.input")))
        elif kind == "tool_result" and role == "user":
            output = block.get("content")
            results.append(ChatMessage(
                "tool", "" if output is None else _blocks_text(output, f"{where}.content"),
                call_id=text(block.get("tool_use_id"), f"{where}.tool_use_id", allow_empty=False),
                is_error=flag(block.get("is_error"), f"{where}.is_error", False),
            ))
        else:
            raise RequestError(f"{where}: a {role} message cannot carry a {kind!r} block here",
                               param=f"{where}.type")
    if role == "assistant":
        return [ChatMessage("assistant", "".join(texts), calls=tuple(calls))]
    # Results first: they answer the previous assistant turn; text after them is the user's next words.
    return [*results, *([ChatMessage("user", "".join(texts))] if texts or not results else [])]


def _usage(usage: Usage | None, request: ChatRequest | None = None, items: list[Out] | None = None
           ) -> dict[str, int]:
    """The usage as Anthropic reports it. Its schema has no "unknown", so when the upstream counted nothing
    (llama-cpp-python's stream) it is estimated (`wire.estimated_usage`), never a made-up 0 (docs/serve.md)."""
    if usage is None:
        usage = estimated_usage(request, items or ())
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}


def _start(request: ChatRequest) -> dict[str, Any]:
    return {"id": request.response_id or f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": request.model,
            "content": [], "stop_reason": None, "stop_sequence": None}


def _tool_id(call: CallOut) -> str:
    # Reversible (`native.upstream_id`), so `--tools native` hands an upstream back the ids it issued; an id
    # without the prefix (an upstream's own, passed through) is kept as it is.
    return "toolu_" + call.id.removeprefix("call_") if call.id.startswith("call_") else call.id


def as_sent(items: Sequence[Out]) -> list[Out]:
    """`items` with each call under the id the client was given (`toolu_...`), as a thread keeps them: the
    client's results name that id."""
    return [replace(i, id=_tool_id(i)) if isinstance(i, CallOut) else i for i in items]


def answer(request: ChatRequest, items: list[Out], body: dict[str, Any]) -> dict[str, Any]:
    """The whole message, for a request that is not streamed."""
    content: list[dict[str, Any]] = []
    reasoning = "".join(i.text for i in items if isinstance(i, ReasoningOut))
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    words = said(items)
    if words:
        content.append({"type": "text", "text": words})
    for item in items:
        if isinstance(item, CallOut):
            content.append({"type": "tool_use", "id": _tool_id(item), "name": item.name,
                            "input": json.loads(item.arguments)})
    finish = next((i for i in items if isinstance(i, Finished)), Finished("stop"))
    return {**_start(request), "content": content, "stop_reason": _STOPS[finish.reason],
            "usage": _usage(finish.usage, request, items)}


async def events(request: ChatRequest, items: AsyncIterator[Out], body: dict[str, Any],
                 blocks: Blocks | None = None) -> AsyncIterator[bytes]:
    """The message as Anthropic streams it: `message_start`, one content block per kind of output (thinking,
    text, each `tool_use` with its `input_json_delta`), `message_delta` with the stop reason, `message_stop`.
    `blocks` is shared with the stream's keep-alives (a thinking block one of them opened goes on here)."""
    blocks = blocks or Blocks()
    opening = {"input_tokens": 0, "output_tokens": 0}  # Anthropic's own message_start counts nothing yet either
    yield sse({"type": "message_start", "message": {**_start(request), "usage": opening}}, "message_start")
    seen: list[Out] = []
    async for item in items:
        if not isinstance(item, Finished):
            seen.append(item)
        if isinstance(item, (TextOut, ReasoningOut)):
            kind = "text" if isinstance(item, TextOut) else "thinking"
            if blocks.open_kind != kind:
                if blocks.open_kind is not None:
                    yield blocks.stop()
                yield blocks.start(kind)
            yield blocks.delta(item.text)
        elif isinstance(item, CallOut):
            if blocks.open_kind is not None:
                yield blocks.stop()
            blocks.index += 1
            tool_block = {"type": "tool_use", "id": _tool_id(item), "name": item.name, "input": {}}
            yield sse({"type": "content_block_start", "index": blocks.index, "content_block": tool_block},
                      "content_block_start")
            delta = {"type": "input_json_delta", "partial_json": item.arguments}
            yield sse({"type": "content_block_delta", "index": blocks.index, "delta": delta}, "content_block_delta")
            yield sse({"type": "content_block_stop", "index": blocks.index}, "content_block_stop")
        elif isinstance(item, Finished):
            if blocks.open_kind is not None:
                yield blocks.stop()
            yield sse({"type": "message_delta", "delta": {"stop_reason": _STOPS[item.reason], "stop_sequence": None},
                       "usage": _usage(item.usage, request, seen)}, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")
