"""`POST /api/chat`: Ollama's native chat API over the core, so a client that speaks only Ollama (its Python and
JavaScript libraries, apps with an "Ollama" setting) gets native tool calls from any model too.

Ollama's shapes, as its API reference describes them: `stream` is true unless the client says false; a stream is
newline-delimited JSON (`application/x-ndjson`), one object per line, the last with `done: true`, its
`done_reason` and the counts and durations (nanoseconds); a call's `function.arguments` is a JSON object, not
text; a tool result is a `tool` message naming the tool (`tool_name`) rather than a call id, matched here to the
call it answers. An error is `{"error": "..."}` with the HTTP status, or that object as a line once a stream has
begun (Ollama's libraries raise on either). `keep_alive` is accepted and ignored (the upstream keeps its model
loaded as it likes); `format` (JSON mode, structured outputs) is served as `response_format` is on the OpenAI
route.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from ..core.errors import RequestError
from ..core.types import Usage
from .chat import function_tool, sampling
from .http import dumps
from .models import STARTED
from .wire import (
    CallIn,
    CallOut,
    ChatMessage,
    ChatRequest,
    Finished,
    Out,
    ReasoningOut,
    TextOut,
    arguments_object,
    array,
    checked_tools,
    estimated_usage,
    flag,
    integer,
    obj,
    said,
    stops,
    text,
    tool_name,
)

#: The Ollama API version whose shapes these routes follow (`GET /api/version`; clients gate features on it:
#: tool calls need 0.3, `thinking` 0.9).
VERSION = "0.12.0"
MEDIA_TYPE = "application/x-ndjson"
ROLES = ("system", "user", "assistant", "tool")


def error_body(error: RequestError) -> dict[str, Any]:
    """Ollama's error shape: one string."""
    return {"error": error.message}


def stream_error(error: RequestError) -> bytes:
    """An error once the stream has begun: a line holding the error object (Ollama's libraries raise on it)."""
    return line(error_body(error))


def line(document: Any) -> bytes:
    """One NDJSON line."""
    return dumps(document) + b"\n"


def now() -> str:
    """The time as Ollama writes `created_at` (RFC 3339, UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def keepalive(request: ChatRequest) -> bytes:
    """What keeps a silent stream open: a chunk with no content (NDJSON has no comments, and a blank line is not
    JSON to a reader that parses each line); every reader appends its empty text and carries on."""
    return line({"model": request.model, "created_at": now(),
                 "message": {"role": "assistant", "content": ""}, "done": False})


def preload(body: dict[str, Any]) -> dict[str, Any] | None:
    """Ollama's answer to a chat with no messages (it loads the model; clients send it to warm one up), or None
    for a real chat."""
    if body.get("messages") in (None, []):
        return {"model": body.get("model"), "created_at": now(), "message": {"role": "assistant", "content": ""},
                "done_reason": "load", "done": True}
    return None


def parse(body: dict[str, Any]) -> ChatRequest:
    """The request, checked: a `RequestError` names the first field that is wrong."""
    model = text(body.get("model"), "model", allow_empty=False)
    listed = array(body.get("messages"), "messages")
    output_schema = _format(body.get("format"))
    options = obj(body.get("options") or {}, "options")
    tools = checked_tools([function_tool(t, f"tools[{i}]") for i, t in enumerate(array(body.get("tools") or [],
                                                                                         "tools"))], "tools")
    predict = integer(options.get("num_predict"), "options.num_predict", -2, 10_000_000)
    return ChatRequest(
        model=model,
        messages=_conversation(listed),
        tools=tools,
        # -1 is "no limit" and -2 "fill the context" in Ollama's words: the server's own cap either way.
        max_tokens=predict if predict is not None and predict > 0 else None,
        stop=stops(options.get("stop"), "options.stop"),
        stream=flag(body.get("stream"), "stream", True),
        # The Modelfile parameters the upstreams share (others, such as `num_ctx` or `mirostat`, are the
        # engine's own and are ignored).
        sampling=sampling(options, "options."),
        output_schema=output_schema,
    )


def _format(fmt: Any) -> dict[str, Any] | None:
    """Ollama's `format`: `"json"` (JSON mode: any JSON value), a JSON Schema (structured outputs, what its
    libraries send for `format=Model.model_json_schema()`), or nothing (text)."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return {}
    if isinstance(fmt, dict):
        return fmt
    raise RequestError(f'format must be "json" or a JSON Schema object, not {fmt!r}'[:200], param="format")


