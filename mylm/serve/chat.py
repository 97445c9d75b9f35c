"""`POST /v1/chat/completions`: OpenAI's Chat Completions API over the core, streaming as OpenAI streams."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..agent.step import ToolDefinition
from ..core.errors import RequestError
from ..core.types import Usage
from ..llm import SAMPLING_OPTIONS, Sampling
from .http import dumps, sse, string_literal
from .wire import (
    MAX_REPEAT_PENALTY,
    MAX_TOP_K,
    SEED_RANGE,
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

ROLES = ("system", "developer", "user", "assistant", "tool")
#: What keeps a silent stream open: an SSE comment, which every SSE reader skips (llama.cpp's server sends them).
KEEPALIVE = b": keep-alive\n\n"


def error_body(error: RequestError) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": error.code}}


def stream_error(error: RequestError) -> bytes:
    """An error after the stream has started: an event carrying the error object (the SDK raises on it)."""
    return sse(error_body(error))


def parse(body: dict[str, Any]) -> ChatRequest:
    """The request, checked: a `RequestError` names the first field that is wrong."""
    model = text(body.get("model"), "model", allow_empty=False)
    messages = array(body.get("messages"), "messages")
    if not messages:
        raise RequestError("messages must not be empty", param="messages")
    n = body.get("n")
    if n is not None and n != 1:
        raise RequestError("n must be 1: this server returns one choice", param="n")
    chosen = sampling(body)
    tools = checked_tools([function_tool(t, f"tools[{i}]") for i, t in enumerate(array(body.get("tools") or [], "tools"))],
                          "tools")
    options = body.get("stream_options")
    if options is not None:
        obj(options, "stream_options")
    output_schema = response_schema(body.get("response_format"))
    return ChatRequest(
        model=model,
        messages=checked_results(tuple(_message(m, f"messages[{i}]") for i, m in enumerate(messages))),
        tools=tools,
        tool_choice=checked_choice(_choice(body.get("tool_choice")), tools, "tool_choice"),
        parallel=flag(body.get("parallel_tool_calls"), "parallel_tool_calls", True),
        max_tokens=count(body.get("max_completion_tokens"), "max_completion_tokens")
        or count(body.get("max_tokens"), "max_tokens"),
        stop=stops(body.get("stop"), "stop"),
        stream=flag(body.get("stream"), "stream", False),
        sampling=chosen,
        output_schema=output_schema,
    )


def response_schema(value: Any) -> dict[str, Any] | None:
    """The JSON Schema `response_format` asks the answer to follow (`json_object`: any object), or None for text.
    The OpenAI SDK's `chat.completions.parse(response_format=Model)` sends `json_schema` with the model's schema."""
    return None if value is None else format_schema(obj(value, "response_format"), "response_format", nested=True)


def format_schema(fmt: dict[str, Any], param: str, *, nested: bool) -> dict[str, Any] | None:
    """The JSON Schema an answer format asks for (`json_object`: any object), or None for text; `param` names the
    format in errors. Chat Completions nests the schema (`json_schema.schema`), the Responses API does not
    (`text.format.schema`)."""
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise RequestError(f"{param}.type must be text, json_object or json_schema, not {kind!r}",
                           param=f"{param}.type")
    where = f"{param}.json_schema" if nested else param
    schema = (obj(fmt.get("json_schema"), where) if nested else fmt).get("schema", {})
    if not isinstance(schema, dict):
        raise RequestError(f"{where}.schema must be an object (a JSON Schema)", param=f"{where}.schema")
    return schema


#: The fields `sampling` reads (`Sampling`'s, and vLLM's spelling of one), and what it gives for a request with
#: none of them.
_SAMPLING_FIELDS = frozenset((*SAMPLING_OPTIONS, "repetition_penalty"))
_NO_SAMPLING = Sampling()


def sampling(body: dict[str, Any], where: str = "") -> Sampling:
    """The sampling fields, in OpenAI's ranges; `top_k`, `min_p` and `repeat_penalty` are not OpenAI's but
    llama.cpp's, vLLM's and LM Studio's extensions, which clients send to such servers (the OpenAI SDK's
    `extra_body`); vLLM spells the last `repetition_penalty`, read here as the same field. Ollama's `options`
    carry the same names (`where` is their place in the request, for error messages)."""
    if not _SAMPLING_FIELDS.intersection(body):
        return _NO_SAMPLING  # most requests set none of them: one shared (frozen) value
    repeat = body.get("repeat_penalty")
    name = "repeat_penalty"
    if repeat is None:
        repeat = body.get("repetition_penalty")
        name = "repetition_penalty"
    return Sampling(
        temperature=number(body.get("temperature"), f"{where}temperature", 0, 2),
        top_p=number(body.get("top_p"), f"{where}top_p", 0, 1),
        top_k=integer(body.get("top_k"), f"{where}top_k", 0, MAX_TOP_K),
        seed=integer(body.get("seed"), f"{where}seed", *SEED_RANGE),
        presence_penalty=number(body.get("presence_penalty"), f"{where}presence_penalty", -2, 2),
        frequency_penalty=number(body.get("frequency_penalty"), f"{where}frequency_penalty", -2, 2),
        min_p=number(body.get("min_p"), f"{where}min_p", 0, 1),
        repeat_penalty=number(repeat, f"{where}{name}", 0, MAX_REPEAT_PENALTY),
    )


def function_tool(value: Any, param: str) -> ToolDefinition:
    """An OpenAI function tool (`{"type": "function", "function": {...}}`), as Ollama takes them too."""
    tool = obj(value, param)
    if tool.get("type", "function") != "function":
        raise RequestError(f"{param}.type must be \"function\", not {tool.get('type')!r}", param=f"{param}.type")
    function = obj(tool.get("function"), f"{param}.function")
    return ToolDefinition(
        name=tool_name(function.get("name"), f"{param}.function.name"),
        description=text(function.get("description"), f"{param}.function.description", required=False),
        parameters=schema(function.get("parameters"), f"{param}.function.parameters"),
    )


def _choice(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise RequestError("tool_choice must be auto, none, required or a function", param="tool_choice")
        return value
    choice = obj(value, "tool_choice")
    function = obj(choice.get("function"), "tool_choice.function")
    return tool_name(function.get("name"), "tool_choice.function.name")


def content_text(value: Any, param: str) -> str:
    """A message's content: a string, or an array of text parts (other parts are refused)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return text(value, param)
    parts = array(value, param)
    pieces = []
    for i, part in enumerate(parts):
        part = obj(part, f"{param}[{i}]")
        if part.get("type") not in ("text", "input_text", "output_text"):
            raise RequestError(f"{param}[{i}]: only text content is supported, not {part.get('type')!r}",
                               param=f"{param}[{i}].type")
        pieces.append(text(part.get("text"), f"{param}[{i}].text"))
    return "".join(pieces)


