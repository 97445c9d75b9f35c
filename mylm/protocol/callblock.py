"""Decode the body of one tool block into a call, or into a message telling the model exactly what to fix.

Formats read, all only where the reading is unambiguous: the canonical `<name>` + `<parameters>` (JSON or XML
children), a bare `{"name", "arguments"}` object (Hermes), Qwen `<function=x><parameter=k>`, Claude
`<invoke name=x><parameter name=k>`, a tool name used as the tag (`<read_file><path>…</path></read_file>`), and a
Python call with keyword arguments (`read_file(path="a")`).
"""

from __future__ import annotations

import re
from typing import Any

from ..core.types import ToolCall
from . import markup
from .blockscan import skip
from .corrections import EXAMPLE, JSON_HOWTO, BlockError, cut_off, example, prefer_canonical
from .jsoncalls import call_object
from .jsonrepair import JSONRepairError, loads
from .pythonic import python_call
from .tags import (
    ARG_KEY_CLOSE,
    ARG_KEY_OPEN,
    ARG_VALUE_CLOSE,
    ARG_VALUE_OPEN,
    FUNCTION_CALLS_OPEN,
    FUNCTION_OPEN,
    INVOKE_OPEN,
    KIND_TAGS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
)

#: The block kinds the stream parser opens, with their opening and closing tags (for messages).
PARAMS_TAGS = ("parameters", "arguments")

_NAME_OPEN = re.compile(r"<name\s*>", re.IGNORECASE)
_NAME_CLOSE = re.compile(r"</name\s*>", re.IGNORECASE)
_PARAMS_OPEN = re.compile(r"<(?:parameters|arguments)\s*>", re.IGNORECASE)
_PARAMS_EMPTY = re.compile(r"<(?:parameters|arguments)\s*/>", re.IGNORECASE)
_FUNCTION = re.compile(r"<function=([^>\s]{1,128})\s*>")
_INVOKE = re.compile(r"<invoke\s+name\s*=\s*[\"']([^\"'<>]{1,128})[\"']\s*>")
_ELEMENT = re.compile(r"<([A-Za-z_][\w.:-]{0,127})\s*>")
_PY_CALL = re.compile(r"[A-Za-z_][\w.]*\s*\(")
_TOOL_CALL_OPENERS = re.compile(r"(?:<tool_call>\s*)+")
_LAYOUT = re.compile(r"(?:\s|<tool_code>)*", re.IGNORECASE)
_FENCE_LINE = re.compile(r"(?:`{3,}|~{3,})[^\n]*(?:\n|$)")
_RESERVED = frozenset({"name", "tool_code", "tool_call", "think", "thinking", "observation", "final_answer",
                       "function_calls", "invoke", "parameter", *PARAMS_TAGS})
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type", "function"})
#: What no tool name holds. Spaces are let through: a name with spaces is a call to a tool that does not exist
#: (`<name>python3 test_stats.py</name>`, a command written as the tool's name, as Qwen2.5-Coder 0.5B did), which
#: the runner corrects by naming the real tools, or the call that runs such a command.
_BAD_NAME = re.compile(r"[\n\r\t<>{}\"`]")

def decode_block(body: str, kind: str = "tool_code", *, at_end: bool = False) -> tuple[ToolCall | None, str | None]:
    """Decode a block body (the text between its tags) into `(call, None)` or `(None, message for the model)`.

    `at_end` means the block was never closed (the reply ended, or the model moved on without its end tag):
    the call then counts only if its parameters are complete.
    """
    try:
        call, span = _decode(body, kind, at_end)
        _reject_dtd(body, span, kind)
    except BlockError as error:
        return None, error.message
    except (RecursionError, MemoryError):
        return None, f"Your {KIND_TAGS[kind][0]} block is nested too deeply to read. " + JSON_HOWTO
    return call, None


