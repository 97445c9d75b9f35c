"""`POST /v1/responses`: OpenAI's Responses API over the core (the last responses kept for `previous_response_id`:
`stored.py`), streaming its typed
events (`response.output_item.added`, `response.output_text.delta`, `response.function_call_arguments.delta`,
`response.completed`, ...)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..agent.step import ToolDefinition
from ..core.errors import RequestError
from ..core.types import Usage
from ..llm import Sampling
from . import chat
from .chat import content_text, format_schema
from .http import sse
from .stored import ResponseStore
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
    checked_choice,
    checked_results,
    checked_tools,
    count,
    estimated_usage,
    flag,
    number,
    obj,
    said,
    schema,
    text,
    tool_name,
)

logger = logging.getLogger("mylm.serve")
#: Between a namespace and its function's name in the name the model is offered (`multi_agent_v1.spawn_agent`).
SEPARATOR = "."

__all__ = ["Numbering", "answer", "error_body", "events", "parse", "stream_error"]


def error_body(error: RequestError) -> dict[str, Any]:
    """OpenAI's error shape; a prompt beyond the context blames `input`, as the Responses API does."""
    body = chat.error_body(error)
    if error.code == "context_length_exceeded":
        body["error"]["param"] = "input"
    return body


def stream_error(error: RequestError) -> bytes:
    """An error after the stream has started: the Responses API's `error` event."""
    return sse({"type": "error", "code": error.code or error.kind, "message": error.message,
                "param": error_body(error)["error"]["param"]},
               "error")


def parse_count(body: dict[str, Any], stored: ResponseStore | None, model: str) -> ChatRequest:
    """A `/v1/responses/input_tokens` request: a Responses request counted, not answered (`model` when it names
    none, as the API allows), checked as one."""
    return parse({**body, "model": body.get("model") or model, "stream": False, "store": False}, stored)


def parse(body: dict[str, Any], stored: ResponseStore | None = None) -> ChatRequest:
    """The request, checked: a `RequestError` names the first field that is wrong. A `previous_response_id`
    puts the conversation that response ended (from `stored`) before the new input."""
    model = text(body.get("model"), "model", allow_empty=False)
    history: tuple[ChatMessage, ...] = ()
    previous = body.get("previous_response_id")
    if previous is not None:
        previous = text(previous, "previous_response_id", allow_empty=False)
        found = stored.get(previous) if stored is not None else None
        if found is None:
            # OpenAI's answer to an id it does not have (this server keeps the last few, never on disk beyond its run).
            raise RequestError(f"Previous response with id '{previous}' not found.", param="previous_response_id",
                               code="previous_response_not_found")
        history = found
    # The Responses API's sampling fields are these two (no seed, no penalties).
    sampling = Sampling(temperature=number(body.get("temperature"), "temperature", 0, 2),
                        top_p=number(body.get("top_p"), "top_p", 0, 1))
    tools = checked_tools(_tools(array(body.get("tools") or [], "tools")), "tools")
    conversation: list[ChatMessage] = []
    if body.get("instructions") is not None:
        conversation.append(ChatMessage("system", text(body.get("instructions"), "instructions")))
    # Instructions are the request's own: a previous response's are not carried over (as OpenAI does).
    conversation.extend(history)
    given = body.get("input")
    if isinstance(given, str):
        conversation.append(ChatMessage("user", text(given, "input")))
    else:
        items = array(given, "input")
        if not items:
            raise RequestError("input must not be empty", param="input")
        conversation.extend(_items(items))
    output_schema = _format_schema(body.get("text"))
    return ChatRequest(
        model=model,
        messages=checked_results(tuple(conversation)),
        tools=tools,
        output_schema=output_schema,
        tool_choice=checked_choice(_choice(body.get("tool_choice")), tools, "tool_choice"),
        parallel=flag(body.get("parallel_tool_calls"), "parallel_tool_calls", True),
        max_tokens=count(body.get("max_output_tokens"), "max_output_tokens"),
        stream=flag(body.get("stream"), "stream", False),
        sampling=sampling,
        response_id=f"resp_{uuid.uuid4().hex}",
        keep=flag(body.get("store"), "store", True),
    )


