"""The streaming parser that pulls `<tool_code>` calls, reasoning and the answer out of raw model text.

One incremental engine serves both streaming (`StreamParser.feed`) and whole text (`parse_completion`), so the
result never depends on how the text was chunked. Text that might be the start of a tag is held back until it
is decided, so no fragment like `<tool_` is ever shown. Work is linear in the input: every scan resumes where
the previous one stopped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Union

from .types import ToolCall

TOOL_OPEN = "<tool_code>"
TOOL_CLOSE = "</tool_code>"
OBSERVATION_OPEN = "<observation>"
FINAL_OPEN = "<final_answer>"
FINAL_CLOSE = "</final_answer>"
THINK_TAGS = ("think", "thinking")

#: Tags that change the parser's state when they appear in plain text.
_OUTSIDE_TAGS = (TOOL_OPEN, OBSERVATION_OPEN, FINAL_OPEN, FINAL_CLOSE, "<think>", "<thinking>", "</think>", "</thinking>")
_LONGEST_TAG = max(len(t) for t in _OUTSIDE_TAGS)
#: Stop strings that may arrive half-written at the very end of a stream.
_HALF_STOPS = (TOOL_CLOSE, OBSERVATION_OPEN)


@dataclass(frozen=True)
class TextDelta:
    """Visible text, safe to show as it streams."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Reasoning text (inside `<think>`); shown as thought, never executed."""

    text: str


@dataclass(frozen=True)
class CallParsed:
    """A complete tool call, in order."""

    call: ToolCall


ParseEvent = Union[TextDelta, ReasoningDelta, CallParsed]


@dataclass(frozen=True)
class ParsedTurn:
    """What one model turn means: the calls to run, or the final answer, or an error to send back."""

    tool_calls: tuple[ToolCall, ...] = ()
    #: The answer when the turn has no call: `<final_answer>` content if present, else the visible text.
    final_answer: str | None = None
    #: Set when the turn is unusable; written for the model, telling it exactly what to fix.
    error: str | None = None
    #: Visible text outside blocks and reasoning (the model's thought when it calls a tool).
    thought: str = ""
    reasoning: str = ""
    #: The text the verdict was reached on (everything after a fabricated `<observation>` is dropped).
    text: str = ""
    #: The text ended inside reasoning that was never closed (e.g. a server stop fired mid-thought).
    unclosed_reasoning: bool = False


def format_tool_call(call: ToolCall) -> str:
    """Render a call in the canonical form the system prompt teaches (and history records)."""
    arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
    return f"{TOOL_OPEN}\n<name>{call.name}</name>\n<parameters>\n{arguments}\n</parameters>\n{TOOL_CLOSE}"


@dataclass
class _Block:
    """State of one `<tool_code>` body being scanned: its end is found structurally, outside JSON strings."""

    parts: list[str] = field(default_factory=list)
    in_params: bool = False
    json_depth: int = 0
    json_started: bool = False
    json_done: bool = False
    in_string: bool = False

    @property
    def text(self) -> str:
        return "".join(self.parts)


_JSON_SPECIAL = re.compile(r'["{}\[\]\\]')
_STRING_SPECIAL = re.compile(r'["\\]')


