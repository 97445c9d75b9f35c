"""Calls written as JSON in the text, the form capable small models write most when no grammar holds them.

Qwen2.5-Coder (and most Hermes-trained models) answer a tool question with prose and then

    ```json
    {"name": "read_file", "arguments": {"path": "hello.txt"}}
    ```

(issues 27 and 31). With the run's tools known (`tools=`), such a JSON call is read as a call when all of these
hold, and is text otherwise:

1. **It names a tool in play** and is nothing but a call: an object in one of the field's shapes (`name` with
   `arguments`/`parameters`/`args`/`input`, `{"function": {"name", "arguments"}}`, `{"tool", "tool_input"}`,
   LangChain's `{"action", "action_input"}`, optionally `id`/`type`), or a list of them, or
   `{"tool_calls": [...]}`; the arguments an object (or a JSON string holding one) whose keys are all arguments
   of that tool. Any other key, an unknown tool or an argument the tool does not have makes it data.
2. **It stands alone**: the whole content of a fence labelled `json` (or `jsonc`, `json5`, or unlabelled), or a
   JSON value that starts a line (at most three spaces in) and ends one, after prose. A JSON call inside a
   sentence, a fence of another language, a blockquote or an indented code block is text. A reply that is
   nothing but unfenced JSON stays a correction (the parser's `reply_calls`): that is what a tool output echoed
   back looks like, and `neutralise` cannot defuse plain JSON.
3. **It ends the reply**: after the first such call comes nothing but blanks and more such calls. A fence
   followed by prose is an example (as for a `<tool_code>` block in a fence). How many of the calls count is
   the parser's `multiple_calls`.
4. **It is not presented as quoted** (see `quoting`): the sentence that introduces it does not say it is what
   the user, a file or an observation contains, nor that the model will not run it.

The prose before the first call is the thought.

Streaming: `CallHold` sits between the parser and the text events. Text that may turn out to be such a call (a
`json` fence from its opening line, a line starting with `{` or `[`) is held back from display until it is
decided (a fence of another language, content that is not a call, prose after it), and at the end of the reply
it is shown only if it was not a call. It reads the shown text once, line by line, so its cost per chunk is a
few string searches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.types import ToolCall
from .jsonrepair import JSONRepairError, loads
from .quoting import presented_as_quoted
from .registry import known_tool

#: Fence labels whose content may be a JSON call (labels that name a call are read by `normalise`).
JSON_LABELS = frozenset({"", "json", "jsonc", "json5"})
_MAX_CALLS = 100
_FENCE_LINE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*(?:\n|\Z)")
_JSON_STOPS = re.compile(r'[{}\[\]"]')
_STRING_STOPS = re.compile(r'["\\]')
_FREE, _FENCE, _BARE, _BETWEEN = range(4)
#: A line start that may begin a fence or a JSON value (or that cannot be told yet): the only ones read closely.
_MAY_MATTER = re.compile(r"\n(?=[ ]{0,3}(?:[`~{\[]|\Z))")
_MAY_CLOSE = re.compile(r"\n(?=[ ]{0,3}(?:[`~]|\Z))")  # inside a fence of another language: only its closer


NAME_KEYS = ("name", "action", "tool", "tool_name", "function", "function_name")
ARGS_KEYS = ("arguments", "parameters", "action_input", "tool_input", "input", "args", "tool_args", "params")


def call_object(value: Any) -> dict[str, Any] | None:
    """A JSON call in any common shape, as `{"name", "arguments"}` (plus its other keys); None if it is not one.

    Read: `{"name", "arguments"|"parameters"}` (Hermes, Llama, OpenAI's `{"type": "function", …}` and
    `{"function": {…}}`), LangChain's `{"action", "action_input"}`, `{"tool", "tool_input"}`,
    `{"tool_name", "parameters"}`, and any of them wrapped as `{"tool_call": {…}}`.
    """
    if not isinstance(value, dict):
        return None
    if len(value) == 1 and isinstance(next(iter(value.values())), dict) and next(iter(value)) in (
            "tool_call", "function_call", "tool_use", "call"):
        value = next(iter(value.values()))
    function = value.get("function")
    if isinstance(function, Mapping) and "name" not in value:
        value = {**function, **{k: v for k, v in value.items() if k != "function"}}
    names = [k for k in NAME_KEYS if isinstance(value.get(k), str)]
    args = [k for k in ARGS_KEYS if k in value]
    if not names or len(args) > 1 or set(value) - {*NAME_KEYS, *ARGS_KEYS, "id", "type"}:
        return None
    if names[0] != "name" and not args:
        return None  # {"tool": "x"} alone is too little to call a tool; {"name": "x"} keeps its old reading
    out = {k: v for k, v in value.items() if k not in (*names, *args)}
    out["name"] = value[names[0]]
    if args:
        out["arguments"] = value[args[0]]
    return out


def json_calls(content: str, tools: Mapping[str, frozenset[str]]) -> tuple[ToolCall, ...] | None:
    """The calls `content` (a fence's content, or a JSON value on lines of its own) is, or None if it is not
    entirely calls of tools in play (rule 1 above)."""
    text = content.strip()
    if not text or text[0] not in "{[" or len(text) > 1_000_000:
        return None
    try:
        value, end = loads(text)
    except JSONRepairError:
        return None
    if text[end:].strip():
        return None
    if isinstance(value, dict) and set(value) == {"tool_calls"}:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > _MAX_CALLS:
        return None
    calls = []
    for item in items:
        call = _one(item, tools)
        if call is None:
            return None
        calls.append(call)
    return tuple(calls)


def _one(item: Any, tools: Mapping[str, frozenset[str]]) -> ToolCall | None:
    shape = call_object(item)
    if shape is None or "arguments" not in shape or not isinstance(shape["name"], str):
        return None
    name = known_tool(shape["name"], tools)
    args = shape["arguments"]
    if isinstance(args, str):  # arguments given as a JSON string (OpenAI's wire form)
        try:
            args, _ = loads(args.strip())
        except JSONRepairError:
            return None
    if name is None or not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        return None
    known = tools[name]
    if known and not set(args) <= known:
        return None  # data that merely has a "name" key, or a call with arguments the tool does not take
    return ToolCall(name, args, raw=json.dumps(item, ensure_ascii=False))


@dataclass(frozen=True)
class Found:
    """JSON calls that end a text: the calls, and where the first of them starts."""

    calls: tuple[ToolCall, ...]
    start: int


def find_json_calls(text: str, tools: Mapping[str, frozenset[str]]) -> Found | None:
    """The JSON calls that end `text` under the rules above, or None."""
    hold = CallHold(tools)
    hold.show(text)
    hold.finish()
    if not hold.calls:
        return None
    start = len(text) - len(hold.held)
    if not text[:start].strip() and not hold.fenced:
        return None  # untagged JSON and nothing else: what an echoed tool output looks like (a correction)
    if presented_as_quoted(text[:start]):
        return None
    return Found(tuple(hold.calls), start)


class CallHold:
    """Decides, line by line, which shown text may still be a JSON call, and holds it back.

    `show(text)` returns what can be displayed now; `held` is what is held back; `calls` are the candidate calls
    the held text holds so far (all of it is calls and blanks when `calls` is non-empty and nothing is pending).
    `release()` gives up holding (something else decided the turn) and returns the held text.
    """

    def __init__(self, tools: Mapping[str, frozenset[str]]) -> None:
        self.tools = tools
        self._state = _FREE
        self._line = ""  # FREE: the current line so far, while it may still start a fence or a JSON value
        self._line_start = True  # FREE: whether the next character starts a line
        self._other: tuple[str, int] | None = None  # FREE: inside a fence of another kind (char, length)
        self.held = ""
        self._at = 0  # in `held`: where the candidate being read starts (FENCE, BARE) or where reading resumes
        self._fence: tuple[str, int] | None = None
        self._scan = 0  # BARE: how far the JSON value was scanned; FENCE: how far closers were looked for
        self._depth = 0
        self._in_string = False
        self._value_end: int | None = None  # BARE: where the JSON value ended, once it has
        self.calls: list[ToolCall] = []
        #: In the middle of a line of plain text: text without a newline can be shown as it is (the caller may
        #: test this and skip the call).
        self.quiet = False
        self.fenced = False  # the first call held was in a fence
        self._final = False

    # ---------------------------------------------------------------------------------------------- public

    def show(self, text: str) -> str:
        """Take the next shown text; return the part that can be displayed now."""
        if self.quiet and "\n" not in text:
            return text  # the middle of a line of prose: the common case
        out: list[str] = []
        self._feed(text, out)
        self.quiet = self._state == _FREE and not self._line and not self._line_start
        return "".join(out)

    def finish(self) -> str:
        """The end of the text: decide what was pending; return what can be displayed (the rest is `held`)."""
        self._final = True
        out: list[str] = []
        self._feed("", out)
        if self._state != _BETWEEN:
            out.append(self.release())
        return "".join(out)

    def release(self) -> str:
        """Give up holding: return the held text (and the current line), back to plain reading."""
        text = self.held + self._line
        self._reset()
        self.quiet = True
        return text

    # ---------------------------------------------------------------------------------------------- engine

    def _reset(self) -> None:
        self._state, self.held, self._line, self._at, self._fence = _FREE, "", "", 0, None
        self.calls, self.fenced = [], False
        self._line_start = False  # what follows continues the text just released
        self._other = None

    def _feed(self, text: str, out: list[str]) -> None:
        if self._state == _FREE:
            self._free(self._line + text, out)
        else:
            self.held += text
            self._held(out)

    def _free(self, text: str, out: list[str]) -> None:
        """Plain text: show it, up to a line that may start a JSON call."""
        self._line = ""
        pos, n = 0, len(text)
        while pos < n:
            if not self._line_start:
                # Straight to the next line that may matter (a C-level search): most lines start with prose.
                found = (_MAY_MATTER if self._other is None else _MAY_CLOSE).search(text, pos)
                if found is None:
                    out.append(text[pos:])
                    return
                out.append(text[pos : found.end()])
                pos, self._line_start = found.end(), True
                continue
            # At a line start: decide what the line is once enough of it is there.
            stripped = len(text) - len(text[pos:].lstrip(" "))
            first = text[stripped] if stripped < n else ""
            if stripped - pos > 3 or (first and first not in "`~{["):
                self._line_start = False
                continue
            nl = text.find("\n", pos)
            if first in "`~" and first:
                if nl < 0 and not self._final:
                    self._line = text[pos:]  # a fence line not yet whole
                    return
                line = text[pos : nl + 1 if nl >= 0 else n]
                fence = _FENCE_LINE.fullmatch(line)
                if fence is None:
                    self._line_start = False
                    continue
                run, label = fence.group(1), fence.group(2).strip().lower()
                if self._other is not None:
                    if run[0] == self._other[0] and len(run) >= self._other[1] and not label:
                        self._other = None  # the other fence closes
                elif label in JSON_LABELS and not self._final:
                    self._start(text[pos:], _FENCE, out, fence=(run[0], len(run)), head=len(line))
                    return
                elif label not in JSON_LABELS:
                    self._other = (run[0], len(run))
                out.append(line)
                pos = pos + len(line)
                self._line_start = line.endswith("\n")
                continue
            if not first:  # blanks so far: the line may still start a call
                if self._final:
                    out.append(text[pos:])
                else:
                    self._line = text[pos:]
                return
            if self._other is not None or self._final:
                self._line_start = False
                continue
            self._start(text[pos:], _BARE, out, head=stripped - pos)
            return

    def _start(self, text: str, state: int, out: list[str], *, fence: tuple[str, int] | None = None,
               head: int = 0) -> None:
        self._state, self.held, self._at, self._fence = state, text, 0, fence
        self._scan, self._depth, self._in_string, self._value_end = head, 0, False, None
        self._held(out)

    def _held(self, out: list[str]) -> None:
        """Held text: read the candidate being held, then what follows it."""
        while True:
            if self._state == _FENCE:
                end = self._fence_end()
            elif self._state == _BARE:
                end = self._bare_end()
            else:
                end = self._between()
            if end is None:  # more text is needed
                return
            if end < 0:  # not a call after all: show everything held so far, read on as plain text
                rest_at = -end - 1
                text, rest = self.held[:rest_at], self.held[rest_at:]
                self._reset()
                out.append(text)
                # Read on from there; never from the same line start again (it was just decided).
                self._line_start = text.endswith("\n")
                if rest:
                    self._free(rest, out)
                return

    def _fence_end(self) -> int | None:
        """FENCE: find the closing line; then the content decides. Returns None (wait), -(i+1) (release up to
        i), or 0 (a call: go on reading what follows)."""
        held, fence = self.held, self._fence
        assert fence is not None
        pos = self._scan
        while True:
            nl = held.find("\n", pos)
            line_end = nl + 1 if nl >= 0 else (len(held) if self._final else -1)
            if line_end < 0:
                self._scan = pos
                return None
            line = held[pos:line_end]
            match = _FENCE_LINE.fullmatch(line)
            if match is not None and match.group(1)[0] == fence[0] and len(match.group(1)) >= fence[1] \
                    and not match.group(2).strip():
                head = held.find("\n", self._at) + 1
                calls = json_calls(held[head:pos], self.tools)
                if calls is None:
                    return -(line_end + 1)
                self.fenced = self.fenced or not self.calls
                self.calls.extend(calls)
                self._state, self._at = _BETWEEN, line_end
                return 0
            if line_end >= len(held) and self._final:
                return -(len(held) + 1)  # never closed
            pos = line_end

    def _bare_end(self) -> int | None:
        """BARE: find where the JSON value ends (strings and brackets followed), then the rest of its line."""
        held, pos = self.held, self._scan
        while self._value_end is None:
            if self._in_string:
                match = _STRING_STOPS.search(held, pos)
                if match is None or match.group() == "\\" and match.end() >= len(held):
                    self._scan = len(held) if match is None else match.start()
                    return -(len(held) + 1) if self._final else None
                if match.group() == "\\":
                    pos = match.end() + 1  # the escaped character, whatever it is
                else:
                    pos, self._in_string = match.end(), False
                continue
            match = _JSON_STOPS.search(held, pos)
            if match is None:
                self._scan = len(held)
                return -(len(held) + 1) if self._final else None
            ch, pos = match.group(), match.end()
            if ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth <= 0:
                    self._value_end = pos
        end = self._value_end
        self._scan = end
        nl = held.find("\n", end)
        if nl < 0 and not self._final:
            return None
        line_end = nl + 1 if nl >= 0 else len(held)
        if held[end:line_end].strip():
            return -(end + 1)  # the line goes on after the value: JSON inside prose
        calls = json_calls(held[self._at : end], self.tools)
        if calls is None:
            return -(line_end + 1)
        self.calls.extend(calls)
        self._state, self._at = _BETWEEN, line_end
        return 0

    def _between(self) -> int | None:
        """BETWEEN: after calls, only blanks and more calls may follow."""
        held, pos = self.held, self._at
        while True:
            rest = held[pos:]
            blank = len(rest) - len(rest.lstrip())
            if blank == len(rest):
                self._at = pos
                return None  # blanks so far: wait (at the end, the calls stand)
            nl = held.rfind("\n", 0, pos + blank)
            line_start = nl + 1 if nl >= 0 else 0
            indent = pos + blank - line_start
            first = held[pos + blank]
            if indent > 3 or first not in "`~{[":
                return -(line_start + 1)  # prose after the calls: they were examples
            if first in "{[":
                self._state, self._at, self._scan = _BARE, line_start, pos + blank
                self._depth, self._in_string, self._value_end = 0, False, None
                return 0
            nl = held.find("\n", line_start)
            if nl < 0 and not self._final:
                self._at = pos
                return None
            line = held[line_start : nl + 1 if nl >= 0 else len(held)]
            fence = _FENCE_LINE.fullmatch(line)
            if fence is None or fence.group(2).strip().lower() not in JSON_LABELS:
                return -(line_start + 1)
            self._state, self._at, self._fence = _FENCE, line_start, (fence.group(1)[0], len(fence.group(1)))
            self._scan = line_start + len(line)
            return 0