def decode_calls(body: str, kind: str = "tool_code", *, at_end: bool = False, several: bool = True
                 ) -> tuple[tuple[ToolCall, ...], str | None]:
    """Decode a block body that may hold several `<name>`/`<parameters>` pairs: `(calls, None)` or `((), error)`.

    Each pair is one call, in order; a pair that cannot be used makes the whole block a correction (nothing in
    a block runs out of sequence). A `<name>` inside a JSON string or an argument value is data, not a pair.
    """
    if not several:  # the scanner saw no `<name>` after complete parameters: one call at most
        call, error = decode_block(body, kind, at_end=at_end)
        return ((call,) if call is not None else ()), error
    pieces: list[str] = []
    rest = body
    while len(pieces) < 100:
        split = _second_pair(rest)
        if split is None:
            break
        pieces.append(rest[:split])
        rest = rest[split:]
    pieces.append(rest)
    calls: list[ToolCall] = []
    for i, piece in enumerate(pieces):
        call, error = decode_block(piece, kind, at_end=at_end and i == len(pieces) - 1)
        if call is None:
            return (), error
        calls.append(call)
    return tuple(calls), None


_PARAMS_CLOSE_RE = re.compile(r"\s*</(?:parameters|arguments)\s*>", re.IGNORECASE)


def _two_names(body: str) -> bool:
    found = 0
    for spelling in ("<name", "<Name", "<NAME"):
        i = body.find(spelling)
        while i >= 0 and found < 2:
            found += 1
            i = body.find(spelling, i + 1)
    return found >= 2


def _second_pair(body: str) -> int | None:
    """Where a second `<name>` pair starts, after the first pair's parameters end; None if there is none."""
    if not _two_names(body):
        return None  # the common case, decided by plain `find` (no regex over a large argument)
    first = _NAME_OPEN.search(body)
    if first is None or _NAME_OPEN.search(body, first.end()) is None:
        return None
    name_close = _NAME_CLOSE.search(body, first.end())
    params = None if name_close is None else _PARAMS_OPEN.search(body, name_close.end())
    if params is None:
        return None
    i = _skip_layout(body, params.end())
    if i < len(body) and body[i] in '{["':
        try:
            _, end = loads(body, i, autoclose=True)
        except JSONRepairError:
            return None
    elif body.startswith("<", i):
        end = markup.read_children(body, i).end
    else:
        return None
    closed = _PARAMS_CLOSE_RE.match(body, end)
    end = closed.end() if closed else end
    following = _NAME_OPEN.search(body, end)
    if following is None or body[end : following.start()].strip(" \t\r\n`~"):
        return None  # only layout may separate two pairs
    return following.start()


def _decode(body: str, kind: str, at_end: bool) -> tuple[ToolCall, tuple[int, int] | None]:
    i = _skip_layout(body, 0)
    if kind == "function":
        return _qwen(body, i, at_end)
    if kind in ("invoke", "function_calls"):
        return _claude(body, i, at_end, kind)
    if body.startswith(TOOL_CALL_OPEN, i):
        start = skip(_TOOL_CALL_OPENERS, body, i)
        inner_end = body.find(TOOL_CALL_CLOSE, start)
        inner = body[start : inner_end if inner_end >= 0 else len(body)]
        call, span = _decode(inner, "tool_call", at_end and inner_end < 0)
        return call, (span[0] + start, span[1] + start) if span else None
    if body.startswith(FUNCTION_OPEN, i):
        return _qwen(body, i, at_end)
    if body.startswith(FUNCTION_CALLS_OPEN, i) or body.startswith(INVOKE_OPEN, i):
        return _claude(body, i, at_end, kind)
    if body.startswith("{", i) or body.startswith('"', i):
        return _json_call(body, i, at_end, kind)
    glm = _GLM_NAME.match(body, i)
    if glm is not None and (kind == "tool_call" or ARG_KEY_OPEN in body):
        return _glm(body, glm, at_end, kind), None
    name_open = _NAME_OPEN.search(body)
    if name_open is not None:
        return _canonical(body, name_open, at_end, kind)
    element = _ELEMENT.match(body, i)
    if element is not None and element.group(1).lower() not in _RESERVED:
        return _named_element(body, element, at_end, kind)
    if _PY_CALL.match(body, i):
        call = python_call(body[i:], kind)
        return ToolCall(_clean_name(call.name, kind), call.arguments), None
    if at_end and not body[i:].strip():
        raise BlockError(cut_off(kind, "the tool name"))
    raise BlockError(
        f"Your {KIND_TAGS[kind][0]} block has no <name>…</name>, so nothing was run. Write the tool's name in "
        "<name></name>, then its arguments as one JSON object in <parameters></parameters>, exactly like this:\n"
        + EXAMPLE + "\nIf you only meant to mention the tag in your answer, write it in backticks: `<tool_code>`."
    )


