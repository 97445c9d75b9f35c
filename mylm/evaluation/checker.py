"""Scoring a model's calls the way BFCL's AST checker does (our own code, written from its rules).

A question lists function docs (BFCL's JSON-schema-ish types: `string`, `integer`, `float`, `boolean`, `array`,
`tuple`, `dict`, `any`) and a ground truth: per expected call, `{name: {param: [possible values]}}`, where `""`
among the possible values marks an optional parameter. A call passes when:

- its function name is the expected one;
- every required parameter is present, and no parameter is unknown (neither in the doc nor in the answer);
- each value has the doc's type (an int is accepted for a float; a value of the answer's own type is accepted
  when the answer lists a variable's name instead of a literal), array items of the item type;
- each value is among the possible ones: strings compared case-insensitively without spaces and `,./-_*^`,
  lists element by element the same way, dicts key by key (missing keys only where optional);
- every parameter the answer expects is given, unless the answer marks it optional.

Categories: `parallel*` match the calls to the expected ones in any order (each call used once); `multiple*`
and the simple ones expect exactly one call; `*irrelevance` pass when there is no call at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: BFCL's type names as Python types (`tuple` arrives as a JSON list; `any` is checked as a string).
PYTHON_TYPES: Mapping[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list, "dict": dict,
    "any": str,
}
#: Types whose items are type-checked too (one level deep, as BFCL does).
_NESTED = ("array", "tuple")
#: What string comparison ignores, besides case: spaces and these punctuation marks.
_IGNORED = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Call:
    """One call a model made: the function's name (BFCL's own, dots included) and its arguments."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """Whether the calls answer the question; if not, `kind` (a short tag for tables) and a readable `reason`."""

    valid: bool
    kind: str = ""
    reason: str = ""


PASS = Verdict(True)


def is_irrelevance(category: str) -> bool:
    """Whether the category's questions have no fitting function (the right answer is no call)."""
    return "irrelevance" in category


def check(category: str, functions: Sequence[Mapping[str, Any]], calls: Sequence[Call],
          answers: Sequence[Mapping[str, Mapping[str, Sequence[Any]]]] | None) -> Verdict:
    """Score `calls` for a question of `category` with these function docs and expected calls."""
    if is_irrelevance(category):
        if calls:
            return Verdict(False, "called", f"no function fits, but the model called {calls[0].name}")
        return PASS
    expected = list(answers or ())
    if len(calls) != len(expected):
        return Verdict(False, "wrong_count", f"{len(calls)} call(s), {len(expected)} expected")
    if "parallel" in category:
        return _unordered(functions, calls, expected)
    return check_call(_doc(functions, _name_of(expected[0])), calls[0], expected[0])


def _name_of(answer: Mapping[str, Any]) -> str:
    return next(iter(answer))