def _conversation(listed: list[Any]) -> tuple[ChatMessage, ...]:
    """The messages, each tool result tied to the call it answers: by `tool_call_id` where the client sends one,
    else the first unanswered call of the last assistant turn named `tool_name`, else its first unanswered call."""
    found: list[ChatMessage] = []
    waiting: list[CallIn] = []
    for i, value in enumerate(listed):
        where = f"messages[{i}]"
        message = obj(value, where)
        role = message.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}.role must be one of {', '.join(ROLES)}, not {role!r}", param=f"{where}.role")
        if message.get("images"):
            raise RequestError(f"{where}.images: only text is supported by this server", param=f"{where}.images")
        content = text(message.get("content"), f"{where}.content", required=False)
        if role == "assistant":
            calls = tuple(_call_in(call, f"{where}.tool_calls[{j}]", i, j)
                          for j, call in enumerate(array(message.get("tool_calls") or [], f"{where}.tool_calls")))
            waiting = list(calls)
            found.append(ChatMessage("assistant", content, calls=calls))
        elif role == "tool":
            answered = _answered(message, waiting, where)
            waiting.remove(answered)
            found.append(ChatMessage("tool", content, call_id=answered.id))
        else:
            found.append(ChatMessage(role, content))
    return tuple(found)


def _call_in(value: Any, where: str, message: int, index: int) -> CallIn:
    call = obj(value, where)
    function = obj(call.get("function"), f"{where}.function")
    given = call.get("id")
    return CallIn(
        # Ollama's calls carry no id before 0.12; one is made up for matching the results.
        id=text(given, f"{where}.id", allow_empty=False) if given is not None else f"call_{message}_{index}",
        name=tool_name(function.get("name"), f"{where}.function.name"),
        arguments=arguments_object(function.get("arguments") or {}, f"{where}.function.arguments"),
    )


def _answered(message: dict[str, Any], waiting: list[CallIn], where: str) -> CallIn:
    """The call the tool result `message` answers, among those of the last assistant turn still `waiting`."""
    call_id = message.get("tool_call_id")
    name = message.get("tool_name") or message.get("name")
    if call_id is not None:
        call_id = text(call_id, f"{where}.tool_call_id")
        match = next((c for c in waiting if c.id == call_id), None)
        if match is not None:
            return match
    if name is not None:
        name = text(name, f"{where}.tool_name")
        match = next((c for c in waiting if c.name == name), None)
        if match is not None:
            return match
        raise RequestError(f"{where} is a result of the tool {name!r}, but the last assistant message has no "
                           "unanswered call of it", param=f"{where}.tool_name")
    if waiting:
        return waiting[0]
    raise RequestError(f"{where} is a tool result, but the last assistant message has no unanswered tool call",
                       param=where)


# ------------------------------------------------------------------------------------------------ answers


def _calls(calls: list[CallOut], first: int = 0) -> list[dict[str, Any]]:
    """Calls as Ollama writes them: the arguments an object."""
    return [{"id": c.id, "function": {"index": first + i, "name": c.name, "arguments": json.loads(c.arguments)}}
            for i, c in enumerate(calls)]


