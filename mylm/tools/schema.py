"""JSON Schema for tools: derive one from a Python function's signature, type hints and docstring."""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_for_annotation(annotation: Any) -> dict[str, Any]:
    """Return the JSON Schema fragment describing values of a Python type annotation."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return schema_for_annotation(members[0])
        return {"anyOf": [schema_for_annotation(m) for m in members]}
    if origin is Literal:
        values = list(get_args(annotation))
        schema: dict[str, Any] = {"enum": values}
        kinds = {_JSON_TYPES.get(type(v)) for v in values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": values}
        return schema
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set, frozenset):
        args = get_args(annotation)
        item = schema_for_annotation(args[0]) if args and args[0] is not Ellipsis else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    if isinstance(annotation, type):
        for py_type, name in _JSON_TYPES.items():
            if issubclass(annotation, py_type) and not (py_type is int and issubclass(annotation, bool)):
                return {"type": "boolean" if issubclass(annotation, bool) else name}
    return {}


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_OTHER_SECTION = re.compile(r"^\s*(Returns?|Raises|Yields?|Examples?|Notes?)\s*:\s*$", re.IGNORECASE)
_GOOGLE_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter descriptions (Google or Sphinx style)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        sphinx = _SPHINX_ARG.match(line)
        if sphinx:
            current, in_args = sphinx.group(1), False
            params[current] = sphinx.group(2).strip()
            continue
        if _SECTION.match(line):
            in_args, current = True, None
            continue
        if _OTHER_SECTION.match(line) or re.match(r"^\s*:(returns?|raises?|rtype)\b", line):
            in_args, current = False, None
            continue
        if in_args:
            arg = _GOOGLE_ARG.match(line)
            indent = len(line) - len(line.lstrip())
            if arg and (current is None or indent <= _arg_indent(lines, current)):
                current = arg.group(1).lstrip("*")
                params[current] = arg.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
            continue
        if current and line.strip() and line.startswith((" ", "\t")):
            params[current] = (params[current] + " " + line.strip()).strip()
            continue
        current = None
        description.append(line)
    return "\n".join(description).strip(), params


def _arg_indent(lines: list[str], name: str) -> int:
    for line in lines:
        if re.match(rf"^\s*\*{{0,2}}{re.escape(name)}\s*(\(|:)", line):
            return len(line) - len(line.lstrip())
    return 0


def schema_from_signature(
    function: Callable[..., Any], *, skip: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Build an object schema for `function`'s parameters from its type hints, defaults and docstring."""
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - unresolvable forward references fall back to raw annotations
        hints = {}
    _, docs = parse_docstring(function.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in signature.parameters.items():
        if name in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = dict(schema_for_annotation(hints.get(name, param.annotation)))
        if docs.get(name):
            prop["description"] = docs[name]
        if param.default is param.empty:
            required.append(name)
        elif param.default is not None and _is_json(param.default):
            prop["default"] = param.default
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if not any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        # The call would fail on an unknown keyword anyway; saying so before it names the argument to fix.
        schema["additionalProperties"] = False
    return schema


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
