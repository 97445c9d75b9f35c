"""`ModelStep.check_call`: a caller that runs no tools (`mylm serve`) still learns which calls can be handed on,
and gets the correction for the others."""

from __future__ import annotations

from mylm.agent.step import ModelStep, StepConfig, ToolDefinition
from mylm.testing import ScriptedLLM
from mylm.core.types import ToolCall

WEATHER = ToolDefinition(
    "get_weather", "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
     "required": ["city"]},
)
SEARCH = ToolDefinition("search", "Search.", {"type": "object", "properties": {"q": {"type": "string"}}})


def step(**config: object) -> ModelStep:
    return ModelStep(ScriptedLLM([]), [WEATHER, SEARCH], StepConfig(**config))  # type: ignore[arg-type]


def test_a_valid_call_passes_with_its_arguments_coerced_by_the_schema() -> None:
    s = step()
    checked, problem = s.check_call(ToolCall("get_weather", {"city": "Oslo", "days": "2"}), s.corrections())
    assert problem is None and checked.arguments == {"city": "Oslo", "days": 2}


def test_unknown_tools_and_bad_arguments_get_observations_that_escalate() -> None:
    s = step()
    corrections = s.corrections()
    _, unknown = s.check_call(ToolCall("get_wether", {"city": "Oslo"}), corrections)
    assert unknown is not None and "Did you mean 'get_weather'" in unknown and unknown.startswith("<observation>")
    _, first = s.check_call(ToolCall("get_weather", {"city": "Oslo", "days": 0}), corrections)
    _, again = s.check_call(ToolCall("get_weather", {"city": "Oslo", "days": 0}), corrections)
    assert first is not None and "days" in first and again is not None and again != first
    # The repeated mistake gets a ready-made block to copy, as written: the model's values where they fit (an
    # optional argument that broke the schema is left out), never a placeholder.
    assert '<name>get_weather</name>\n<parameters>\n{"city": "Oslo"}\n</parameters>' in again
    assert "VALUE" not in again and "&lt;" not in again


def test_the_tool_choice_refuses_other_tools() -> None:
    s = step(tool_choice="get_weather")
    _, refused = s.check_call(ToolCall("search", {"q": "x"}), s.corrections())
    assert refused is not None and "only get_weather may be called" in refused