def _ending(request: ChatRequest, finish: Finished, items: list[Out], first: float | None) -> dict[str, Any]:
    """The last object's fields: why it ended, the counts (estimated when the upstream counted nothing: Ollama's
    schema has no "unknown"), the durations in nanoseconds."""
    usage: Usage = finish.usage if finish.usage is not None else estimated_usage(request, items)
    ended = time.monotonic()
    # Not streamed, the first token's time is not seen here: the whole wait counts as generating. Never 0:
    # clients divide by these for tokens per second.
    began = first if first is not None else request.received
    return {"done": True, "done_reason": "length" if finish.reason == "length" else "stop",
            "total_duration": _nanoseconds(ended - request.received), "load_duration": 0,
            "prompt_eval_count": usage.prompt_tokens, "prompt_eval_duration": _nanoseconds(began - request.received),
            "eval_count": usage.completion_tokens, "eval_duration": _nanoseconds(ended - began)}


def _nanoseconds(seconds: float) -> int:
    return max(1, int(seconds * 1e9))


def answer(request: ChatRequest, items: list[Out], body: dict[str, Any]) -> dict[str, Any]:
    """The whole answer, for a request that is not streamed."""
    message: dict[str, Any] = {"role": "assistant", "content": said(items)}
    thinking = "".join(i.text for i in items if isinstance(i, ReasoningOut))
    if thinking:
        message["thinking"] = thinking
    calls = [i for i in items if isinstance(i, CallOut)]
    if calls:
        message["tool_calls"] = _calls(calls)
    finish = next((i for i in items if isinstance(i, Finished)), Finished("stop"))
    return {"model": request.model, "created_at": now(), "message": message,
            **_ending(request, finish, items, None)}


async def events(request: ChatRequest, items: AsyncIterator[Out], body: dict[str, Any]) -> AsyncIterator[bytes]:
    """The answer as Ollama streams it: a line per piece of text (`message.content`) or reasoning
    (`message.thinking`), the calls together in one line (as Ollama sends them), then the `done` line."""
    seen: list[Out] = []
    calls: list[CallOut] = []
    sent = 0
    first: float | None = None

    def chunk(message: dict[str, Any], **rest: Any) -> bytes:
        return line({"model": request.model, "created_at": now(),
                     "message": {"role": "assistant", "content": "", **message}, **rest})

    async for item in items:
        first = first or time.monotonic()
        if calls and not isinstance(item, CallOut):
            yield chunk({"tool_calls": _calls(calls, sent)}, done=False)
            sent += len(calls)
            calls = []
        if isinstance(item, Finished):
            yield chunk({}, **_ending(request, item, seen, first))
            return
        seen.append(item)
        if isinstance(item, TextOut):
            yield chunk({"content": item.text}, done=False)
        elif isinstance(item, ReasoningOut):
            yield chunk({"thinking": item.text}, done=False)
        elif isinstance(item, CallOut):
            calls.append(item)


# ------------------------------------------------------------------------------------------------- models


def tags(names: list[str]) -> dict[str, Any]:
    """`GET /api/tags`: the served models, as Ollama lists what it has pulled."""
    return {"models": [{"name": name, "model": name, "modified_at": _started(), "size": 0, "digest": _digest(name),
                        "details": _details()} for name in names]}


def show(name: str, context: int | None) -> dict[str, Any]:
    """`POST /api/show`: what a client asks of a model before using it: its capabilities (tools, always: this
    server gives every model tool calls) and its context length, where the upstream's window is known."""
    info: dict[str, Any] = {"general.architecture": "mylm", "general.basename": name}
    if context:
        info["mylm.context_length"] = context
    return {"modelfile": "", "parameters": "", "template": "", "details": _details(), "model_info": info,
            "capabilities": ["completion", "tools"], "modified_at": _started()}


def _details() -> dict[str, Any]:
    return {"parent_model": "", "format": "", "family": "mylm", "families": ["mylm"], "parameter_size": "",
            "quantization_level": ""}


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def _started() -> str:
    return datetime.datetime.fromtimestamp(STARTED, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