class StreamParser:
    """Feed model text chunk by chunk; get display-safe events; read `result` after `close()`."""

    def __init__(self, *, multiple_calls: bool = True) -> None:
        #: With one call per turn, the turn ends where the first call ends; later text is not part of it.
        self._multiple_calls = multiple_calls
        self._buf = ""
        self._state = "outside"  # outside | think | block | final | discard
        self._think_close = ""
        self._block: _Block | None = None
        self._calls: list[ToolCall] = []
        self._errors: list[str] = []
        self._thought: list[str] = []
        self._reasoning: list[str] = []
        self._final: list[str] | None = None
        self._consumed: list[str] = []
        self._closed = False
        self.result: ParsedTurn | None = None

    # -------------------------------------------------------------------------------------- public API

    @property
    def finished(self) -> bool:
        """True once no further text can change the result (a fabricated observation, or the single call, ended it)."""
        return self._state == "discard"

    def feed(self, chunk: str) -> list[ParseEvent]:
        """Add text; return the events it completes."""
        if self._closed:
            raise RuntimeError("feed() after close()")
        self._buf += chunk
        return self._run(final=False)

    def close(self) -> list[ParseEvent]:
        """Mark the end of the text; return the remaining events and set `result`."""
        if self._closed:
            return []
        if self._state in ("outside", "final") and len(self._buf) >= 2 and any(
            stop.startswith(self._buf.lower()) for stop in _HALF_STOPS
        ):
            self._buf = ""  # a stop string the server cut off half-way, not text
        events = self._run(final=True)
        self._closed = True
        if self._state == "block" and self._block is not None:
            self._block.parts.append(self._take(len(self._buf)))
            events.extend(self._finish_block(self._block, at_end=True))
        self.result = self._verdict()
        return events

    # ---------------------------------------------------------------------------------------- engine

    def _run(self, *, final: bool) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        while self._buf:
            before = len(self._buf), self._state
            if self._state == "outside" or self._state == "final":
                self._step_outside(events, final)
            elif self._state == "think":
                self._step_think(events, final)
            elif self._state == "block":
                self._step_block(events, final)
            else:  # discard: everything after a fabricated observation is ignored
                self._buf = ""
            if (len(self._buf), self._state) == before:
                break  # waiting for more text
        return events

    def _take(self, n: int) -> str:
        text, self._buf = self._buf[:n], self._buf[n:]
        self._consumed.append(text)
        return text

    def _emit_text(self, events: list[ParseEvent], text: str) -> None:
        if not text:
            return
        if self._state == "final" and self._final is not None:
            self._final.append(text)
        self._thought.append(text)
        if events and isinstance(events[-1], TextDelta):
            events[-1] = TextDelta(events[-1].text + text)
        else:
            events.append(TextDelta(text))

    def _emit_reasoning(self, events: list[ParseEvent], text: str) -> None:
        if not text:
            return
        self._reasoning.append(text)
        if events and isinstance(events[-1], ReasoningDelta):
            events[-1] = ReasoningDelta(events[-1].text + text)
        else:
            events.append(ReasoningDelta(text))

    def _step_outside(self, events: list[ParseEvent], final: bool) -> None:
        lt = self._buf.find("<")
        if lt < 0:
            self._emit_text(events, self._take(len(self._buf)))
            return
        self._emit_text(events, self._take(lt))
        head = self._buf[:_LONGEST_TAG].lower()
        for tag in _OUTSIDE_TAGS:
            if head.startswith(tag):
                self._take(len(tag))
                self._enter(tag, events)
                return
        if not final and len(self._buf) < _LONGEST_TAG and any(t.startswith(head) for t in _OUTSIDE_TAGS):
            return  # could still become a tag: hold it back
        self._emit_text(events, self._take(1))

    def _enter(self, tag: str, events: list[ParseEvent]) -> None:
        if tag == TOOL_OPEN:
            self._state, self._block = "block", _Block()
        elif tag == OBSERVATION_OPEN:
            self._consumed.pop()  # the model is inventing a tool result: nothing from here on counts
            self._state = "discard"
        elif tag == FINAL_OPEN:
            self._state, self._final = "final", self._final if self._final is not None else []
        elif tag == FINAL_CLOSE:
            self._state = "outside"
        elif tag.startswith("</"):
            # A lone closing think tag: the template pre-opened reasoning, so all visible text so far was thought.
            self._reasoning.extend(self._thought)
            self._thought.clear()
        else:
            self._state, self._think_close = "think", "</" + tag[1:]

    def _step_think(self, events: list[ParseEvent], final: bool) -> None:
        lower = self._buf.lower()
        end = lower.find(self._think_close)
        if end >= 0:
            self._emit_reasoning(events, self._take(end))
            self._take(len(self._think_close))
            self._state = "outside"
            return
        keep = 0 if final else _partial_suffix(lower, self._think_close)
        self._emit_reasoning(events, self._take(len(self._buf) - keep))

    def _step_block(self, events: list[ParseEvent], final: bool) -> None:
        block = self._block
        assert block is not None
        end, consumed = _scan_block(block, self._buf, final=final)
        if end is None:
            if consumed:
                block.parts.append(self._take(consumed))
            return
        block.parts.append(self._take(end))
        self._take(len(TOOL_CLOSE))
        events.extend(self._finish_block(block, at_end=False))
        self._state, self._block = "outside", None
        if self._calls and not self._multiple_calls:
            self._state = "discard"

    def _finish_block(self, block: _Block, *, at_end: bool) -> list[ParseEvent]:
        call, error = parse_block(block.text, at_end=at_end)
        if error:
            self._errors.append(error)
            return []
        assert call is not None
        raw = TOOL_OPEN + block.text + ("" if at_end else TOOL_CLOSE)
        call = ToolCall(call.name, call.arguments, raw=raw)
        self._calls.append(call)
        return [CallParsed(call)]

    def _verdict(self) -> ParsedTurn:
        unclosed = self._state == "think"
        thought = "".join(self._thought).strip()
        reasoning = "".join(self._reasoning).strip()
        text = "".join(self._consumed)
        if self._errors and not self._calls:
            return ParsedTurn(error=self._errors[0], thought=thought, reasoning=reasoning, text=text)
        if self._calls:
            return ParsedTurn(tool_calls=tuple(self._calls), thought=thought, reasoning=reasoning, text=text)
        answer = "".join(self._final).strip() if self._final is not None else thought
        return ParsedTurn(
            final_answer=answer, thought=thought, reasoning=reasoning, text=text, unclosed_reasoning=unclosed
        )


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def _scan_block(block: _Block, window: str, *, final: bool) -> tuple[int | None, int]:
    """Scan the pending text of a block; return (index of its closing tag or None, characters consumed).

    Scanner state lives in `block`, so each character is examined once however the text is chunked; only a
    possible partial tag or a trailing backslash is left unconsumed, to be decided when more text arrives.
    """
    pos = 0
    while pos < len(window):
        if block.in_params and block.json_started and not block.json_done:
            match = (_STRING_SPECIAL if block.in_string else _JSON_SPECIAL).search(window, pos)
            if match is None:
                return None, len(window)
            i, ch = match.start(), match.group()
            if block.in_string:
                if ch == "\\":
                    if i + 1 >= len(window) and not final:
                        return None, i  # the escaped character has not arrived yet
                    pos = i + 2
                    continue
                block.in_string = False
            elif ch == '"':
                block.in_string = True
            elif ch in "{[":
                block.json_depth += 1
            elif ch in "}]":
                block.json_depth -= 1
                block.json_done = block.json_depth <= 0
            pos = i + 1
            continue
        lt = window.find("<", pos)
        if block.in_params and not block.json_started:
            brace = window.find("{", pos)
            if brace >= 0 and (lt < 0 or brace < lt):
                block.json_started, block.json_depth, pos = True, 1, brace + 1
                continue
        if lt < 0:
            return None, len(window)
        head = window[lt : lt + len(TOOL_CLOSE)].lower()
        if head == TOOL_CLOSE:
            return lt, lt
        if head.startswith("<parameters>") and not block.in_params:
            block.in_params, pos = True, lt + len("<parameters>")
            continue
        if not final and len(head) < len(TOOL_CLOSE) and (TOOL_CLOSE.startswith(head) or "<parameters>".startswith(head)):
            return None, lt  # a tag may be arriving
        pos = lt + 1
    return None, len(window)