def _message(value: Any, param: str) -> ChatMessage:
    message = obj(value, param)
    role = message.get("role")
    if role not in ROLES:
        raise RequestError(f"{param}.role must be one of {', '.join(ROLES)}, not {role!r}", param=f"{param}.role")
    content = content_text(message.get("content"), f"{param}.content")
    if role in ("system", "developer"):
        return ChatMessage("system", content)
    if role == "user":
        return ChatMessage("user", content)
    if role == "tool":
        call_id = text(message.get("tool_call_id"), f"{param}.tool_call_id", allow_empty=False)
        return ChatMessage("tool", content, call_id=call_id)
    calls = []
    for i, call in enumerate(array(message.get("tool_calls") or [], f"{param}.tool_calls")):
        where = f"{param}.tool_calls[{i}]"
        call = obj(call, where)
        function = obj(call.get("function"), f"{where}.function")
        calls.append(CallIn(
            id=text(call.get("id"), f"{where}.id", allow_empty=False),
            name=tool_name(function.get("name"), f"{where}.function.name"),
            arguments=arguments_object(function.get("arguments"), f"{where}.function.arguments"),
        ))
    return ChatMessage("assistant", content, calls=tuple(calls))


def _usage(usage: Usage | None, request: ChatRequest, items: Sequence[Out]) -> dict[str, int]:
    """The usage as OpenAI reports it; estimated when the upstream counted nothing (llama-cpp-python's stream, or
    a stream closed once its call was complete), never a made-up 0. Not null: smolagents reads
    `usage.prompt_tokens` of every answer, and a null failed its run."""
    if usage is None:
        usage = estimated_usage(request, items)
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}


