"""What every route shares: the API-neutral request the core serves, what the core sends back, and the checks
that turn a client's JSON into them (each failing with a `RequestError` the route shows in its API's own shape)."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..agent.step import ToolDefinition
from ..core.decoding import clean_text
from ..core.errors import RequestError
from ..core.types import Usage
from ..llm import Sampling

Role = Literal["system", "user", "assistant", "tool"]
#: The reasons a reply ends, in OpenAI's words; each route maps them to its own.
Finish = Literal["stop", "length", "tool_calls"]
#: At most this many tools per request: a tool list is rendered into every prompt.
MAX_TOOLS = 512
MAX_NAME = 128
#: The largest token limit accepted (beyond any model's context).
MAX_COUNT = 10_000_000
#: How deeply a tool's schema may nest: deeper ones are refused before anything recurses through them.
MAX_SCHEMA_DEPTH = 48
#: The range of a `seed`: a signed 64-bit integer, as OpenAI takes it (each upstream reduces it to its own width).
SEED_RANGE = (-(2**63), 2**63 - 1)
#: The largest `repeat_penalty` accepted (llama.cpp takes any float; 1 is off).
MAX_REPEAT_PENALTY = 10.0
#: The largest `top_k` accepted (far beyond any vocabulary).
MAX_TOP_K = 1_000_000


@dataclass(frozen=True)
class CallIn:
    """A tool call the model made earlier, as the client sends it back."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ChatMessage:
    """One message of the conversation, whatever API it came in through."""

    role: Role
    content: str = ""
    calls: tuple[CallIn, ...] = ()
    #: For `tool` messages: which call this is the result of.
    call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class ChatRequest:
    """A request in the shape the core serves."""

    model: str
    messages: tuple[ChatMessage, ...]
    #: The tools the client offers the model (run by the client: a definition without a function).
    tools: tuple[ToolDefinition, ...] = ()
    #: `auto`, `none`, `required`, or the name of the one tool the reply must call.
    tool_choice: str = "auto"
    parallel: bool = True
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    #: The client's sampling settings, sent with every upstream call of the request (corrections included).
    sampling: Sampling = field(default_factory=Sampling)
    #: The Responses API's id for the answer, chosen up front, and whether the answer is kept under it for a
    #: later `previous_response_id` (`stored.py`).
    response_id: str | None = None
    keep: bool = False
    #: Kept as an Anthropic thread (`stored.Thread`: its system prompt and tools too) rather than a response.
    thread: bool = False
    #: `response_format`'s JSON Schema (`json_object`: any object): the answer must be one JSON value it allows.
    output_schema: Mapping[str, Any] | None = None
    #: When the request arrived (`time.monotonic()`): Ollama's answers report how long it took.
    received: float = field(default_factory=time.monotonic, compare=False)


@dataclass(frozen=True)
class TextOut:
    """Visible text of the reply (the model's thought when it calls a tool)."""

    text: str


@dataclass(frozen=True)
class ReasoningOut:
    """Reasoning the model did before its reply (a thinking block, `reasoning_content`)."""

    text: str


@dataclass(frozen=True)
class CallOut:
    """A complete tool call that validated against its tool's schema."""

    id: str
    name: str
    #: The arguments as compact JSON text, as every API carries them.
    arguments: str


@dataclass(frozen=True)
class Finished:
    """The end of the reply."""

    reason: Finish
    usage: Usage | None = None
    #: The reply's text as the parser settled it (the thought before the calls, or the answer), for a reply that
    #: is not streamed; None: the text items as they came. Streamed text is append-only, so it may still hold
    #: what only turned out later not to be text (a fence around a call).
    text: str | None = None


Out = TextOut | ReasoningOut | CallOut | Finished


#: Characters per token of the estimate given when the upstream counted nothing (English text and code).
CHARS_PER_TOKEN = 4


def estimated_usage(request: ChatRequest | None, items: Sequence[Out]) -> Usage:
    """The tokens of a request and its reply estimated from their characters, for an API whose schema has no
    "unknown" when the upstream counted nothing (llama-cpp-python's stream): never a made-up 0."""
    sent = sum(len(m.content) + sum(len(json.dumps(dict(c.arguments))) for c in m.calls)
               for m in (request.messages if request else ()))
    out = sum(len(i.text) if isinstance(i, (TextOut, ReasoningOut)) else len(i.arguments)
              for i in items if isinstance(i, (TextOut, ReasoningOut, CallOut)))
    return Usage(prompt_tokens=-(-sent // CHARS_PER_TOKEN), completion_tokens=-(-out // CHARS_PER_TOKEN))


def said(items: list[Out]) -> str:
    """The text of a whole reply: as the parser settled it, else as it streamed."""
    finish = next((i for i in items if isinstance(i, Finished)), None)
    if finish is not None and finish.text is not None:
        return finish.text
    return "".join(i.text for i in items if isinstance(i, TextOut))


# ------------------------------------------------------------------------------------------ checking JSON


def load_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying why it is not one."""
    if not body.strip():
        raise RequestError("the request body is empty; send a JSON object")
    try:
        document = json.loads(body)
    except UnicodeDecodeError:
        raise RequestError("the request body is not UTF-8 text") from None
    except RecursionError:
        raise RequestError("the request body nests too deeply") from None
    except ValueError as error:
        raise RequestError(f"the request body is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise RequestError(f"the request body must be a JSON object, not {type_name(document)}")
    return document


def type_name(value: Any) -> str:
    """The JSON name of `value`'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def text(value: Any, param: str, *, required: bool = True, allow_empty: bool = True) -> str:
    """A string field, cleaned of lone surrogates (a JSON `\\ud800` is legal JSON but no encoder takes it)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise RequestError(f"{param} must be a string, not {type_name(value)}", param=param)
    if not allow_empty and not value:
        raise RequestError(f"{param} must not be empty", param=param)
    # ASCII text holds no surrogate: nothing to clean (the check is a C scan, the cleaning's search a regex one).
    return value if value.isascii() else clean_text(value)[0]


def obj(value: Any, param: str) -> dict[str, Any]:
    """An object field."""
    if not isinstance(value, dict):
        raise RequestError(f"{param} must be an object, not {type_name(value)}", param=param)
    return value


def array(value: Any, param: str) -> list[Any]:
    """An array field."""
    if not isinstance(value, list):
        raise RequestError(f"{param} must be an array, not {type_name(value)}", param=param)
    return value


def flag(value: Any, param: str, default: bool) -> bool:
    """An optional boolean field."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{param} must be a boolean, not {type_name(value)}", param=param)
    return value


def count(value: Any, param: str) -> int | None:
    """An optional positive integer field (a token limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{param} must be an integer, not {type_name(value)}", param=param)
    if not 1 <= value <= MAX_COUNT:
        raise RequestError(f"{param} must be between 1 and {MAX_COUNT:,}, not {value}", param=param)
    return value


def number(value: Any, param: str, low: float, high: float) -> float | None:
    """An optional number field within [low, high] (temperature, top_p)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{param} must be a number, not {type_name(value)}", param=param)
    if not low <= value <= high:
        raise RequestError(f"{param} must be between {low:g} and {high:g}, not {value}", param=param)
    return float(value)


def integer(value: Any, param: str, low: int, high: int) -> int | None:
    """An optional integer field within [low, high] (seed, top_k)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{param} must be an integer, not {type_name(value)}", param=param)
    if not low <= value <= high:
        raise RequestError(f"{param} must be between {low:,} and {high:,}, not {value}", param=param)
    return value


def stops(value: Any, param: str, limit: int = 16) -> tuple[str, ...]:
    """`stop`: a string or an array of non-empty strings."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else array(value, param)
    if len(items) > limit:
        raise RequestError(f"{param} takes at most {limit} strings, not {len(items)}", param=param)
    found = tuple(text(item, f"{param}[{i}]") for i, item in enumerate(items))
    if any(not s for s in found):
        raise RequestError(f"{param} must not contain an empty string", param=param)
    return found


#: What a tool's name may be made of: ASCII letters and digits (what `str.isalnum` takes of ASCII), `_-.:`.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


def tool_name(value: Any, param: str) -> str:
    """A tool's name: a non-empty string of letters, digits, `_`, `-`, `.` or `:` (what the protocol can carry)."""
    name = text(value, param, allow_empty=False)
    if len(name) > MAX_NAME or not _TOOL_NAME.fullmatch(name):
        raise RequestError(
            f"{param} must be 1-{MAX_NAME} ASCII letters, digits, '_', '-', '.' or ':', not {name[:80]!r}",
            param=param,
        )
    return name


def schema(value: Any, param: str) -> dict[str, Any]:
    """A tool's parameters schema: a JSON object describing an object (missing means no arguments)."""
    if value is None:
        return {"type": "object", "properties": {}}
    found = obj(value, param)
    if _depth(found, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise RequestError(f"{param} nests more than {MAX_SCHEMA_DEPTH} levels deep", param=param)
    kind = found.get("type", "object")
    if kind != "object":
        raise RequestError(f"{param} must describe an object (type \"object\"), not {kind!r}", param=param)
    properties = found.get("properties", {})
    if not isinstance(properties, dict):
        raise RequestError(f"{param}.properties must be an object", param=f"{param}.properties")
    return found


def _depth(value: Any, limit: int) -> int:
    """How deeply `value` nests, counted up to just past `limit` (iteratively: no recursion to exhaust)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        deepest = max(deepest, level)
        if level > limit:
            return level
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        pending.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def checked_tools(tools: list[ToolDefinition], param: str) -> tuple[ToolDefinition, ...]:
    """The tool list, with the rules every API shares: bounded, names unique."""
    if len(tools) > MAX_TOOLS:
        raise RequestError(f"{param} has {len(tools)} tools; at most {MAX_TOOLS} are accepted", param=param)
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise RequestError(f"{param} names the tool {tool.name!r} twice", param=param)
        seen.add(tool.name)
    return tuple(tools)


def checked_choice(choice: str, tools: tuple[ToolDefinition, ...], param: str) -> str:
    """`tool_choice` against the tools offered."""
    if choice in ("auto", "none"):
        return choice
    if not tools:
        raise RequestError(f"{param} {choice!r} needs tools, but the request has none", param=param)
    if choice != "required" and choice not in {t.name for t in tools}:
        raise RequestError(f"{param} names {choice!r}, which is not one of the request's tools", param=param)
    return choice


def checked_results(messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
    """Every tool result answers a call an earlier assistant message made (ids never issued are refused)."""
    issued: set[str] = set()
    for index, message in enumerate(messages):
        issued.update(call.id for call in message.calls)
        if message.role == "tool" and message.call_id not in issued:
            raise RequestError(
                f"message {index} is a tool result for the call id {message.call_id!r}, which no earlier "
                "assistant message made", param=f"messages[{index}]",
            )
    return messages


def arguments_object(value: Any, param: str) -> dict[str, Any]:
    """A call's arguments sent back by the client: an object, or JSON text of one."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise RequestError(f"{param} is not valid JSON", param=param) from None
    if not isinstance(value, dict):
        raise RequestError(f"{param} must be a JSON object, not {type_name(value)}", param=param)
    return value