_NAME = re.compile(r"<name>\s*(.*?)\s*</name>", re.DOTALL | re.IGNORECASE)
_PARAMS_OPEN = re.compile(r"<parameters>", re.IGNORECASE)
_PARAMS_CLOSE = re.compile(r"^\s*</parameters>", re.IGNORECASE)


def parse_block(body: str, *, at_end: bool = False) -> tuple[ToolCall | None, str | None]:
    """Decode the inside of one `<tool_code>` block into a call, or an error message for the model."""
    name_match = _NAME.search(body)
    params_match = _PARAMS_OPEN.search(body)
    if name_match is None:
        if at_end and "<name>" in body.lower():
            return None, _cut_off("the tool name")
        return None, (
            "Your <tool_code> block has no <name>…</name>. Write the tool's name inside <name></name>, "
            "then its arguments as a JSON object inside <parameters></parameters>."
        )
    name = name_match.group(1).strip()
    if not name:
        return None, "Your <tool_code> block has an empty <name></name>. Put the name of one available tool in it."
    if params_match is None:
        if at_end and not body[name_match.end():].strip():
            return None, _cut_off("the parameters")
        return ToolCall(name, {}), None
    raw = body[params_match.end():]
    stripped = raw.lstrip()
    if not stripped or _PARAMS_CLOSE.match(raw):
        return ToolCall(name, {}), None
    try:
        value, end = json.JSONDecoder(strict=False).raw_decode(stripped)
    except json.JSONDecodeError as error:
        if at_end:
            return None, _cut_off("the parameters JSON")
        return None, (
            f"The <parameters> of your call to '{name}' are not valid JSON ({error.msg} at line {error.lineno}, "
            f"column {error.colno}). Write one JSON object, with double-quoted keys and strings, e.g. "
            '{"command": "ls -la"}.'
        )
    if not isinstance(value, dict):
        return None, f"The <parameters> of your call to '{name}' must be a JSON object ({{...}}), not {type(value).__name__}."
    return ToolCall(name, value), None


def _cut_off(where: str) -> str:
    return (
        f"Your reply ended inside a <tool_code> block, in {where}, so nothing was run. "
        "Write the complete block again: <name>, then <parameters> with a JSON object, then </tool_code>."
    )


def parse_completion(text: str) -> ParsedTurn:
    """Parse a whole completion; the same result `StreamParser` gives for any chunking of `text`."""
    parser = StreamParser()
    parser.feed(text)
    parser.close()
    assert parser.result is not None
    return parser.result


__all__ = [
    "CallParsed",
    "ParseEvent",
    "ParsedTurn",
    "ReasoningDelta",
    "StreamParser",
    "TextDelta",
    "format_tool_call",
    "parse_block",
    "parse_completion",
]

