"""The canonical form of a call, as the system prompt teaches it and history records it; it always parses back."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.jsontext import text_json
from ..core.types import ToolCall
from .tags import NAME_CLOSE, NAME_OPEN, PARAMS_CLOSE, PARAMS_OPEN, REASONING_DIALECTS, TOOL_CLOSE, TOOL_OPEN


def format_tool_call(call: ToolCall) -> str:
    """Render a call in the canonical form the system prompt teaches (and history records)."""
    name = call.name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    args = canonical_arguments(call.arguments)
    return f"{TOOL_OPEN}\n{NAME_OPEN}{name}{NAME_CLOSE}\n{PARAMS_OPEN}\n{args}\n{PARAMS_CLOSE}\n{TOOL_CLOSE}"


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """The arguments as canonical JSON: never `</`, `\\b`, `\\f` or a drive-letter escape that reads as raw text,
    and never a reasoning marker of any dialect (chat templates split history on `</think>`, `[/THINK]`…)."""
    text = text_json(dict(arguments))
    if "\\" in text or "</" in text:
        text = _CANON_FIX.sub(_canon_fix, text)
    return _MARKER.sub(lambda m: f"\\u{ord(m.group()[0]):04x}" + m.group()[1:], text)


_MARKER = re.compile("|".join(re.escape(m) for d in REASONING_DIALECTS for m in (*d.opens, *d.closes)),
                     re.IGNORECASE)
_CANON_FIX = re.compile(r"\\(u[0-9a-fA-F]{4}|.)|</", re.DOTALL)


def _canon_fix(match: re.Match[str]) -> str:
    if match.group(0) == "</":
        return "<\\/"
    escape = match.group(1)
    if escape in ("b", "f"):
        return f"\\u{ord({'b': chr(8), 'f': chr(12)}[escape]):04x}"
    if escape in ("t", "n", "r"):
        text, i = match.string, match.start()
        if i >= 2 and text[i - 1] == ":" and text[i - 2].isascii() and text[i - 2].isalpha():
            return f"\\u{ord({'t': chr(9), 'n': chr(10), 'r': chr(13)}[escape]):04x}"
    return match.group(0)
