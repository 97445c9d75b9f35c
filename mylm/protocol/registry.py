"""The run's tools as the parser sees them: the names in play and their argument names.

`StreamParser(tools=…)` and `parse_completion(text, tools=…)` take the tool names, or a mapping of tool name to
argument names; every reading that depends on the registry (drifted formats, JSON calls, a name in another case)
reads it through here, the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .corrections import example

#: What `tools=` accepts: tool names, or a mapping of tool name to its argument names.
ToolNames = Iterable[str] | Mapping[str, Iterable[str]]
#: The normalised registry: tool name to its argument names (empty when unknown).
Registry = Mapping[str, frozenset[str]]


def registry(tools: ToolNames | None) -> Registry | None:
    """Normalise `tools=`; None stays None (no registry: the parser behaves as without drift recovery)."""
    if tools is None:
        return None
    if type(tools) is dict or isinstance(tools, Mapping):  # a dict (the agent's) without the ABC's check
        return {str(name): frozenset(map(str, args)) for name, args in tools.items()}
    return {str(name): frozenset() for name in tools}


def known_tool(name: str, tools: Registry) -> str | None:
    """The registered tool `name` unambiguously means: exactly, else ignoring case when that matches one tool, or
    after a `functions.` prefix (`List_Dir`, `functions.list_dir`); None if it is not one."""
    name = name.strip().strip("\"'`")
    if name in tools:
        return name
    if "." in name and name.rsplit(".", 1)[0].lower() in ("functions", "function", "tools", "tool", "default_api"):
        return known_tool(name.rsplit(".", 1)[1], tools)  # OpenAI-style `functions.list_dir`
    folded = [t for t in tools if t.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def looks_like_schema(arguments: Mapping[str, Any], known: frozenset[str] = frozenset()) -> bool:
    """Arguments that are a JSON Schema (the tool's description echoed back) rather than argument values."""
    keys = set(arguments)
    if known and keys <= known:
        return False
    schema_words = {"type", "properties", "required", "additionalProperties", "$schema", "title", "description",
                    "items", "enum", "anyOf", "oneOf", "allOf", "definitions", "$defs"}
    if not keys or not keys <= schema_words:
        return False
    props = arguments.get("properties")
    return arguments.get("type") == "object" or isinstance(props, Mapping) and all(
        isinstance(v, Mapping) and ("type" in v or "description" in v) for v in props.values()
    ) or "$schema" in keys


def schema_error(name: str, arguments: Mapping[str, Any], known: frozenset[str]) -> str:
    """Say what was wrong with schema-shaped arguments, and show the values form with the real argument names."""
    props = arguments.get("properties")
    names = sorted(known) or (sorted(props) if isinstance(props, Mapping) else [])
    values = ", ".join(f'"{n}": VALUE' for n in names[:8]) or '"ARGUMENT": "VALUE"'
    return (f"The parameters of your call to {name} are a JSON Schema (the description of its arguments, with "
            '"type" and "properties"), not the arguments themselves, so nothing was run. Write the values the '
            f"call should use, e.g. <parameters>{{{values}}}</parameters>, with each VALUE replaced:\n"
            + example(name))
