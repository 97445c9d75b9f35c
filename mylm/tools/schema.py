"""JSON Schema for tools: derive one from a Python signature, and validate arguments with messages for the model."""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Literal, Mapping, Union, get_args, get_origin

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


def schema_from_signature(function: Callable[..., Any], *, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
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
        if name in docs and docs[name]:
            prop["description"] = docs[name]
        if param.default is param.empty:
            required.append(name)
        elif param.default is not None and _is_json(param.default):
            prop["default"] = param.default
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# ------------------------------------------------------------------------------------------- validation


def _type_ok(value: Any, expected: str) -> bool:
    if expected == "string":
        return isinstance(value, str)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer()
        )
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "array":
        return isinstance(value, list)
    if expected == "object":
        return isinstance(value, dict)
    if expected == "null":
        return value is None
    return True


def _coerce(value: Any, expected: str) -> Any:
    """Convert a value whose reading is unambiguous (`"30"` for an integer); return it unchanged otherwise."""
    if isinstance(value, str):
        text = value.strip()
        if expected == "integer" and re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        if expected == "number" and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
            return float(text) if any(c in text for c in ".eE") else int(text)
        if expected == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
    if expected == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    for py_type, name in (
        (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
        (list, "array"), (dict, "object"), (type(None), "null"),
    ):
        if isinstance(value, py_type):
            return name
    return type(value).__name__


def validate(schema: Mapping[str, Any], value: Any, *, path: str = "") -> tuple[Any, list[str]]:
    """Check `value` against `schema`; return the value (with unambiguous coercions) and the problems found.

    Each problem names the argument and says what was expected, so it can be fed back to the model as is.
    """
    problems: list[str] = []
    where = f"argument '{path}'" if path else "the parameters"
    expected = schema.get("type")
    if isinstance(expected, str):
        value = _coerce(value, expected)
        if not _type_ok(value, expected):
            problems.append(f"{where} must be {_article(expected)}, got {_type_name(value)} {_describe(value)}")
            return value, problems
    elif isinstance(expected, list) and expected:
        if not any(_type_ok(value, t) for t in expected):
            for t in expected:
                coerced = _coerce(value, t)
                if _type_ok(coerced, t):
                    value = coerced
                    break
            else:
                kinds = " or ".join(expected)
                problems.append(f"{where} must be {kinds}, got {_type_name(value)} {_describe(value)}")
                return value, problems
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(_describe(v) for v in schema["enum"])
        problems.append(f"{where} must be one of {choices}, got {_describe(value)}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where} must be {_describe(schema['const'])}")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = schema[key]
            for option in options:
                coerced, sub = validate(option, value, path=path)
                if not sub:
                    value = coerced
                    break
            else:
                _, first = validate(options[0], value, path=path) if options else (value, [])
                problems.append(first[0] if len(options) == 1 and first else f"{where} matches none of the allowed forms")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{where} must be at least {schema['minLength']} characters long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where} must be at most {schema['maxLength']} characters long")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where} must match the pattern {schema['pattern']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where} must be <= {schema['maximum']}, got {value}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{where} must have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where} must have at most {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            checked = []
            for i, item in enumerate(value):
                item, sub = validate(items, item, path=f"{path}[{i}]" if path else f"[{i}]")
                checked.append(item)
                problems.extend(sub)
            value = checked
    if isinstance(value, dict):
        value, sub = _validate_object(schema, value, path)
        problems.extend(sub)
    return value, problems


def _validate_object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties", {}) or {}
    out = dict(value)
    for name in schema.get("required", []) or []:
        if name not in value:
            full = f"{path}.{name}" if path else name
            hint = f" ({properties[name]['description']})" if properties.get(name, {}).get("description") else ""
            problems.append(f"missing required argument '{full}'{hint}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        full = f"{path}.{name}" if path else name
        if name in properties:
            out[name], sub = validate(properties[name], item, path=full)
            problems.extend(sub)
        elif extra is False:
            known = ", ".join(properties) or "none"
            problems.append(f"unknown argument '{full}' (accepted: {known})")
        elif isinstance(extra, Mapping):
            out[name], sub = validate(extra, item, path=full)
            problems.extend(sub)
    return out, problems


def _article(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind
