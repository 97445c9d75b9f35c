"""JSON Schema to GBNF: the JSON values a tool's parameters schema allows, as grammar rules.

Enforced: `type` (and type lists), `enum`, `const`, `anyOf`/`oneOf` (as alternatives), `allOf` (merged), local
`$ref` (recursion allowed), `properties` in declared order with `required` ones mandatory and no others (so
`additionalProperties: false` holds whatever it says), `additionalProperties` as a schema when there are no
`properties`, `items` (and tuple `items`/`prefixItems`), `minItems`/`maxItems`, and
`minimum >= 0` (no minus sign; no zero for integers with `minimum >= 1`), `minLength` up to 16. Not
enforced, so the tool's own validation still reports them: larger `minLength`, `maxLength`, `pattern`,
`format`, other numeric bounds, `multipleOf`, `uniqueItems`, `minProperties`, `maxProperties`, `not`.
Numbers are limited to 19 integer digits and 3 exponent digits.

Strings never contain a raw `</` (it is written `<\\/`, as mylm's canonical form does), so a parameter value
can never look like the end of the block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.jsonref import resolve_ref
from ..protocol.canonical import canonical_arguments
from .gbnf import Rules, literal

#: Optional whitespace between JSON tokens: at most one space, so a model cannot spin on blank output.
WS = '" "?'
_MAX_DEPTH = 32
_MAX_REPEAT = 64
#: Larger `minLength` values are left to the tool's validation (the grammar would grow with them).
_MAX_MIN_LENGTH = 16


class SchemaCompiler:
    """Compiles the schemas of one grammar into shared rules (`$ref` targets are compiled once)."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self._primitives: dict[str, str] = {}
        self._refs: dict[tuple[int, str], str] = {}

    # ------------------------------------------------------------------------------------------ values

    def value(self, schema: Any, hint: str, root: Any = None, depth: int = 0) -> str | None:
        """A grammar expression for the JSON values `schema` allows (None: no value is allowed)."""
        root = schema if root is None else root
        if schema is False:
            return None
        if schema is True or not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return self.any_value()
        if isinstance(schema.get("$ref"), str):
            return self._ref(schema, hint, root, depth)
        if schema.get("allOf"):
            merged = _merge_all_of(schema, root)
            return self.value(merged, hint, root, depth + 1)
        if "const" in schema:
            return literal(_json(schema["const"]))
        if isinstance(schema.get("enum"), list):
            values = [v for v in schema["enum"] if _matches_type(schema.get("type"), v)]
            return self._choice(hint, [literal(_json(v)) for v in values])
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                parts = [
                    self.value({**base, **option} if isinstance(option, Mapping) and base else option,
                               f"{hint}-{i}", root, depth + 1)
                    for i, option in enumerate(options)
                ]
                return self._choice(hint, [p for p in parts if p is not None])
        kind = schema.get("type")
        if isinstance(kind, list):
            parts = [self.value({**schema, "type": k}, f"{hint}-{k}", root, depth + 1) for k in kind]
            return self._choice(hint, [p for p in parts if p is not None])
        if kind == "string":
            return self._string(schema)
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"null"'
        if kind == "array" or (kind is None and ("items" in schema or "prefixItems" in schema)):
            return self._array(schema, hint, root, depth)
        if kind == "object" or (kind is None and ("properties" in schema or "required" in schema)):
            return self._object(schema, hint, root, depth)
        return self.any_value()

    def _choice(self, hint: str, parts: Sequence[str]) -> str | None:
        unique = list(dict.fromkeys(parts))
        if not unique:
            return None
        if len(unique) == 1:
            return unique[0]
        return self.rules.add(hint, " | ".join(unique))

    def _ref(self, schema: Mapping[str, Any], hint: str, root: Any, depth: int) -> str | None:
        ref = schema["$ref"]
        key = (id(root), ref)
        if key in self._refs:
            return self._refs[key]
        target = resolve_ref(root, ref)
        if target is None:
            target = True  # a reference to nowhere (or elsewhere) constrains nothing
        name = self.rules.reserve(f"{hint}-{ref.rsplit('/', 1)[-1]}")
        self._refs[key] = name
        body = self.value(target, name, root, depth + 1)
        self.rules.define(name, body if body is not None else '"null"')
        return name

    # ----------------------------------------------------------------------------------------- scalars

    def _primitive(self, name: str, body: str) -> str:
        if name not in self._primitives:
            self._primitives[name] = self.rules.add(name, body)
        return self._primitives[name]

    def _string(self, schema: Mapping[str, Any]) -> str:
        """A string of at least `minLength` characters (up to `_MAX_MIN_LENGTH`; `maxLength` not enforced)."""
        low = _count(schema.get("minLength"), 0) or 0
        if low == 0 or low > _MAX_MIN_LENGTH:
            return self.string()
        self.string()  # defines the shared body rule
        # One piece is at least one decoded character: no \uD800-\uDFFF escape (a surrogate pair: two escapes
        # for one character); a `<` run is taken with the character after it, or ends the string.
        escape = self._primitive(
            "json-escape-bmp",
            '"\\\\" (["\\\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))',
        )
        piece = self._primitive(
            "json-piece", f'[^"\\\\<\\x00-\\x1F] | {escape} | "<"+ ([^"\\\\</\\x00-\\x1F] | {escape})'
        )
        rest = self._primitive_name("json-string-body")
        return self.rules.add(
            f"json-string-min{low}", f'"\\"" {piece}{{{low - 1}}} ({piece} {rest} | "<"+) "\\""'
        )

    def _primitive_name(self, name: str) -> str:
        return self._primitives[name]

    def string(self) -> str:
        """Any JSON string without a raw `</`."""
        escape = self._primitive("json-escape", '"\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})')
        plain = '[^"\\\\<\\x00-\\x1F]'
        # A run of `<` must be followed by something other than `/`; it may also end the string.
        body = self._primitive(
            "json-string-body",
            f'({plain} | {escape} | "<"+ ([^"\\\\</\\x00-\\x1F] | {escape}))* "<"*',
        )
        return self._primitive("json-string", f'"\\"" {body} "\\""')

    def _integer(self, schema: Mapping[str, Any]) -> str:
        low = schema.get("minimum")
        if isinstance(low, (int, float)) and not isinstance(low, bool) and low >= 1:
            # `minimum: 1` (a line number, a count) is common: no zero; larger minimums are left to validation
            return self._primitive("json-posint", '[1-9] [0-9]{0,18}')
        if _non_negative(schema):
            return self._primitive("json-uint", '("0" | [1-9] [0-9]{0,18})')
        return self._primitive("json-int", '"-"? ("0" | [1-9] [0-9]{0,18})')

    def _number(self, schema: Mapping[str, Any]) -> str:
        sign = "" if _non_negative(schema) else '"-"? '
        name = "json-unumber" if not sign else "json-number"
        return self._primitive(
            name, f'{sign}("0" | [1-9] [0-9]{{0,18}}) ("." [0-9]{{1,20}})? ([eE] [-+]? [0-9]{{1,3}})?'
        )

    def any_value(self) -> str:
        """Any JSON value."""
        if "json-value" in self._primitives:
            return self._primitives["json-value"]
        name = self.rules.reserve("json-value")
        self._primitives["json-value"] = name
        string = self.string()
        number = self._number({})
        obj = self.rules.add(
            "json-object", f'"{{" {WS} ({string} {WS} ":" {WS} {name} ({WS} "," {WS} {string} {WS} ":" {WS} '
            f'{name})*)? {WS} "}}"'
        )
        arr = self.rules.add("json-array", f'"[" {WS} ({name} ({WS} "," {WS} {name})*)? {WS} "]"')
        self.rules.define(name, f'{obj} | {arr} | {string} | {number} | "true" | "false" | "null"')
        return name

    # ------------------------------------------------------------------------------------- containers

    def _array(self, schema: Mapping[str, Any], hint: str, root: Any, depth: int) -> str | None:
        items = schema.get("prefixItems", schema.get("items"))
        if isinstance(items, list):  # a tuple: exactly these, in order
            parts = [self.value(s, f"{hint}-{i}", root, depth + 1) for i, s in enumerate(items)]
            if any(p is None for p in parts):
                return None
            inner = f' {WS} "," {WS} '.join(p for p in parts if p)
            return self.rules.add(hint, f'"[" {WS} {inner} {WS} "]"' if parts else '"[" "]"')
        item = self.value(items if items is not None else True, f"{hint}-item", root, depth + 1)
        low = _count(schema.get("minItems"), 0) or 0
        high = _count(schema.get("maxItems"), None)
        if item is None:
            return '"[" "]"' if low == 0 else None
        if high is not None and high < low:
            return None
        if high == 0:
            return self.rules.add(hint, f'"[" {WS} "]"')
        more = f'({WS} "," {WS} {item})'
        rest_low = max(low - 1, 0)
        top = None if high is None else max(min(high, _MAX_REPEAT), low) - 1
        rest = f"{more}{{{rest_low},}}" if top is None else f"{more}{{{rest_low},{top}}}"
        listed = f"{item} {rest}"
        body = f'"[" {WS} {listed} {WS} "]"' if low > 0 else f'"[" {WS} ({listed})? {WS} "]"'
        return self.rules.add(hint, body)

    def _object(self, schema: Mapping[str, Any], hint: str, root: Any, depth: int) -> str | None:
        properties = schema.get("properties")
        properties = dict(properties) if isinstance(properties, Mapping) else {}
        required = [r for r in schema.get("required") or () if isinstance(r, str)]
        for name in required:
            properties.setdefault(name, True)
        if not properties:
            extra = schema.get("additionalProperties", True)
            if extra is False:
                return self.rules.add(hint, f'"{{" {WS} "}}"')
            value = self.value(extra, f"{hint}-value", root, depth + 1)
            if value is None:
                return self.rules.add(hint, f'"{{" {WS} "}}"')
            string = self.string()
            pair = f'{string} {WS} ":" {WS} {value}'
            return self.rules.add(hint, f'"{{" {WS} ({pair} ({WS} "," {WS} {pair})*)? {WS} "}}"')
        members: list[tuple[str, bool]] = []
        for name, prop in properties.items():
            value = self.value(prop, f"{hint}-{name}", root, depth + 1)
            if value is None:
                if name in required:
                    return None  # a required property no value satisfies: the object is impossible
                continue
            members.append((f"{literal(_json(name))} {WS} \":\" {WS} {value}", name in required))
        return self.rules.add(hint, f'"{{" {WS} {self._members(hint, members)} {WS} "}}"')

    def _members(self, hint: str, members: list[tuple[str, bool]]) -> str:
        """Members in declared order, optional ones optional, commas only between members written."""
        # after[(i, first)]: the members from i on; `first` says whether nothing has been written before them.
        after: dict[tuple[int, bool], str] = {(len(members), True): "", (len(members), False): ""}
        for i in range(len(members) - 1, -1, -1):
            pair, needed = members[i]
            for first in (True, False):
                lead = "" if first else f'{WS} "," {WS} '
                rest = after[(i + 1, False)]
                take = f"{lead}{pair}" + (f" {rest}" if rest else "")
                skip = after[(i + 1, first)]
                if needed:
                    body = take
                elif skip:
                    body = f"{take} | {skip}"
                else:
                    body = f"({take})?"
                after[(i, first)] = self.rules.add(f"{hint}-m{i}{'a' if first else 'b'}", body)
        return after[(0, True)]