def _skip_layout(text: str, i: int) -> int:
    """Skip blanks, code-fence lines (```` ```xml ````) and repeated openers that models wrap around calls."""
    while True:
        i = skip(_LAYOUT, text, i)
        fence = _FENCE_LINE.match(text, i)
        if fence is None:
            return i
        i = fence.end()


def _canonical(body: str, name_open: re.Match[str], at_end: bool, kind: str) -> tuple[ToolCall, tuple[int, int] | None]:
    name_close = _NAME_CLOSE.search(body, name_open.end())
    if name_close is None:
        if at_end:
            raise BlockError(cut_off(kind, "the tool name"))
        raise BlockError(f"Your <name> is never closed. Write <name>TOOL_NAME</name> on one line:\n{EXAMPLE}")
    name = _clean_name(markup.text_value(body[name_open.end() : name_close.start()]), kind)
    after = name_close.end()
    params = _PARAMS_OPEN.search(body, after) or _PARAMS_OPEN.search(body, 0, name_open.start())
    if params is None and (_PARAMS_EMPTY.match(body, _skip_layout(body, after))
                           or _PARAMS_EMPTY.search(body, 0, name_open.start())):
        return ToolCall(name, {}), None  # `<parameters/>`: no arguments
    if params is not None:
        args, span = _params(body, params.end(), at_end, name, kind)
        return ToolCall(name, args), span
    i = _skip_layout(body, after)
    if i >= len(body):
        if at_end:
            raise BlockError(cut_off(kind, "the parameters", name))
        return ToolCall(name, {}), None
    if body[i] in '{["':
        args, span = _params(body, i, at_end, name, kind)
        return ToolCall(name, args), span
    if body.startswith("</", i):
        return ToolCall(name, {}), None
    if body[i] == "<":
        return ToolCall(name, _children(body, i, at_end, name, kind)), None
    raise BlockError(
        f"After </name> in your call to {name}, write the arguments in <parameters></parameters> as a JSON object "
        f"(found {body[i:i + 40].strip()!r}). Nothing was run. Write:\n" + example(name)
    )


def _clean_name(raw: str, kind: str) -> str:
    name = raw.strip()
    if len(name) > 2 and name[0] == name[-1] and name[0] in "\"'`":
        name = name[1:-1].strip()  # a quoted or back-ticked name: the quotes are not part of it
    if not name:
        raise BlockError(f"The <name></name> in your {KIND_TAGS[kind][0]} block is empty, so nothing was run. "
                         "Put the name of one tool from <tool_definitions> in it.")
    if len(name) > 128 or _BAD_NAME.search(name):
        shown = name[:60] + ("…" if len(name) > 60 else "")
        raise BlockError(f"{shown!r} is not a tool name, so nothing was run. Write exactly one tool name from "
                         "<tool_definitions> in <name></name>, with no spaces or markup.")
    return name


