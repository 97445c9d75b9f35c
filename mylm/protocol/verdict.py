"""The verdicts no single block decides: what a turn with these calls, errors and text means."""

from __future__ import annotations

import json
import re

from ..types import ToolCall
from .callblock import decode_block
from .corrections import reasoning_call_error, skipped_calls, verdict_error
from .jsonrepair import JSONRepairError, loads
from .parsed import ParsedTurn
from .tags import TOOL_CALL_CLOSE


def verdict(*, calls: tuple[ToolCall, ...], errors: tuple[str, ...], thought: str, reasoning: str, final: str | None,
            text: str, think_unclosed: bool, ambiguous_example: bool, skipped: tuple[str, ...] = ()) -> ParsedTurn:
    """Decide the turn: its calls (other block errors become warnings), else an error, else the answer."""
    common = {"thought": thought, "reasoning": reasoning, "text": text, "unclosed_reasoning": think_unclosed}
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
_TRAILING_CLOSER = re.compile(r"\s*</tool_call>\Z")
_MISTRAL_MARKER = re.compile(r"\A\[TOOL_CALLS\]\s*")
_MISTRAL_ARGS = re.compile(r"\A([A-Za-z_][\w.:-]{0,127})\[ARGS\]\s*(?=\{)")


def reply_calls(visible: str) -> tuple[tuple[ToolCall, ...], bool]:
    """The calls, if the whole visible reply is nothing but calls in a drifted JSON form; and whether a protocol
    tag (a trailing `</tool_call>`) marks them as the model's own calls rather than quoted data.

    Accepted, maybe fenced: `{"name": …, "arguments": …}` (Hermes, Llama), `[{…}, …]` or `{"tool_calls": [...]}`
    (OpenAI-shaped text), Mistral `[TOOL_CALLS][{…}]` and `[TOOL_CALLS]name[ARGS]{…}`. Every element must be a
    call, or nothing is taken: a JSON answer that merely has a "name" key stays an answer.
    """
    text = visible.strip()
    if len(text) > 1_000_000 or not text.endswith(("}", "]", "```", "~~~", TOOL_CALL_CLOSE)):
        return (), False
    text = _FENCE_WRAP.sub("", text)
    tagged = _TRAILING_CLOSER.search(text) is not None
    text = _TRAILING_CLOSER.sub("", text).strip()
    text = _MISTRAL_MARKER.sub("", text)
    mistral = _MISTRAL_ARGS.match(text)
    if mistral is not None:
        text = f'{{"name": {json.dumps(mistral.group(1))}, "arguments": {text[mistral.end() :]}}}'
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


def _json_call_object(item: object) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    shape: dict[str, object] = function if isinstance(function, dict) else item
    if "name" not in shape or not {"arguments", "parameters"} & set(shape):
        return None
    text = json.dumps(item, ensure_ascii=False)
    call, _ = decode_block(text, "tool_call", at_end=False)
    return None if call is None else ToolCall(call.name, call.arguments, raw=text)