def _json(value: Any) -> str:
    """A value as mylm writes it in a canonical call (so canonical calls are accepted)."""
    return canonical_arguments({"v": value})[len('{"v": '):-1]


def _count(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _non_negative(schema: Mapping[str, Any]) -> bool:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    return isinstance(low, (int, float)) and not isinstance(low, bool) and low >= 0


def _matches_type(kind: Any, value: Any) -> bool:
    if kind is None:
        return True
    kinds = kind if isinstance(kind, list) else [kind]
    for k in kinds:
        if k == "string" and isinstance(value, str):
            return True
        if k == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if k == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if k == "boolean" and isinstance(value, bool):
            return True
        if k == "null" and value is None:
            return True
        if k == "array" and isinstance(value, list):
            return True
        if k == "object" and isinstance(value, dict):
            return True
    return False


def _merge_all_of(schema: Mapping[str, Any], root: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema.get("allOf") or ():
        while isinstance(part, Mapping) and isinstance(part.get("$ref"), str):
            target = resolve_ref(root, part["$ref"])
            rest = {k: v for k, v in part.items() if k != "$ref"}
            part = {**target, **rest} if isinstance(target, Mapping) else rest
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, Mapping):
                merged["properties"] = {**(merged.get("properties") or {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = list(dict.fromkeys([*(merged.get("required") or []), *value]))
            else:
                merged.setdefault(key, value)
    return merged


__all__ = ["WS", "SchemaCompiler"]