def _params(text: str, start: int, at_end: bool, name: str, kind: str) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """Read the arguments that start at `text[start:]`: JSON (maybe fenced or in CDATA) or XML children."""
    i = _skip_layout(text, start)
    if text.startswith(markup.CDATA_OPEN, i):
        inner = i + len(markup.CDATA_OPEN)
        close = text.find(markup.CDATA_CLOSE, inner)
        region = text[inner : close if close >= 0 else len(text)]
        args, _ = _params(region, 0, at_end and close < 0, name, kind)
        return args, (i, close if close >= 0 else len(text))
    if i >= len(text):
        if at_end:
            raise BlockError(cut_off(kind, "the parameters", name))
        return {}, None
    c = text[i]
    if c in '{["':
        value, end = _load(text, i, at_end, name, kind)
        return _as_arguments(value, name), (i, end)
    if text.startswith("</", i):
        return {}, None
    if c == "<":
        return _children(text, i, at_end, name, kind), None
    raise BlockError(
        f"The <parameters> of your call to {name} are neither a JSON object nor <argument>value</argument> "
        f"elements (found {text[i:i + 40].strip()!r}), so nothing was run. {JSON_HOWTO} Write:\n" + example(name)
    )


def _load(text: str, i: int, at_end: bool, name: str, kind: str) -> tuple[Any, int]:
    """Decode one JSON value leniently; close brackets only when an explicit end tag shows it was finished."""
    try:
        value, end = loads(text, i)
    except JSONRepairError as error:
        stopped_at_tag = error.pos < len(text) and text.startswith("</", error.pos)
        if error.incomplete and not error.in_string and (stopped_at_tag or not at_end):
            try:
                value, end = loads(text, i, autoclose=True)
            except JSONRepairError:
                raise _json_error(error, text, at_end, name, kind) from None
        elif not error.incomplete and "&" in text[i : error.pos + 1]:
            value, end = _load_escaped(text, i, error, at_end, name, kind)
        else:
            raise _json_error(error, text, at_end, name, kind) from None
    _check_single_value(text, end, name, kind)
    return value, end


def _load_escaped(text: str, i: int, error: JSONRepairError, at_end: bool, name: str, kind: str) -> tuple[Any, int]:
    """JSON whose quotes were XML-escaped (`{&quot;a&quot;: 1}`): decode the entities, since it cannot parse without."""
    stop = text.find("<", i)
    stop = len(text) if stop < 0 else stop
    decoded = markup.decode_entities(text[i:stop])
    if decoded == text[i:stop]:
        raise _json_error(error, text, at_end, name, kind)
    try:
        value, _ = loads(decoded, 0, autoclose=stop < len(text) or not at_end)
    except JSONRepairError:
        raise _json_error(error, text, at_end, name, kind) from None
    return value, stop


def _check_single_value(text: str, end: int, name: str, kind: str) -> None:
    """After the value, allow layout, a closing fence, `]]>` and stray closing brackets; refuse a second value."""
    i = end
    while i < len(text):
        i = _skip_layout(text, i)
        if text.startswith(markup.CDATA_CLOSE, i):
            i += len(markup.CDATA_CLOSE)
        elif i < len(text) and text[i] in "}]":
            i += 1
        else:
            break
    if i < len(text) and text[i] in '{["':
        raise BlockError(
            f"Your call to {name} has more than one JSON value in its parameters, so nothing was run. Put all "
            'arguments in one object, e.g. {"a": 1, "b": 2}. To make several calls, write one '
            f"{KIND_TAGS[kind][0]} block per call."
        )


def _as_arguments(value: Any, name: str) -> dict[str, Any]:
    if isinstance(value, str):  # double-encoded: a JSON string that holds the object
        try:
            inner, end = loads(value, 0)
        except JSONRepairError:
            inner, end = None, 0
        if isinstance(inner, dict) and not value[end:].strip():
            return inner
    if not isinstance(value, dict):
        raise BlockError(
            f"The parameters of your call to {name} must be one JSON object mapping argument names to values, "
            f"not a {_json_type(value)}, so nothing was run. Write e.g. {{\"command\": \"ls -la\"}}."
        )
    return value


