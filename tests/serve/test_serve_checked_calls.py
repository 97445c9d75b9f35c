"""`mylm serve` checks calls as `mylm eval` scores them (`ModelStep.turn(check_calls=True)`): what Qwen2.5-Coder-1.5B
wrote for BFCL questions, through the OpenAI SDK. Before, only `mylm eval` dropped a plan's made-up next steps and
asked about values from nowhere, so a client of `mylm serve` got a correction round trip, or the wrong call."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.providers.servers import OpenAIServer
from tests.serve.support import serving

#: BFCL simple_python_4: the right call, then the plan's next steps as tools that do not exist.
QUADRATIC = {"type": "function", "function": {
    "name": "solve_quadratic_equation", "description": "Function solves the quadratic equation and returns its roots.",
    "parameters": {"type": "object", "properties": {k: {"type": "integer"} for k in "abc"},
                   "required": ["a", "b", "c"]}}}
PLAN = ('<tool_code>\n<name>solve_quadratic_equation</name>\n<parameters>\n{"a": 2, "b": 6, "c": 5}\n</parameters>\n'
        '</tool_code>\n<tool_code>\n<name>calculate_discriminant</name>\n<parameters>\n{"a": 2, "b": 6, "c": 5}\n'
        '</parameters>\n</tool_code>\n<tool_code>\n<name>find_roots</name>\n<parameters>\n{"discriminant": 16}\n'
        '</parameters>\n</tool_code>\n<tool_code>\n<name>display_roots</name>\n<parameters>\n{"roots": [-1, -5]}\n'
        '</parameters>\n</tool_code>\n')
#: BFCL irrelevance_5: the one tool at hand, with coefficients the question never gives.
NOWHERE = ('<tool_code>\n<name>solve_quadratic_equation</name>\n<parameters>\n{"a": 1.0, "b": 2.0, "c": -9.0}\n'
           '</parameters>\n</tool_code>\n')
PERIMETER = "<final_answer>The perimeter of a rectangle with length 5 meters and width 4 meters is 18 meters.</final_answer>"


def _ask(url: str, question: str) -> Any:
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}],
                                              tools=[QUADRATIC])  # type: ignore[list-item]


def test_the_real_call_goes_out_and_the_plans_made_up_tools_are_dropped() -> None:
    with OpenAIServer([PLAN]) as upstream, serving(upstream.base_url) as url:
        reply = _ask(url, "Solve a quadratic equation where a=2, b=6, and c=5")
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []] == [
        ("solve_quadratic_equation", {"a": 2, "b": 6, "c": 5})]
    assert len(upstream.requests) == 1  # no correction round trip


def test_a_call_with_values_from_nowhere_is_asked_about_and_the_answer_comes_back() -> None:
    with OpenAIServer([NOWHERE, PERIMETER]) as upstream, serving(upstream.base_url) as url:
        reply = _ask(url, "What is the perimeter of a rectangle with length 5 meters and width 4 meters?")
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert "18 meters" in (choice.message.content or "")
    correction = upstream.requests[1].body["messages"][-1]["content"]
    assert "come from the task" in correction and "a=1.0" in correction