def _tools(listed: list[Any]) -> list[ToolDefinition]:
    """The function tools the model is offered: plain ones, and the functions of a namespace (Codex's
    `multi_agent_v1`: `spawn_agent`, `wait_agent`, ...) flattened to `namespace.name`, the name a call of one is
    given back under (`_call_item` splits it again). Tools that are not functions (hosted ones such as web
    search, which the provider runs, not the client; `custom` free-form tools) are not offered: logged, with why."""
    found: list[ToolDefinition] = []
    dropped: list[str] = []
    for i, tool in enumerate(listed):
        tool = obj(tool, f"tools[{i}]")
        kind = tool.get("type")
        if kind == "function":
            found.append(_tool(tool, f"tools[{i}]"))
        elif kind == "namespace":
            space = tool_name(tool.get("name"), f"tools[{i}].name")
            about = text(tool.get("description"), f"tools[{i}].description", required=False)
            for j, inner in enumerate(array(tool.get("tools") or [], f"tools[{i}].tools")):
                inner = obj(inner, f"tools[{i}].tools[{j}]")
                if inner.get("type", "function") != "function":
                    dropped.append(f"{space}.{inner.get('name')} ({inner.get('type')})")
                    continue
                member = _tool(inner, f"tools[{i}].tools[{j}]")
                found.append(ToolDefinition(
                    name=tool_name(f"{space}{SEPARATOR}{member.name}", f"tools[{i}].tools[{j}].name"),
                    description=f"{about}\n{member.description}".strip() if about else member.description,
                    parameters=member.parameters))
        else:
            dropped.append(f"{tool.get('name') or kind} ({kind})")
    if dropped:
        logger.info("Responses tools not offered to the model (only function tools can be called through this "
                    "server; hosted tools run at OpenAI, custom ones take free-form input): %s", ", ".join(dropped))
    return found


def _tool(tool: dict[str, Any], param: str) -> ToolDefinition:
    return ToolDefinition(
        name=tool_name(tool.get("name"), f"{param}.name"),
        description=text(tool.get("description"), f"{param}.description", required=False),
        parameters=schema(tool.get("parameters"), f"{param}.parameters"),
    )


