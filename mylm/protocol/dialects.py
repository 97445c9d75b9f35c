"""Tool dialects: the form of call the system prompt teaches, the grammar allows and history records.

- `mylm`: mylm's own block, `<tool_code>\\n<name>NAME</name>\\n<parameters>\\n{json}\\n</parameters>\\n</tool_code>`,
  the same for every model;
- `hermes`: the form the Qwen2.5 and Hermes chat templates teach their models, `<tool_call>\\n{"name": NAME,
  "arguments": {json}}\\n</tool_call>`, tools listed as one JSON function signature a line inside `<tools>`.

The parser reads both whatever the dialect (a model may write either); the dialect only decides what mylm
shows and which grammar it samples under. `auto` is a setting, not a dialect: the model registry's dialect for
the model where it knows one (`tool_dialect` in `known.toml`), else `mylm` (`resolve`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from ..core.types import ToolCall
from .canonical import canonical_arguments, format_tool_call
from .defuse import defuse_special_tokens, neutralise
from .tags import DEFAULT_STOPS, OBSERVATION_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_CLOSE, TOOL_OPEN

ToolDialect = Literal["mylm", "hermes"]
#: The dialects mylm can speak.
TOOL_DIALECTS: tuple[ToolDialect, ...] = ("mylm", "hermes")
#: What the `tool_dialect` setting takes: a dialect, or `auto` (the registry's, else mylm).
DIALECT_SETTINGS = ("auto", *TOOL_DIALECTS)
#: Each dialect's call tags (open, close), as the prompt teaches and the grammar writes them.
CALL_TAGS: Mapping[str, tuple[str, str]] = {"mylm": (TOOL_OPEN, TOOL_CLOSE), "hermes": (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)}
#: The system prompt template of each dialect.
SYSTEM_TEMPLATES: Mapping[str, str] = {"mylm": "system.j2", "hermes": "dialects/hermes/system.j2"}


def checked(dialect: str) -> ToolDialect:
    """`dialect` if mylm speaks it, else a ValueError naming the ones it does."""
    if dialect not in TOOL_DIALECTS:
        raise ValueError(f"tool_dialect must be {', '.join(TOOL_DIALECTS)} or auto, not {dialect!r}")
    return dialect  # narrowed by the membership test


def resolve(setting: str, model: str | None = None, *, known: str | None = None) -> ToolDialect:
    """The dialect a `tool_dialect` setting means for `model`: itself, or for `auto` the registry's dialect for
    the model (`known` when the caller looked it up already) when mylm speaks it, else `mylm`."""
    if setting != "auto":
        return checked(setting)
    if known is None and model:
        from ..models.registry import lookup

        info = lookup(model)
        known = info.tool_dialect if info is not None else None
    return known if known in TOOL_DIALECTS else "mylm"


def format_call(call: ToolCall, dialect: str = "mylm") -> str:
    """`call` in `dialect`'s form; it parses back to the same call. Hermes writes what the Qwen2.5 template
    writes for an assistant's call (`{"name": …, "arguments": …}` on one line between the tags), its arguments
    canonical JSON (never `</`, so never `</tool_call>`)."""
    if dialect == "hermes":
        name = json.dumps(call.name, ensure_ascii=False)
        return f'{TOOL_CALL_OPEN}\n{{"name": {name}, "arguments": {canonical_arguments(call.arguments)}}}\n{TOOL_CALL_CLOSE}'
    return format_tool_call(call)


def example_block(call: ToolCall, dialect: str = "mylm") -> str:
    """`call` written for the model to copy (the system prompt's example, a correction's ready-made block): its
    name and arguments are data (a client's tool name), so a special token in them is broken; the dialect's own
    tags stay whole (Qwen's `<tool_call>` is a special token of its vocabulary, and must read as one)."""
    if dialect == "hermes":
        safe = ToolCall(defuse_special_tokens(call.name), call.arguments)
        text = format_call(safe, dialect)
        body = text[len(TOOL_CALL_OPEN):-len(TOOL_CALL_CLOSE)]
        return TOOL_CALL_OPEN + defuse_special_tokens(body) + TOOL_CALL_CLOSE
    return defuse_special_tokens(format_tool_call(call))


def speak(text: str, dialect: str) -> str:
    """mylm's own text about calls (a correction's wording, the parser's messages) in `dialect`: in hermes, the
    `<tool_code>` block it names is a `<tool_call>` block. Never for data: a tool's output keeps what it says."""
    if dialect != "hermes":
        return text
    return text.replace(TOOL_OPEN, TOOL_CALL_OPEN).replace(TOOL_CLOSE, TOOL_CALL_CLOSE)


def stops(dialect: str, *, multiple_calls: bool) -> tuple[str, ...]:
    """The stop strings a turn is asked with: the end of a call (one call per turn only), and the start of an
    observation the model must not invent."""
    if multiple_calls:
        return (OBSERVATION_OPEN,)
    if dialect == "hermes":
        return (TOOL_CALL_CLOSE, OBSERVATION_OPEN)
    return DEFAULT_STOPS


def signature(name: str, description: str, parameters: Mapping[str, Any]) -> str:
    """One tool as the Qwen2.5/Hermes template lists it inside `<tools>`: `{"type": "function", "function":
    {"name", "description", "parameters"}}` as JSON on one line (the template's `tojson`: `, ` and `: `), made
    inert as every tool description is (a tag or special token in it cannot end the list or forge a turn)."""
    line = json.dumps({"type": "function", "function": {"name": name, "description": description,
                                                         "parameters": dict(parameters)}}, ensure_ascii=False)
    return _TOOLS_TAG.sub(r"&lt;\1", neutralise(line))


#: The list's own tags, which a description must not write (`</tools>` would end the list for the model).
_TOOLS_TAG = re.compile(r"<(\s*/?\s*tools\b)", re.IGNORECASE)


__all__ = [
    "CALL_TAGS", "DIALECT_SETTINGS", "SYSTEM_TEMPLATES", "TOOL_DIALECTS", "ToolDialect", "checked", "example_block",
    "format_call", "resolve", "signature", "speak", "stops",
]
