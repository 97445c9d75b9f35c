"""A real agent framework through `mylm serve`: LangChain's `ChatOpenAI(...).bind_tools` drives a multi-step tool
loop; the tools really run, and their results reach the model and the answer."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from tests.providers.servers import OpenAIServer
from tests.serve.support import call

langchain_openai = pytest.importorskip("langchain_openai")
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool


@pytest.mark.parametrize("streaming", [False, True])
def test_a_langchain_tool_loop_runs_two_tools_and_answers(
    upstream: OpenAIServer, served: str, streaming: bool
) -> None:
    ran: list[tuple[str, Any]] = []
    secret = secrets.token_hex(4)

    @tool
    def get_weather(city: str) -> str:
        """The current temperature in a city, in Celsius."""
        ran.append(("get_weather", city))
        return f"{city}: 21 C (reading {secret})"

    @tool
    def to_fahrenheit(celsius: float) -> str:
        """Convert a temperature from Celsius to Fahrenheit."""
        ran.append(("to_fahrenheit", celsius))
        return f"{celsius * 9 / 5 + 32:g} F"

    tools = {"get_weather": get_weather, "to_fahrenheit": to_fahrenheit}
    model = langchain_openai.ChatOpenAI(base_url=served + "/v1", api_key="unused", model="local-model",
                                        max_retries=0, streaming=streaming).bind_tools(list(tools.values()))
    upstream.script([
        # The model drifts into another call format on the first step, and calls canonically on the second.
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        call("to_fahrenheit", '{"celsius": 21}', "Now convert it."),
    ])
    messages: list[BaseMessage] = [HumanMessage("How warm is Paris in Fahrenheit?")]
    for _ in range(5):
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for tool_call in reply.tool_calls:
            output = tools[tool_call["name"]].invoke(tool_call["args"])
            messages.append(ToolMessage(output, tool_call_id=tool_call["id"]))
        if len(ran) == 2:
            # The scripted model "reads" the observations it was sent and answers with what they said.
            seen = upstream.requests[-1].body["messages"] if upstream.requests else []
            assert any(secret in m["content"] for m in seen)
            upstream.script([f"Paris is 69.8 F (reading {secret})."])
    assert ran == [("get_weather", "Paris"), ("to_fahrenheit", 21.0)]
    assert messages[-1].content == f"Paris is 69.8 F (reading {secret})."
    last = upstream.requests[-1].body["messages"]
    observations = [m["content"] for m in last if m["role"] == "user" and "<observation>" in m["content"]]
    assert any("69.8 F" in o for o in observations) and any(secret in o for o in observations)
    assert json.dumps(last).count("<tool_code>") >= 2  # both calls are in the history, canonically
