"""Argument validation: messages that teach the model, coercions, and the JSON Schema MCP servers send."""

from __future__ import annotations

from typing import Any, Literal

from mylm.tools import ToolContext, run_tool, tool
from mylm.tools.validation import validate

#: What pydantic generates for a nested model, as MCP servers built on FastMCP send it.
PYDANTIC = {
    "$defs": {
        "Unit": {"enum": ["c", "f"], "type": "string", "title": "Unit"},
        "Place": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit", "default": "c"}},
            "required": ["city"],
        },
    },
    "type": "object",
    "properties": {
        "place": {"$ref": "#/$defs/Place"},
        "days": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}], "default": None},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["place"],
}


def test_schema_resolves_refs_into_defs() -> None:
    value, problems = validate(PYDANTIC, {"place": {"city": "Oslo", "unit": "f"}, "days": "3"})
    assert problems == [] and value == {"place": {"city": "Oslo", "unit": "f"}, "days": 3}
    _, problems = validate(PYDANTIC, {"place": {"unit": "k"}, "days": 0, "tags": ["a", 1, "b", "c"]})
    assert problems == [
        "missing required argument 'place.city'",
        'argument \'place.unit\' must be one of "c", "f", got "k"',
        "argument 'days' must be > 0, got 0",
        "argument 'tags' must have at most 3 items, got 4",
    ]


def test_schema_survives_recursive_and_remote_refs() -> None:
    tree = {
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }
    deep: dict[str, Any] = {}
    for _ in range(200):
        deep = {"child": deep}
    assert validate(tree, deep)[1] == []
    assert validate({"$ref": "https://example.com/schema.json"}, {"x": 1})[1] == []
    assert validate({"$ref": "#/$defs/missing"}, 5)[1] == []


def test_schema_all_of_and_boolean_schemas() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"allOf": [{"type": "integer"}, {"minimum": 2}]}, "x": False},
    }
    assert validate(schema, {"n": 1, "x": 1})[1] == [
        "argument 'n' must be >= 2, got 1",
        "argument 'x' is not allowed",
    ]


def test_schema_coerces_only_unambiguous_values() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "a": {"type": "array"},
            "s": {"type": "string"},
        },
    }
    value, problems = validate(schema, {"n": "42", "f": "2.5", "b": "true", "a": '["x", "y"]', "s": 7})
    assert problems == [] and value == {"n": 42, "f": 2.5, "b": True, "a": ["x", "y"], "s": "7"}
    _, problems = validate(schema, {"n": "4x", "b": "yes", "a": "[not json"})
    assert problems == [
        "argument 'n' must be an integer, got string \"4x\"",
        "argument 'b' must be a boolean, got string \"yes\"",
        "argument 'a' must be an array, got string \"[not json\"",
    ]


def test_schema_tool_decorator_rejects_unknown_arguments_with_a_hint() -> None:
    @tool
    def forecast(city: str, days: int = 1, unit: Literal["c", "f"] = "c") -> str:
        """Weather forecast.

        Args:
            city: The city name.
            days: How many days.
        """
        return f"{city} {days} {unit}"

    assert forecast.parameters["additionalProperties"] is False
    assert forecast.validate({"cty": "Oslo", "day": 2})[1] == [
        "missing required argument 'city' (The city name.)",
        "unknown argument 'cty' (accepted: 'city', 'days', 'unit'); did you mean 'city'?",
        "unknown argument 'day' (accepted: 'city', 'days', 'unit'); did you mean 'days'?",
    ]
    assert forecast.validate({"city": "Oslo", "unit": "k"})[1] == [
        'argument \'unit\' must be one of "c", "f", got "k"'
    ]
    arguments, problems = forecast.validate({"city": "Oslo", "days": "3"})
    assert problems == [] and run_tool(forecast, arguments, ToolContext()).output == "Oslo 3 c"


def test_schema_tool_with_kwargs_accepts_extra_arguments() -> None:
    @tool
    def anything(**options: Any) -> str:
        """Takes whatever it is given."""
        return ",".join(sorted(options))

    assert "additionalProperties" not in anything.parameters
    assert anything.validate({"a": 1, "b": 2}) == ({"a": 1, "b": 2}, [])


def test_schema_tool_failures_become_error_outcomes() -> None:
    @tool
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    outcome = run_tool(divide, {"a": 1, "b": 0}, ToolContext())
    assert outcome.is_error and outcome.output == "ZeroDivisionError: division by zero"