def _doc(functions: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    found = next((f for f in functions if f.get("name") == name), None)
    return found if found is not None else {"name": name, "parameters": {"properties": {}, "required": []}}


def _unordered(functions: Sequence[Mapping[str, Any]], calls: Sequence[Call],
               expected: Sequence[Mapping[str, Any]]) -> Verdict:
    """Parallel calls: a one-to-one pairing of calls and expected calls where every pair passes (any order).

    BFCL pairs greedily; a full matching (augmenting paths) differs only where one call fits two expected
    calls, and then never fails a set of calls that a greedy pass accepts."""
    fits = [[check_call(_doc(functions, _name_of(want)), call, want).valid for call in calls] for want in expected]
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j, ok in enumerate(fits[i]):
            if ok and j not in seen:
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i, want in enumerate(expected):
        if not place(i, set()):
            reasons = [check_call(_doc(functions, _name_of(want)), c, want).reason for c in calls]
            return Verdict(False, "no_match", f"no call matches expected call {i + 1} ({_name_of(want)}): "
                           + "; ".join(r for r in reasons if r)[:300])
    return PASS


def check_call(doc: Mapping[str, Any], call: Call, answer: Mapping[str, Mapping[str, Sequence[Any]]]) -> Verdict:
    """One call against one expected call (`{name: {param: [possible values]}}`) and its function's doc."""
    name = _name_of(answer)
    possible = answer[name]
    if call.name != name:
        return Verdict(False, "wrong_name", f"called {call.name}, expected {name}")
    params = dict(doc.get("parameters") or {})
    properties: Mapping[str, Any] = params.get("properties") or {}
    for required in params.get("required") or ():
        if required not in call.arguments:
            return Verdict(False, "missing_required", f"{name}: missing required parameter {required!r}")
    for param, value in call.arguments.items():
        if param not in properties or param not in possible:
            return Verdict(False, "unexpected_param", f"{name}: unexpected parameter {param!r}")
        verdict = _check_value(name, param, value, properties[param], possible[param])
        if not verdict.valid:
            return verdict
    for param, values in possible.items():
        if param not in call.arguments and "" not in values:
            return Verdict(False, "missing_param", f"{name}: parameter {param!r} is expected and not optional")
    return PASS


def _check_value(name: str, param: str, value: Any, schema: Mapping[str, Any], possible: Sequence[Any]) -> Verdict:
    declared = str(schema.get("type", "any"))
    wanted = PYTHON_TYPES.get(declared, str)
    item_type = None
    if declared in _NESTED:
        item_type = PYTHON_TYPES.get(str((schema.get("items") or {}).get("type", "any")), str)
    if declared == "float" and type(value) is int:
        value = float(value)  # Python would take an int where a float is asked
    typed, variable = _type_ok(value, possible, wanted, item_type)
    if not typed:
        return Verdict(False, "type", f"{name}: {param!r} should be {declared}, got {type(value).__name__} "
                       f"{_short(value)}")
    if not variable:
        if wanted is dict:
            return _verdict(_dict_ok(value, possible), name, param, value, possible)
        if wanted is list and item_type is dict:
            return _verdict(_dicts_ok(value, possible), name, param, value, possible)
        if wanted is str:
            ok = _norm(value) in [_norm(p) for p in possible if isinstance(p, str)]
            return _verdict(ok, name, param, value, possible)
        if wanted is list:
            return _verdict(_norm_list(value) in [_norm_list(p) for p in possible if isinstance(p, list)],
                            name, param, value, possible)
    return _verdict(value in possible, name, param, value, possible)


def _verdict(ok: bool, name: str, param: str, value: Any, possible: Sequence[Any]) -> Verdict:
    if ok:
        return PASS
    return Verdict(False, "value", f"{name}: {param}={_short(value)} is not among {_short(list(possible))}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _answer_type(possible: Sequence[Any]) -> type | None:
    """The type of the first non-optional possible value (None: only `""`, the type is unknown)."""
    return next((type(p) for p in possible if p != ""), None)


def _type_ok(value: Any, possible: Sequence[Any], wanted: type, item_type: type | None) -> tuple[bool, bool]:
    """(whether the value's type is acceptable, whether the answer names a variable rather than a literal).

    A possible value of another type than the doc's means the answer holds a variable's name; a value of that
    type is then accepted too, and compared as it is."""
    answer_type = _answer_type(possible)
    variable = answer_type is not None and answer_type is not wanted
    items: Any = value  # a list when item_type is set (mypy narrows `value` to object below)
    if type(value) is wanted:
        if item_type is None:
            return True, variable
        for candidate in possible:
            # A possible value that is not a list (the optional marker) puts no constraint on the items; in a
            # list, each item has the item type or the type of the candidate's own items (a variable's name).
            if not isinstance(candidate, list):
                return True, variable
            inner = _answer_type(candidate)
            if all(type(v) is item_type or (inner is not None and type(v) is inner) for v in items):
                return True, variable
    # The value may be written as the variable the answer names (or, for a list whose items failed, compared
    # as it is).
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, variable


def _norm(text: str) -> str:
    """BFCL's string normalisation: no spaces or `,./-_*^`, lower case, single quotes as double."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def _norm_list(values: Any) -> Any:
    if not isinstance(values, list):
        return values
    return [_norm(v) if isinstance(v, str) else v for v in values]


def _dict_ok(value: Mapping[str, Any], possible: Sequence[Any]) -> bool:
    """A dict value against each possible dict: every key known and its value possible; absent keys optional."""
    for candidate in possible:
        if not isinstance(candidate, dict):
            continue
        if _one_dict_ok(value, candidate):
            return True
    return False


def _one_dict_ok(value: Mapping[str, Any], candidate: Mapping[str, Sequence[Any]]) -> bool:
    for key, item in value.items():
        if key not in candidate:
            return False
        options = [_norm(o) if isinstance(o, str) else o for o in candidate[key]]
        if (_norm(item) if isinstance(item, str) else item) not in options:
            return False
    return all(key in value or "" in options for key, options in candidate.items())


def _dicts_ok(value: Sequence[Any], possible: Sequence[Any]) -> bool:
    """A list of dicts against each possible list: the same length, and each dict fits its counterpart."""
    for candidate in possible:
        if not isinstance(candidate, list) or len(candidate) != len(value):
            continue
        if all(isinstance(v, dict) and isinstance(c, dict) and _one_dict_ok(v, c) for v, c in zip(value, candidate)):
            return True
    return False