def _json_type(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _json_error(error: JSONRepairError, text: str, at_end: bool, name: str, kind: str) -> BlockError:
    if error.incomplete and at_end:
        if error.in_string and text.rstrip().endswith(KIND_TAGS["tool_code"][1]):
            return BlockError(
                "Your reply stopped at </tool_code> inside a JSON string: that text always ends a block, so the "
                f"call to {name} was cut short and nothing was run. Inside JSON strings write it as <\\/tool_code> "
                "(JSON reads \\/ as /). Write the whole block again."
            )
        where = "a JSON string" if error.in_string else "the parameters JSON"
        return BlockError(cut_off(kind, where, name))
    hint = f" ({error.hint})" if error.hint else ""
    return BlockError(
        f"The parameters of your call to {name} are not valid JSON: {error.what} at line {error.lineno}, column "
        f"{error.colno}{hint}. Nothing was run. {JSON_HOWTO}"
    )


def _children(text: str, i: int, at_end: bool, name: str, kind: str) -> dict[str, Any]:
    read = markup.read_children(text, i)
    if read.stray:
        raise BlockError(
            f"The arguments of your call to {name} contain {read.stray!r}, which is neither a JSON object nor an "
            f"<argument>value</argument> element, so nothing was run. {JSON_HOWTO}"
        )
    if read.unclosed and at_end:
        raise BlockError(cut_off(kind, f"the value of <{read.items[-1].key}>", name))
    if at_end and read.end >= len(text):
        # No end tag after the last argument: the reply may have been cut between two arguments.
        raise BlockError(cut_off(kind, "the arguments (their end tag is missing)", name))
    args: dict[str, Any] = {}
    for child in read.items:
        value = markup.trim_value(markup.text_value(child.value))
        if child.key in args:  # a repeated element is a list
            previous = args[child.key]
            args[child.key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            args[child.key] = value
    return args


def _json_call(body: str, i: int, at_end: bool, kind: str) -> tuple[ToolCall, tuple[int, int]]:
    """A call written as one JSON object: `{"name": …, "arguments": {…}}` (Hermes, Llama, OpenAI shapes)."""
    value, end = _load(body, i, at_end, "this tool", kind)
    if isinstance(value, str):
        value = _as_arguments(value, "this tool")
    value = call_object(value) or value
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or set(value) - _CALL_KEYS:
        raise BlockError(
            f"Your {KIND_TAGS[kind][0]} block holds a JSON object that is not a call of the form "
            '{"name": "TOOL_NAME", "arguments": {...}}, so nothing was run. Write the tool name in <name></name> '
            "and the arguments in <parameters></parameters>:\n" + EXAMPLE
        )
    name = _clean_name(value["name"], kind)
    args = value.get("arguments", value.get("parameters"))
    return ToolCall(name, _as_arguments(args, name) if args not in (None, {}) else {}), (i, end)


#: Other agents' names for a call's parts: LangChain's `action`/`action_input`, `tool`/`tool_input`, …
def _qwen(body: str, i: int, at_end: bool) -> tuple[ToolCall, None]:
    """Qwen3-Coder: `<function=name><parameter=key>value</parameter>…</function>`."""
    match = _FUNCTION.match(body, i)
    if match is None:
        raise BlockError("Your <function=…> tag has no tool name. " + prefer_canonical())
    name = _clean_name(match.group(1), "function")
    return ToolCall(name, _children(body, match.end(), at_end, name, "function")), None


_GLM_NAME = re.compile(r"([A-Za-z_][\w.:-]{0,127})[ \t]*(?=\r?\n|<arg_key>|</|$)")
_GLM_STRAY = re.compile(r"(?:\s|</arg_key>|</arg_value>)*")


def _glm(body: str, name_match: re.Match[str], at_end: bool, kind: str) -> ToolCall:
    """GLM: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>`; stray end tags skipped."""
    name = _clean_name(name_match.group(1), kind)
    args: dict[str, Any] = {}
    pos = skip(_GLM_STRAY, body, name_match.end())
    while pos < len(body):
        if not body.startswith(ARG_KEY_OPEN, pos):
            raise BlockError(f"Your call to {name} has {body[pos:pos + 40]!r} where <arg_key> should be. "
                             + prefer_canonical())
        key_end = body.find(ARG_KEY_CLOSE, pos)
        key = body[pos + len(ARG_KEY_OPEN) : key_end if key_end >= 0 else len(body)]
        if key_end < 0 or "<" in key:
            if at_end:
                raise BlockError(cut_off(kind, "an argument name", name))
            raise BlockError(f"An <arg_key> in your call to {name} is not closed. " + prefer_canonical())
        pos = skip(_GLM_STRAY, body, key_end)
        if not body.startswith(ARG_VALUE_OPEN, pos):
            raise BlockError(f"The argument {key.strip()!r} of your call to {name} has no <arg_value>. "
                             + prefer_canonical())
        value_start = pos + len(ARG_VALUE_OPEN)
        value_end = markup.value_end(body, ARG_VALUE_CLOSE, value_start)
        if value_end < 0:
            if at_end:
                raise BlockError(cut_off(kind, f"the value of {key.strip()!r}", name))
            following = body.find(ARG_KEY_OPEN, value_start)
            value_end = following if following >= 0 else len(body)
        args[key.strip()] = markup.trim_value(markup.text_value(body[value_start:value_end]))
        pos = skip(_GLM_STRAY, body, value_end)
    return ToolCall(name, args)


def _claude(body: str, i: int, at_end: bool, kind: str) -> tuple[ToolCall, None]:
    """`<function_calls><invoke name="x"><parameter name="k">v</parameter></invoke></function_calls>`."""
    invokes = list(_INVOKE.finditer(body, i))
    if not invokes:
        if at_end:
            raise BlockError(cut_off(kind, "the tool name"))
        raise BlockError("Your <function_calls> block has no <invoke name=\"…\">. " + prefer_canonical())
    if len(invokes) > 1:
        raise BlockError("Write one call per block, so nothing was run. " + prefer_canonical())
    name = _clean_name(invokes[0].group(1), kind)
    return ToolCall(name, _children(body, invokes[0].end(), at_end, name, kind)), None


def _named_element(
    body: str, element: re.Match[str], at_end: bool, kind: str
) -> tuple[ToolCall, tuple[int, int] | None]:
    """`<read_file><path>a</path></read_file>`: the tool's name used as the tag (Cline / Roo Code habit)."""
    name = _clean_name(element.group(1), kind)
    close = body.rfind(f"</{name}>")
    if close < 0 and at_end:
        raise BlockError(cut_off(kind, f"the <{name}> element", name))
    inner = body[element.end() : close if close >= 0 else len(body)]
    i = _skip_layout(inner, 0)
    if i >= len(inner):
        return ToolCall(name, {}), None
    if inner[i] in '{["':
        args, span = _params(inner, i, at_end and close < 0, name, kind)
        offset = element.end()
        return ToolCall(name, args), (span[0] + offset, span[1] + offset) if span else None
    if inner[i] == "<":
        return ToolCall(name, _children(inner, i, at_end and close < 0, name, kind)), None
    raise BlockError(
        f"Your call <{name}>…</{name}> does not say which argument {inner[i:i + 40].strip()!r} is, so nothing was "
        "run. Write:\n" + example(name)
    )


def _reject_dtd(body: str, span: tuple[int, int] | None, kind: str) -> None:
    """Refuse entity and DTD declarations in the block's markup (not inside JSON strings or CDATA)."""
    positions = markup.dtd_positions(body)
    if not positions:
        return
    cdata = markup.cdata_spans(body)
    for pos in positions:
        in_json = span is not None and span[0] <= pos < span[1]
        if not in_json and not any(a <= pos < b for a, b in cdata):
            raise BlockError(
                f"Your {KIND_TAGS[kind][0]} block declares a DTD or an entity (<!DOCTYPE …> / <!ENTITY …>). mylm "
                "never expands entities, so nothing was run. Write every argument value literally; text that "
                "contains markup goes in a JSON string or in <![CDATA[…]]>."
            )


