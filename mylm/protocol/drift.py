"""Calls written in another format than the protocol's, read against the tool registry once the reply is whole.

Recognised outside any `<tool_code>` block, never inside code spans or fences (examples), except a fence that
wraps the whole reply: the tool's name used as the tag (`<list_dir><path>.</path></list_dir>`, the Cline/Roo
style), a sloppy `<tool_code>` (`<tool code>`, `<tool_code name="x">`, `<Tool_Code >`), a name element other
than `<name>` (`<tool_name>x</tool_name><parameters>…`), and ReAct (`Action: x` / `Action Input: {…}`).

A form runs only when its reading is unambiguous against the registry: the tool exists and the arguments are
readable (plain ReAct text counts only for a tool with a single argument). Anything else that looks like an
attempted call becomes a correction that says exactly what to write, never the final answer.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.types import ToolCall
from .callblock import decode_block
from .canonical import format_tool_call
from .corrections import EXAMPLE, example
from .jsonrepair import JSONRepairError, loads
from .registry import Registry, ToolNames, known_tool, looks_like_schema, registry, schema_error
from .structure import INVENTED, quoted_lines
from .tags import NAME_CLOSE, NAME_OPEN, TOOL_CLOSE, TOOL_OPEN

__all__ = [
    "Drift",
    "Registry",
    "ToolNames",
    "find_drift",
    "known_tool",
    "looks_like_schema",
    "recover_block",
    "registry",
    "schema_error",
]

@dataclass(frozen=True)
class Drift:
    """What was found: each attempted call in order (a call, or the error saying why it cannot run), and the
    text left around them."""

    items: tuple[tuple[ToolCall | None, str | None], ...]
    remaining: str


_FENCE_SPAN = re.compile(r"(?ms)^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)")
_INLINE_SPAN = re.compile(r"(`+)(?!`).{1,2000}?(?<!`)\1(?!`)", re.DOTALL)
_WHOLE_FENCE = re.compile(r"\A\s*(`{3,}|~{3,})[\w+#.-]*[ \t]*\n(.*?)\n[ \t]*\1[ \t]*\s*\Z", re.DOTALL)

_SLOPPY_OPEN = re.compile(
    r"<\s*(?:tool[\s_-]*code|toolcode)\b(?P<attrs>[^<>]{0,200})>", re.IGNORECASE)
_SLOPPY_CLOSE = re.compile(r"<\s*/\s*(?:tool[\s_-]*code|toolcode)\s*>", re.IGNORECASE)
_NAME_ATTR = re.compile(r"""\b(?:name|tool|function)\s*=\s*["'`]?([^"'`\s<>]{1,128})""", re.IGNORECASE)
_NAME_ELEMENT = re.compile(
    r"<\s*(?P<tag>tool[_-]?name|tool|function[_-]?name|function|function_call|action|tool_use|use_tool|name)\s*>"
    r"\s*[\"'`]?(?P<name>[^<>\"'`\s]{1,128})[\"'`]?\s*<\s*/\s*(?P=tag)\s*>", re.IGNORECASE)
_ARGS_OPEN = re.compile(r"\s*<\s*(?P<tag>parameters|arguments|args|input|action_input|tool_input)\s*(?P<self>/)?>",
                        re.IGNORECASE)
_REACT = re.compile(
    r"(?im)^[ \t*]*Action[ \t*]*:[ \t*]*[\"'`]?(?P<name>[A-Za-z_][\w.:-]{0,127})[\"'`]?[ \t*]*$"
    r"(?:\s*^[ \t*]*Action[ _]Input[ \t*]*:[ \t*]*(?P<input>.*?))?"
    r"(?=^[ \t*]*(?:Observation|Result|Output|Tool[ _](?:output|result)|Thought|Action|Final[ _]Answer)[ \t*]*:|\Z)",
    re.DOTALL)
_ELEMENT_OPEN = r"<\s*(?P<tag>{names})(?P<attrs>\s[^<>]{{0,200}})?>"
#: Tags that only a call uses, left outside every block (and outside code): a call that went wrong, when the tag
#: opens a line or markup or JSON follows it (a tag named mid-sentence, "ends with </tool_code> on its own
#: line", is prose). Special-token envelopes and ReAct input lines always count.
_CALL_MARKUP = re.compile(
    r"(?:^[ \t]*|(?<=>))<\s*/?\s*(?:tool[\s_-]*code|toolcode|parameters|arguments|tool[_-]name|function[_-]name"
    r"|function_call|tool_use)\b[^<>]{0,200}>"
    r"|<\s*/?\s*(?:tool[\s_-]*code|toolcode|parameters|arguments|tool[_-]name|function[_-]name|function_call"
    r"|tool_use)\b[^<>]{0,200}>(?=\s*[<{\[])"
    r"|\[/?TOOL_CALLS?\]|<[|｜]tool▁calls?▁begin[|｜]>|<\|channel\|>commentary to="
    r"|^[ \t*]*Action[ _]Input[ \t*]*:", re.IGNORECASE | re.MULTILINE)


def _code_mask(text: str) -> str:
    """`text` with code fences and inline code blanked out (same length), so examples are not read as calls."""
    for pattern in (_FENCE_SPAN, _INLINE_SPAN):
        text = pattern.sub(lambda m: _NOT_NEWLINE.sub(" ", m.group()), text)
    if (">" in text or "    " in text or "\t" in text) and _MAYBE_QUOTED.search(text):
        spans = quoted_lines(text)  # blockquotes and indented code: quoted or shown, never run
        if spans:
            parts, last = [], 0
            for start, end in spans:
                parts += [text[last:start], " " * (end - start)]
                last = end
            text = "".join(parts) + text[last:]
    return text


_NOT_NEWLINE = re.compile(r"[^\n]")
_MAYBE_QUOTED = re.compile(r"^(?: {0,3}>| {4}|\t)", re.MULTILINE)
_INVENTED_LINE = re.compile(r"(?m)^" + INVENTED.pattern, re.IGNORECASE)
_TRIGGER = re.compile(r"<\s*/?\s*[A-Za-z_]|^[ \t*]*Action|\[/?TOOL_CALLS?\]|<[|｜]|to=", re.MULTILINE)


def find_drift(text: str, tools: Registry) -> Drift | None:
    """The calls (or the correction) in a reply that holds drifted calls; None if it holds none."""
    if len(text) > 1_000_000 or _TRIGGER.search(text) is None:
        return None  # nothing that any drifted form starts with: most answers stop here
    wrapped = _WHOLE_FENCE.match(text)
    if wrapped is not None:
        text = wrapped.group(2)  # a fence around the whole reply is a wrapper, not an example
    masked = _code_mask(text)
    spans = _spans(text, masked, tools)
    if not spans:
        leftover = _CALL_MARKUP.search(masked)
        if leftover is None:
            return None
        tag = leftover.group().strip()
        return Drift(((None, _malformed(tag, tools)),), text)
    lower = masked.lower()
    invented = _INVENTED_LINE.search(masked, spans[0][1]) if any(
        word in lower for word in ("observation", "result", "output")) else None
    if invented is not None:
        # After a call, a result the model wrote itself (`Observation:`, `Result:`…): what follows rests on it.
        spans = [span for span in spans if span[0] < invented.start()]
        text = text[: invented.start()]
    remaining: list[str] = []
    items: list[tuple[ToolCall | None, str | None]] = []
    last = 0
    for start, end, read in spans:
        remaining.append(text[last:start])
        items.append(read())
        last = end
    remaining.append(text[last:])
    return Drift(tuple(items), "".join(remaining).strip())


Reading = Callable[[], "tuple[ToolCall | None, str | None]"]
#: A drifted call found in the reply: where it starts and ends, and how to read it (only done if it is kept).
Span = tuple[int, int, Reading]


class _Closers:
    """Every end tag a pattern finds, found once; the first after a position, by bisection (keeps work linear)."""

    def __init__(self, pattern: re.Pattern[str], text: str) -> None:
        self._by: dict[str, list[tuple[int, int]]] = {}
        for match in pattern.finditer(text):
            key = (match.group("tag") or "").lower() if "tag" in pattern.groupindex else ""
            self._by.setdefault(key, []).append((match.start(), match.end()))

    def after(self, pos: int, tag: str = "") -> tuple[int, int] | None:
        spans = self._by.get(tag.lower())
        if not spans:
            return None
        i = bisect.bisect_left(spans, (pos, -1))
        return spans[i] if i < len(spans) else None


def _spans(text: str, masked: str, tools: Registry) -> list[Span]:
    """Every drifted call in the reply, in order, without overlaps; each is read only if it is kept."""
    found: list[Span] = []
    found += _sloppy_blocks(text, masked, tools)
    found += _name_elements(text, masked, tools)
    closers = _Closers(_ANY_CLOSE, masked)
    found += _tool_tags(text, masked, tools, closers)
    found += _react(text, masked, tools)
    found += _token_calls(text, masked, tools)
    found += _unknown_tags(masked, tools, closers)
    found.sort(key=lambda s: s[0])
    kept: list[Span] = []
    for span in found:
        if kept and span[0] < kept[-1][1]:
            continue
        kept.append(span)
        if len(kept) >= _MAX_CALLS:
            break  # a flood of calls is not a reply anyone can use (the parser caps blocks the same way)
    return kept


_MAX_CALLS = 100


_SLOPPY_CLOSES = re.compile(r"<\s*/\s*(?:tool[\s_-]*code|toolcode)\s*>", re.IGNORECASE)
_ARGS_CLOSE = re.compile(r"<\s*/\s*(?P<tag>parameters|arguments|args|input|action_input|tool_input)\s*>", re.IGNORECASE)
_ANY_CLOSE = re.compile(r"<\s*/\s*(?P<tag>[A-Za-z_][\w.:-]{0,127})\s*>")
_BLANK = re.compile(r"\s*")


def _blank_end(text: str, pos: int) -> int:
    found = _BLANK.match(text, pos)
    return pos if found is None else found.end()


def _sloppy_blocks(text: str, masked: str, tools: Registry) -> list[Span]:
    spans: list[Span] = []
    closers = _Closers(_SLOPPY_CLOSES, masked)
    for match in _SLOPPY_OPEN.finditer(masked):
        opener = match.group()
        if opener.lower() == TOOL_OPEN:
            continue  # the parser has read the real ones
        close = closers.after(match.end())
        end = close[1] if close else len(text)

        def read(match: re.Match[str] = match, close: tuple[int, int] | None = close) -> tuple[
                ToolCall | None, str | None]:
            body = text[match.end() : close[0] if close else len(text)]
            named = _NAME_ATTR.search(match.group("attrs") or "")
            if named is not None:
                body = f"{NAME_OPEN}{named.group(1)}{NAME_CLOSE}{body}"
            return _decoded(body, tools, close is None, match.group())

        spans.append((match.start(), end, read))
    return spans


def _name_elements(text: str, masked: str, tools: Registry) -> list[Span]:
    """`<tool_name>x</tool_name>` (or `<tool>`, `<function>`, `<action>`…) then the arguments, no block around."""
    spans: list[Span] = []
    closers = _Closers(_ARGS_CLOSE, masked)
    for match in _NAME_ELEMENT.finditer(masked):
        name = text[match.start("name") : match.end("name")]
        if known_tool(name, tools) is None and match.group("tag").lower() == "name":
            continue  # a bare <name> with no tool in it is anybody's markup
        args = _ARGS_OPEN.match(masked, match.end())
        close = None
        end = match.end()
        if args is not None:
            if args.group("self"):
                end = args.end()
            else:
                close = closers.after(args.end(), args.group("tag"))
                end = close[1] if close else len(text)

        def read(match: re.Match[str] = match, args: re.Match[str] | None = args,
                 close: tuple[int, int] | None = close, name: str = name) -> tuple[ToolCall | None, str | None]:
            body = f"{NAME_OPEN}{name}{NAME_CLOSE}"
            cut = False
            if args is not None and not args.group("self"):
                inner = text[args.end() : close[0] if close else len(text)]
                body += f"<parameters>{inner}</parameters>" if close else f"<parameters>{inner}"
                cut = close is None
            return _decoded(body, tools, cut, match.group())

        spans.append((match.start(), end, read))
    return spans


def _tool_tags(text: str, masked: str, tools: Registry, closers: _Closers) -> list[Span]:
    """`<list_dir><path>.</path></list_dir>`: a registered tool's name used as the tag."""
    if not tools:
        return []
    names = "|".join(re.escape(n) for n in sorted(tools, key=len, reverse=True))
    spans: list[Span] = []
    for match in re.finditer(_ELEMENT_OPEN.format(names=names), masked):
        tag = match.group("tag")
        attrs = dict(_ATTR.findall(match.group("attrs") or ""))
        if attrs or (match.group("attrs") or "").rstrip().endswith("/"):
            # `<list_dir path="src"/>`: the arguments are the attributes (a body after them is not read).
            close = closers.after(match.end(), tag) if not match.group().endswith("/>") else None
            end = close[1] if close and _blank_end(masked, match.end()) >= close[0] else match.end()
            spans.append((match.start(), end, _attribute_call(tag, attrs, tools)))
            continue
        close = closers.after(match.end(), tag)
        structured = masked[match.end() : match.end() + 400].lstrip().startswith(("<", "{"))
        if not structured and close is not None and _blank_end(masked, match.end()) < close[0]:
            # `<execute_command>ls -la</execute_command>`: plain text is the value of a one-argument tool.
            spans.append((match.start(), close[1], _plain_body(text, match.end(), close[0], tag, tools)))
            continue
        if not structured and close is None:
            continue  # `<list_dir>` named in prose: no structure follows it

        def read(match: re.Match[str] = match, close: tuple[int, int] | None = close, tag: str = tag) -> tuple[
                ToolCall | None, str | None]:
            inner = text[match.end() : close[0] if close else len(text)]
            body = f"<{tag}>{inner}" + (f"</{tag}>" if close else "")
            return _decoded(body, tools, close is None, match.group())

        spans.append((match.start(), close[1] if close else len(text), read))
    return spans


_ATTR = re.compile(r"""([A-Za-z_][\w.-]{0,63})\s*=\s*["']([^"'<>]*)["']""")


def _attribute_call(tag: str, attrs: dict[str, str], tools: Registry) -> Reading:
    def read() -> tuple[ToolCall | None, str | None]:
        name = known_tool(tag, tools) or tag
        call = ToolCall(name, attrs)
        return ToolCall(name, attrs, raw=format_tool_call(call)), None

    return read


def _plain_body(text: str, start: int, end: int, tag: str, tools: Registry) -> Reading:
    def read() -> tuple[ToolCall | None, str | None]:
        name = known_tool(tag, tools) or tag
        args = sorted(tools.get(name, frozenset()))
        value = text[start:end].strip()
        if len(args) == 1:
            call = ToolCall(name, {args[0]: value})
            return ToolCall(name, call.arguments, raw=format_tool_call(call)), None
        return None, (f"Your call <{tag}>…</{tag}> holds plain text, and {name} takes "
                      + (f"the arguments {', '.join(args)}" if args else "named arguments")
                      + ", so it is not clear which one it is; nothing was run. Write:\n" + example(name))

    return read


#: A tool-like element (a snake_case name: HTML and most XML vocabularies have none) that opens a line and holds
#: elements: `<ask_followup_question>\n<question>…` is a call to a tool this run does not have.
_TOOLISH = re.compile(r"(?m)^[ \t]*<(?P<tag>[a-z][a-z0-9]*(?:_[a-z0-9]+)+)>\s*<[A-Za-z_]")


def _unknown_tags(masked: str, tools: Registry, closers: _Closers) -> list[Span]:
    spans: list[Span] = []
    for match in _TOOLISH.finditer(masked):
        tag = match.group("tag")
        if known_tool(tag, tools) is not None or tag in _NOT_TOOLS:
            continue
        close = closers.after(match.end(), tag)
        if close is None:
            continue
        spans.append((match.start(), close[1], _failing(_unknown(tag, tools, f"<{tag}>"))))
    return spans


_NOT_TOOLS = frozenset({"tool_code", "tool_call", "tool_name", "function_calls", "function_name", "final_answer",
                        "tool_response", "function_results", "arg_key", "arg_value", "tool_use", "function_call"})


def _react(text: str, masked: str, tools: Registry) -> list[Span]:
    """ReAct: `Action: tool` then `Action Input: {json}` (or one plain value, for a tool with one argument)."""
    spans: list[Span] = []
    for match in _REACT.finditer(masked):
        raw_name = match.group("name")
        name = known_tool(raw_name, tools)
        if name is None:
            if match.group("input") is None:
                continue  # "Action: something" in prose, with no input line: not a call
            spans.append((match.start(), match.end(), _failing(_unknown(raw_name, tools, "Action:"))))
            continue

        def read(match: re.Match[str] = match, name: str = name) -> tuple[ToolCall | None, str | None]:
            value = "" if match.group("input") is None else text[match.start("input") : match.end("input")].strip()
            return _react_call(name, value, tools)

        spans.append((match.start(), match.end(), read))
    return spans


def _failing(problem: str) -> Reading:
    def read() -> tuple[ToolCall | None, str | None]:
        return None, problem

    return read


#: Calls written with a template's own special tokens: DeepSeek's `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name`
#: and a JSON fence, and gpt-oss (harmony) `<|channel|>commentary to=functions.name … <|message|>{…}<|call|>`.
_BAR = "[|｜]"
_TOKEN_CALL = re.compile(
    rf"<{_BAR}tool▁call▁begin{_BAR}>(?:function)?<{_BAR}tool▁sep{_BAR}>(?P<dname>[^\s<>]{{1,128}})\s*"
    rf"(?:```(?:json)?\s*(?P<dargs>.*?)\s*```)?\s*(?:<{_BAR}tool▁call▁end{_BAR}>|\Z)"
    rf"|to=(?P<hname>[\w.:-]{{1,128}})[^<\n]{{0,80}}(?:<\|constrain\|>\w*\s*)?<\|message\|>(?P<hargs>.*?)"
    rf"(?:<\|call\|>|<\|end\|>|\Z)",
    re.DOTALL)


def _token_calls(text: str, masked: str, tools: Registry) -> list[Span]:
    spans: list[Span] = []
    for match in _TOKEN_CALL.finditer(text):  # the raw text: these calls carry their own JSON fences
        raw_name = match.group("dname") or match.group("hname")
        group = "dargs" if match.group("dname") else "hargs"
        value = "" if match.start(group) < 0 else text[match.start(group) : match.end(group)].strip()
        name = known_tool(raw_name, tools)
        if name is None:
            spans.append((match.start(), match.end(), _failing(_unknown(raw_name, tools, match.group()[:40]))))
            continue

        def read(name: str = name, value: str = value) -> tuple[ToolCall | None, str | None]:
            call, error = _react_call(name, value, tools)
            if call is None:
                return None, error
            return ToolCall(name, call.arguments, raw=format_tool_call(ToolCall(name, call.arguments))), None

        spans.append((match.start(), match.end(), read))
    return spans


def _react_call(name: str, value: str, tools: Registry) -> tuple[ToolCall | None, str | None]:
    if value.startswith("```"):
        value = re.sub(r"\A`{3,}[\w-]*\s*|\s*`{3,}\Z", "", value)
    if not value or value.lower() in ("none", "{}", "null"):
        return ToolCall(name, {}, raw=f"Action: {name}"), None
    if value.startswith("{"):
        try:
            parsed, end = loads(value, 0)
        except JSONRepairError:
            parsed, end = None, 0
        if isinstance(parsed, dict) and not value[end:].strip():
            return ToolCall(name, parsed, raw=value), None
        return None, (f"The Action Input of your call to {name} is not one JSON object, so nothing was run. "
                      "Write:\n" + example(name))
    args = sorted(tools.get(name, frozenset()))
    if len(args) == 1:
        return ToolCall(name, {args[0]: value.strip().strip("\"'`")}, raw=value), None
    return None, (f"Your Action Input for {name} is plain text, and {name} takes "
                  + (f"the arguments {', '.join(args)}" if args else "named arguments")
                  + ", so it is not clear which one it is; nothing was run. Write:\n" + example(name))


def _decoded(body: str, tools: Registry, cut: bool, opener: str) -> tuple[ToolCall | None, str | None]:
    call, error = decode_block(body, "tool_code", at_end=cut)
    if call is None:
        return None, (error or "") + _where(opener)
    name = known_tool(call.name, tools)
    if name is None:
        return None, _unknown(call.name, tools, opener)
    call = ToolCall(name, call.arguments)
    return ToolCall(name, call.arguments, raw=format_tool_call(call)), None


def _where(opener: str) -> str:
    return f" (It was written as {opener.strip()[:60]!r}, which is not the protocol's form.)"


_NAME_THEN_JSON = re.compile(r"\A\s*[\"'`]?(?P<name>[A-Za-z_][\w.:-]{0,127})[\"'`]?\s*[:(]?\s*(?=\{)")
_YAMLISH = re.compile(r"(?im)^\s*(?:tool|name|tool_name|action)\s*[:=]\s*[\"'`]?(?P<name>[A-Za-z_][\w.:-]{0,127})"
                      r"[\"'`]?\s*$\s*^\s*(?:parameters|arguments|args|input|action_input)\s*[:=]\s*(?=\{)")


def recover_block(body: str, tools: Registry) -> ToolCall | None:
    """A `<tool_code>` body written in another format, read against the registry: a drifted form (a tool tag
    with attributes, ReAct, …), `list_dir {"path": "."}` or `name: list_dir` / `parameters: {…}` lines, or
    `{"list_dir": {"path": "."}}`. None unless exactly one registered call reads out of it."""
    drift = find_drift(body, tools)
    if drift is not None:
        calls = [call for call, _ in drift.items]
        if len(calls) == 1 and calls[0] is not None and not drift.remaining:
            return calls[0]
        return None
    for pattern in (_NAME_THEN_JSON, _YAMLISH):
        found = pattern.search(body)
        name = None if found is None else known_tool(found.group("name"), tools)
        if found is not None and name is not None:
            args = _object(body[found.end() :].rstrip().removesuffix(")"))
            if args is not None:
                return ToolCall(name, args, raw=format_tool_call(ToolCall(name, args)))
    whole = _object(body)
    if whole is not None and len(whole) == 1:
        (key, value), = whole.items()
        name = known_tool(key, tools)
        if name is not None and isinstance(value, dict):
            return ToolCall(name, value, raw=format_tool_call(ToolCall(name, value)))
    return None


def _object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value, end = loads(text, 0)
    except JSONRepairError:
        return None
    return value if isinstance(value, dict) and not text[end:].strip() else None


def _unknown(name: str, tools: Registry, opener: str) -> str:
    listed = ", ".join(sorted(tools)[:30])
    return (f"Your reply looks like a call to {name!r} (written as {opener.strip()[:60]!r}), which is not one of "
            f"the tools ({listed}), so nothing was run and it was not taken as your answer. To call a tool, "
            "write exactly:\n" + EXAMPLE + "\nTo answer, write the answer as plain text, without tags.")


def _malformed(tag: str, tools: Registry) -> str:
    return (f"Your reply has {tag[:60]!r} outside a complete {TOOL_OPEN} block, so it looks like a tool call that "
            "went wrong: nothing was run and it was not taken as your answer. To call a tool, write exactly:\n"
            + EXAMPLE + f"\nwith one tool name from <tool_definitions> and end the block with {TOOL_CLOSE}. To "
            "answer, write the answer as plain text; put markup you mean literally in backticks.")
