"""Example calls that a model can copy without harm: a real tool's name and arguments built from its schema.

Small models copy examples literally. A placeholder (`TOOL_NAME`, `{"ARGUMENT": "VALUE"}`, "e.g. src/app.py")
copied is a call to a tool that does not exist or a path that is not there, and Qwen2.5-Coder 0.5B did exactly
that on its first tasks. So every example mylm shows names a tool in play, with values of the right type that
are harmless if run as they are: the example for a file tool lists or reads the working directory, a command
example prints the directory, and anything else gets a short value of its declared type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

#: Values for string arguments by a word in their name, in order; the first word found decides.
_BY_NAME: tuple[tuple[tuple[str, ...], str], ...] = (
    (("command", "cmd", "script", "shell"), "ls"),
    (("dir", "folder", "directory"), "."),
    (("path", "file", "filename"), "."),
    (("url", "uri", "link", "endpoint"), "https://example.com"),
    (("email",), "user@example.com"),
    (("pattern", "query", "search", "regex", "term", "keyword"), "main"),
    (("date",), "2024-01-01"),
    (("time",), "12:00"),
    (("city", "location", "place"), "Paris"),
    (("country",), "France"),
    (("lang", "language"), "en"),
    (("unit", "units"), "metric"),
    (("currency",), "USD"),
    (("name", "title", "label"), "example"),
    (("id", "key", "handle"), "1"),
)

#: Tools shown first when one must be chosen as the example: reading is harmless if the model copies it.
_HARMLESS = ("list_dir", "read_file", "search", "glob")


class Described(Protocol):
    """What an example needs of a tool: its name and its parameters' JSON Schema."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


def example_tool(tools: Iterable[Described]) -> Described | None:
    """The tool the system prompt's example calls: a harmless one when there is one, else the first."""
    listed = list(tools)
    for name in _HARMLESS:
        for tool in listed:
            if tool.name == name:
                return tool
    return listed[0] if listed else None


def example_arguments(schema: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Arguments for a call that fit `schema`: the required ones (every declared one when none is required),
    keeping each value in `given` (what the model wrote) and making up the rest from the schema (its default,
    first example or enum value, else a short value of the declared type chosen by the argument's name)."""
    found = schema.get("properties")
    properties: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    listed = schema.get("required")
    required = [n for n in listed if isinstance(n, str)] if isinstance(listed, list) else []
    names: Sequence[str] = required or [str(n) for n in properties]
    given = given or {}
    out: dict[str, Any] = {}
    for name in names:
        spec = properties.get(name)
        spec = spec if isinstance(spec, Mapping) else {}
        if name in given and _fits(given[name], spec):
            out[name] = given[name]
        else:
            out[name] = example_value(name, spec)
    return out


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
    "object": (dict,), "null": (type(None),),
}


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether `value` has a type `schema` declares (no type declared: anything fits), its enum allowing."""
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return False
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if not kinds:
        return True
    for k in kinds:
        if isinstance(value, _TYPES.get(k, object)) and not (isinstance(value, bool) and k in ("integer", "number")):
            return True
    return False


def example_value(name: str, schema: Mapping[str, Any], depth: int = 0) -> Any:
    """One plausible value for argument `name` under `schema`."""
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, Mapping) and option.get("type") != "null":
                    return example_value(name, option, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = max(1, int(low) + 1) if isinstance(low, (int, float)) and abs(low) < 1e9 else 1
        return value if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "array":
        items = schema.get("items")
        if depth < 3 and isinstance(items, Mapping) and schema.get("minItems"):
            return [example_value(name, items, depth + 1)]
        return []
    if kind == "object":
        properties, required = schema.get("properties"), schema.get("required")
        if depth < 3 and isinstance(properties, Mapping) and isinstance(required, list):
            return {
                n: example_value(n, spec if isinstance(spec := properties.get(n), Mapping) else {}, depth + 1)
                for n in required if isinstance(n, str)
            }
        return {}
    return _string_for(name)


def _string_for(name: str) -> str:
    lowered = name.lower()
    for words, value in _BY_NAME:
        if any(word in lowered for word in words):
            return value
    return "example"
