"""The verdicts no single block decides: what a turn with these calls, errors and text means."""

from __future__ import annotations

import json
import re

from ..core.types import ToolCall
from .callblock import decode_block
from .corrections import reasoning_call_error, skipped_calls, verdict_error
from .jsoncalls import call_object
from .jsonrepair import JSONRepairError, loads
from .parsed import ParsedTurn
from .pythonic import pythonic_calls
from .tags import CALL_MARKERS_AFTER, CALL_MARKERS_BEFORE


def verdict(*, calls: tuple[ToolCall, ...], errors: tuple[str, ...], thought: str, reasoning: str, final: str | None,
            text: str, think_unclosed: bool, ambiguous_example: bool, skipped: tuple[str, ...] = (),
            discarded: str = "", invented_observation: bool = False) -> ParsedTurn:
    """Decide the turn: its calls (other block errors become warnings), else an error, else the answer."""
    common = {"thought": thought, "reasoning": reasoning, "text": text, "unclosed_reasoning": think_unclosed,
              "discarded": discarded, "invented_observation": invented_observation}
    if skipped and errors:
        errors = (errors[0] + skipped_calls(skipped), *errors[1:])
    if calls:
        return ParsedTurn(tool_calls=calls, warnings=errors, **common)  # type: ignore[arg-type]
    answer = final if final is not None else thought
    error = (errors[0] if errors else None) or reasoning_call_error(
        reasoning, unclosed=think_unclosed, answer=answer
    ) or verdict_error(answer=answer, reasoning=reasoning, ambiguous_example=ambiguous_example, unclosed=think_unclosed)
    if error:
        return ParsedTurn(error=error, **common)  # type: ignore[arg-type]
    return ParsedTurn(final_answer=answer, **common)  # type: ignore[arg-type]


_FENCE_WRAP = re.compile(r"\A(?:```|~~~)[\w-]*\s*|\s*(?:```|~~~)\Z")
_PYTHONIC = re.compile(r"\A\[?\s*[A-Za-z_]\w{0,127}\(")
_MISTRAL_ARGS = re.compile(r"\A([A-Za-z_][\w.:-]{0,127})\[ARGS\]\s*(?=\{)")


def reply_calls(visible: str) -> tuple[tuple[ToolCall, ...], bool]:
    """The calls, if the whole visible reply is nothing but calls in a drifted JSON form; and whether a marker
    only the model can write (a trailing `</tool_call>`, or a special token such as `[TOOL_CALLS]` or
    `<|python_tag|>`, which `neutralise` breaks in every tool output) marks them as the model's own calls
    rather than quoted data.

    Accepted, maybe fenced: `{"name": …, "arguments": …}` (Hermes, Llama) and the other shapes `call_object`
    reads (LangChain's `{"action", "action_input"}`, …), `[{…}, …]` or `{"tool_calls": [...]}` (OpenAI-shaped
    text), Mistral `[TOOL_CALLS][{…}]` and `[TOOL_CALLS]name[ARGS]{…}`, Llama's `<|python_tag|>{…}` and pythonic
    `[tool(a=1), other()]`. Every element must be a call, or nothing is taken: a JSON answer that merely has a
    "name" key stays an answer.
    """
    text = visible.strip()
    if len(text) > 1_000_000:
        return (), False
    text, tagged = _strip_markers(text)
    if not text.endswith(("}", "]", "```", "~~~", ")")):
        return (), False
    text = _FENCE_WRAP.sub("", text)
    text, closed = _strip_markers(text)
    tagged = tagged or closed
    mistral = _MISTRAL_ARGS.match(text)
    if mistral is not None:
        text = f'{{"name": {json.dumps(mistral.group(1))}, "arguments": {text[mistral.end() :]}}}'
    if _PYTHONIC.match(text) and (tagged or text.startswith("[")):
        # A lone `name(...)` with no marker is as likely an answer ("call initialize()") as a call.
        pythonic = pythonic_calls(text)
        return (pythonic, tagged) if pythonic else ((), False)
    if not text.startswith(("{", "[")):
        return (), False
    try:
        value, end = loads(text)
    except JSONRepairError:
        return (), False
    if text[end:].strip():
        return (), False
    if isinstance(value, dict) and set(value) == {"tool_calls"}:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    calls = [_json_call_object(item) for item in items]
    if not items or any(call is None for call in calls):
        return (), False
    return tuple(call for call in calls if call is not None), tagged


def _strip_markers(text: str) -> tuple[str, bool]:
    """Remove the call markers around a reply (`[TOOL_CALLS]`, `<|python_tag|>`, `</tool_call>`, `<|eom_id|>`…);
    whether there were any."""
    stripped = text.strip()
    found = True
    while found:  # string tests, not a regex: a reply that is a megabyte of blanks stays linear
        found = False
        for marker in CALL_MARKERS_BEFORE:
            if stripped.startswith(marker):
                stripped, found = stripped[len(marker) :].lstrip(), True
        for marker in CALL_MARKERS_AFTER:
            if stripped.endswith(marker):
                stripped, found = stripped[: -len(marker)].rstrip(), True
    return stripped, stripped != text.strip()


def _json_call_object(item: object) -> ToolCall | None:
    shape = call_object(item)
    if shape is None or "arguments" not in shape:
        return None
    text = json.dumps(item, ensure_ascii=False)
    call, _ = decode_block(text, "tool_call", at_end=False)
    return None if call is None else ToolCall(call.name, call.arguments, raw=text)