def _choice(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise RequestError("tool_choice must be auto, none, required or a function", param="tool_choice")
        return value
    choice = obj(value, "tool_choice")
    if choice.get("type") != "function":
        raise RequestError("tool_choice: only function tools can be chosen", param="tool_choice.type")
    return _flat(choice, "tool_choice")


def _items(items: list[Any]) -> list[ChatMessage]:
    found: list[ChatMessage] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        item = obj(item, where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise RequestError(f"{where}.role must be user, assistant, system or developer, not {role!r}",
                                   param=f"{where}.role")
            content = content_text(item.get("content"), f"{where}.content")
            found.append(ChatMessage("system" if role == "developer" else role, content))
        elif kind == "function_call":
            call = CallIn(text(item.get("call_id"), f"{where}.call_id", allow_empty=False),
                          _flat(item, where),
                          arguments_object(item.get("arguments"), f"{where}.arguments"))
            if found and found[-1].role == "assistant":
                last = found[-1]
                found[-1] = ChatMessage("assistant", last.content, calls=(*last.calls, call))
            else:
                found.append(ChatMessage("assistant", "", calls=(call,)))
        elif kind == "function_call_output":
            output = item.get("output")
            found.append(ChatMessage("tool", content_text(output, f"{where}.output"),
                                     call_id=text(item.get("call_id"), f"{where}.call_id", allow_empty=False)))
        elif kind == "reasoning":
            continue  # earlier reasoning is not sent back upstream, as the agent never records it
        else:
            raise RequestError(f"{where}.type {kind!r} is not supported", param=f"{where}.type")
    return found


def _flat(item: dict[str, Any], where: str) -> str:
    """The name of the function `item` names, with its namespace if it has one (`multi_agent_v1.spawn_agent`)."""
    name = tool_name(item.get("name"), f"{where}.name")
    space = item.get("namespace")
    if space is None:
        return name
    return tool_name(f"{tool_name(space, f'{where}.namespace')}{SEPARATOR}{name}", f"{where}.name")


def _namespaces(body: dict[str, Any]) -> frozenset[str]:
    """The namespaces the request's tools declared."""
    tools = body.get("tools") or []
    return frozenset(t["name"] for t in tools if isinstance(t, dict) and t.get("type") == "namespace"
                     and isinstance(t.get("name"), str))


def _usage(usage: Usage | None, request: ChatRequest, items: Sequence[Out]) -> dict[str, Any]:
    """The usage as the Responses API reports it; estimated when the upstream counted nothing (see `chat._usage`)."""
    if usage is None:
        usage = estimated_usage(request, items)
    return {"input_tokens": usage.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total_tokens}


def _response(request: ChatRequest, body: dict[str, Any], rid: str, status: str) -> dict[str, Any]:
    return {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": status, "model": request.model,
        "output": [], "parallel_tool_calls": request.parallel, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "instructions": body.get("instructions"), "error": None,
        "incomplete_details": None, "metadata": body.get("metadata") or {}, "temperature": body.get("temperature"),
        "top_p": body.get("top_p"), "max_output_tokens": request.max_tokens, "previous_response_id": body.get("previous_response_id"),
        "store": request.keep, "text": {"format": {"type": "text"}}, "truncation": "disabled", "usage": None,
    }


def _message_item(mid: str, words: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": words, "annotations": []}] if status == "completed" else []
    return {"type": "message", "id": mid, "status": status, "role": "assistant", "content": content}


def _reasoning_item(rid: str, thought: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": rid, "summary": [],
            "content": [{"type": "reasoning_text", "text": thought}] if thought else []}


def _call_item(call: CallOut, arguments: str, status: str = "completed",
               namespaces: frozenset[str] = frozenset()) -> dict[str, Any]:
    item = {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"), "call_id": call.id,
            "name": call.name, "arguments": arguments, "status": status}
    space, _, name = call.name.partition(SEPARATOR)
    if name and space in namespaces:
        item.update(name=name, namespace=space)  # a namespace's function, as the client declared it
    return item


def _ending(finish: Finished) -> tuple[str, dict[str, Any] | None]:
    if finish.reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def answer(request: ChatRequest, items: list[Out], body: dict[str, Any]) -> dict[str, Any]:
    """The whole response, for a request that is not streamed."""
    rid = request.response_id or f"resp_{uuid.uuid4().hex}"
    output: list[dict[str, Any]] = []
    thought = "".join(i.text for i in items if isinstance(i, ReasoningOut))
    if thought:
        output.append(_reasoning_item(f"rs_{uuid.uuid4().hex}", thought))
    words = said(items)
    if words:
        output.append(_message_item(f"msg_{uuid.uuid4().hex}", words))
    spaces = _namespaces(body)
    output.extend(_call_item(i, i.arguments, namespaces=spaces) for i in items if isinstance(i, CallOut))
    finish = next((i for i in items if isinstance(i, Finished)), Finished("stop"))
    status, incomplete = _ending(finish)
    return {**_response(request, body, rid, status), "output": output, "incomplete_details": incomplete,
            "usage": _usage(finish.usage, request, items)}


class Numbering:
    """One streamed response's id and event numbers (`sequence_number`), shared by its events and the keep-alives
    written between them, so that every event a client reads is numbered one above the last."""

    def __init__(self, request: ChatRequest, body: dict[str, Any]) -> None:
        self.request, self.body = request, body
        self.rid = request.response_id or f"resp_{uuid.uuid4().hex}"
        self.next = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        self.next += 1
        return sse({"type": kind, "sequence_number": self.next - 1, **fields}, kind)

    def keepalive(self) -> bytes:
        """What keeps a silent stream open: the API's own `response.in_progress` event again. An SSE comment is
        not enough for a client that times out on events (Codex reconnects after 300 s without one: its SSE
        reader yields no item for a comment); every reader takes another `response.in_progress` as a status it
        already knows."""
        return self.event("response.in_progress", response=_response(self.request, self.body, self.rid,
                                                                     "in_progress"))


async def events(request: ChatRequest, items: AsyncIterator[Out], body: dict[str, Any],
                 numbering: Numbering | None = None) -> AsyncIterator[bytes]:
    """The response as the Responses API streams it, each event numbered (`sequence_number`) by `numbering`
    (shared with the stream's keep-alives)."""
    numbering = numbering or Numbering(request, body)
    rid = numbering.rid
    output: list[dict[str, Any]] = []
    event = numbering.event

    yield event("response.created", response=_response(request, body, rid, "in_progress"))
    yield event("response.in_progress", response=_response(request, body, rid, "in_progress"))
    # The item being streamed: its kind ("message" or "reasoning"), id and text so far.
    current: tuple[str, str, list[str]] | None = None

    def close_current() -> list[bytes]:
        nonlocal current
        if current is None:
            return []
        kind, iid, parts = current
        index, whole = len(output), "".join(parts)
        current = None
        if kind == "message":
            part = {"type": "output_text", "text": whole, "annotations": []}
            item = _message_item(iid, whole)
            output.append(item)
            return [event("response.output_text.done", item_id=iid, output_index=index, content_index=0, text=whole),
                    event("response.content_part.done", item_id=iid, output_index=index, content_index=0, part=part),
                    event("response.output_item.done", output_index=index, item=item)]
        item = _reasoning_item(iid, whole)
        output.append(item)
        return [event("response.reasoning_text.done", item_id=iid, output_index=index, content_index=0,
                      text=whole),
                event("response.output_item.done", output_index=index, item=item)]

    seen: list[Out] = []  # for the usage estimate
    async for item in items:
        seen.append(item)
        if isinstance(item, (TextOut, ReasoningOut)):
            kind = "message" if isinstance(item, TextOut) else "reasoning"
            if current is None or current[0] != kind:
                for done in close_current():
                    yield done
                iid = f"{'msg' if kind == 'message' else 'rs'}_{uuid.uuid4().hex}"
                current = (kind, iid, [])
                index = len(output)
                if kind == "message":
                    yield event("response.output_item.added", output_index=index,
                                item=_message_item(iid, "", "in_progress"))
                    yield event("response.content_part.added", item_id=iid, output_index=index, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": []})
                else:
                    yield event("response.output_item.added", output_index=index,
                                item={"type": "reasoning", "id": iid, "summary": [], "content": []})
            current[2].append(item.text)
            delta = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
            yield event(delta, item_id=current[1], output_index=len(output), content_index=0, delta=item.text)
        elif isinstance(item, CallOut):
            for done in close_current():
                yield done
            index = len(output)
            call_item = _call_item(item, "", "in_progress", _namespaces(body))
            yield event("response.output_item.added", output_index=index, item=call_item)
            yield event("response.function_call_arguments.delta", item_id=call_item["id"], output_index=index,
                        delta=item.arguments)
            yield event("response.function_call_arguments.done", item_id=call_item["id"], output_index=index,
                        arguments=item.arguments)
            finished = _call_item(item, item.arguments, namespaces=_namespaces(body))
            output.append(finished)
            yield event("response.output_item.done", output_index=index, item=finished)
        elif isinstance(item, Finished):
            for done in close_current():
                yield done
            status, incomplete = _ending(item)
            final = {**_response(request, body, rid, status), "output": output, "incomplete_details": incomplete,
                     "usage": _usage(item.usage, request, seen)}
            yield event("response.completed" if status == "completed" else "response.incomplete", response=final)


def _format_schema(value: Any) -> dict[str, Any] | None:
    """The JSON Schema `text.format` asks the answer to follow, or None for text: the Responses API puts the
    schema in the format itself (`{"type": "json_schema", "name": ..., "schema": ...}`), as the OpenAI SDK's
    `responses.parse(text_format=Model)` sends it."""
    fmt = None if value is None else obj(value, "text").get("format")
    return None if fmt is None else format_schema(obj(fmt, "text.format"), "text.format", nested=False)