def _call(index: int, call: CallOut) -> dict[str, Any]:
    return {"index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def answer(request: ChatRequest, items: list[Out], body: dict[str, Any]) -> dict[str, Any]:
    """The whole answer, for a request that is not streamed."""
    content = said(items)
    reasoning = "".join(i.text for i in items if isinstance(i, ReasoningOut))
    calls = [i for i in items if isinstance(i, CallOut)]
    finish = next((i for i in items if isinstance(i, Finished)), Finished("stop"))
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else ""),
                               "refusal": None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{k: v for k, v in _call(i, c).items() if k != "index"} for i, c in enumerate(calls)]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish.reason, "logprobs": None}],
        "usage": _usage(finish.usage, request, items),
    }


#: The ends of the opening chunk (the role) and of the finishing chunks, after a stream's fixed opening: the bytes
#: `chunk` would encode, made once.
_ROLE_CLOSING = b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
_FINISH_CLOSINGS = {reason: b'{},"logprobs":null,"finish_reason":%s}]}\n\n' % dumps(reason)
                    for reason in ("stop", "length", "tool_calls")}


async def events(request: ChatRequest, items: AsyncIterator[Out], body: dict[str, Any]) -> AsyncIterator[bytes]:
    """The answer as OpenAI streams it: a role chunk, content and `reasoning_content` deltas, each call as a
    header chunk (id, name) then its arguments, a chunk with `finish_reason`, the usage chunk if asked, [DONE]."""
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": request.model}
    # Every chunk is `{**head, "choices": [{"index": 0, "delta": ..., "logprobs": null, "finish_reason": ...}]}`:
    # its fixed bytes are made once a stream and only the delta is encoded per chunk (the same bytes as encoding
    # the whole, for a fraction of the work).
    opening = b"data: " + dumps(head)[:-1] + b',"choices":[{"index":0,"delta":'

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return b"%s%s,\"logprobs\":null,\"finish_reason\":%s}]}\n\n" % (opening, dumps(delta), dumps(finish))

    # The content chunk, nearly every chunk: `chunk({"content": text})` written as the encoder writes it (the
    # key, then the string by the encoder's own string function), without building and walking a dict.
    content_opening = opening + b'{"content":'
    content_closing = b'},"logprobs":null,"finish_reason":null}]}\n\n'

    def content(text: str) -> bytes:
        return b"%s%s%s" % (content_opening, string_literal(text).encode("utf-8"), content_closing)

    reasoning_opening = opening + b'{"reasoning_content":'

    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    yield opening + _ROLE_CLOSING
    calls = 0
    seen: list[Out] = []  # for the usage estimate, when it is asked for
    async for item in items:
        if include_usage:
            seen.append(item)
        if isinstance(item, TextOut):
            yield content(item.text)
        elif isinstance(item, ReasoningOut):
            yield b"%s%s%s" % (reasoning_opening, string_literal(item.text).encode("utf-8"), content_closing)
        elif isinstance(item, CallOut):
            header = _call(calls, item)
            header["function"] = {"name": item.name, "arguments": ""}
            yield chunk({"tool_calls": [header]})
            yield chunk({"tool_calls": [{"index": calls, "function": {"arguments": item.arguments}}]})
            calls += 1
        elif isinstance(item, Finished):
            closing = _FINISH_CLOSINGS.get(item.reason)
            yield opening + closing if closing is not None else chunk({}, item.reason)
            if include_usage:
                yield sse({**head, "choices": [], "usage": _usage(item.usage, request, seen)})
    yield sse("[DONE]")
