"""A minimal agent loop over an endpoint's own tool calling, so `mylm eval` can set it beside mylm's protocol.

It runs the same builtin tools, with the same permission hook (approval policy and sandbox), in the same fresh
workspace as the protocol agent, and stops the same ways (an answer, the iteration cap, the deadline); it does
nothing else. The conversation is OpenAI's chat shapes: the assistant's `tool_calls` and `tool` results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import LLMError
from ..core.types import Message, Permission, ToolCall
from ..llm import LLM, FinishChunk, LLMRequest, NativeTools, TextChunk
from ..tools.base import Tool, ToolContext, run_tool

#: The system message of a native run: what a plain tool-calling client would say.
SYSTEM = (
    "You are a coding agent working in the directory {workspace}. Use the tools to look at and change files "
    "and to run commands there. When the task is done, reply with the answer only, without calling a tool."
)
#: The most characters of one tool result sent back (the protocol agent pages longer output; this loop cuts).
MAX_RESULT_CHARS = 8000

Permit = Callable[[ToolCall, Tool], Permission]


@dataclass
class NativeRun:
    """What a native run did."""

    answer: str = ""
    stop_reason: str = "final_answer"
    turns: int = 0
    #: Calls that could not run: an unknown tool, unreadable or invalid arguments, a refused call.
    bad_calls: int = 0
    tool_results: int = 0
    #: Turns without native calls whose text held calls (the endpoint's parser missed them).
    in_text: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generation_seconds: float = 0.0
    error: str | None = None
    log: list[dict[str, Any]] = field(default_factory=list)


def wire_tool(tool: Tool) -> dict[str, Any]:
    """A mylm tool in OpenAI's `tools` shape."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": dict(tool.parameters)}}


def run_native(llm: LLM, tools: Sequence[Tool], prompt: str, workspace: Path, *, permit: Permit | None,
               max_iterations: int, timeout: float, max_tokens: int) -> NativeRun:
    """Run `prompt` to an answer with the endpoint's native tool calling."""
    from ..serve.native import Forwarding, arguments_of
    from .modes import calls_in_text

    deadline = time.monotonic() + timeout
    by_name = {t.name: t for t in tools}
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM.format(workspace=workspace)},
                                      {"role": "user", "content": prompt}]
    run = NativeRun()
    for _ in range(max_iterations):
        if time.monotonic() >= deadline:
            run.stop_reason = "timeout"
            return run
        forwarding = Forwarding(llm, NativeTools(tuple(messages), tuple(wire_tool(t) for t in tools), parallel=None))
        request = LLMRequest(messages=(Message("user", prompt),), max_tokens=max_tokens, deadline=deadline)
        started = time.perf_counter()
        text: list[str] = []
        finish: FinishChunk | None = None
        try:
            for chunk in forwarding.stream(request):
                if isinstance(chunk, TextChunk):
                    text.append(chunk.text)
                elif isinstance(chunk, FinishChunk):
                    finish = chunk
        except LLMError as error:
            run.stop_reason, run.error = "error", str(error)
            return run
        run.generation_seconds += time.perf_counter() - started
        run.turns += 1
        if finish is not None and finish.usage is not None:
            run.prompt_tokens += finish.usage.prompt_tokens
            run.completion_tokens += finish.usage.completion_tokens
        reply = "".join(text)
        calls = forwarding.calls
        run.log.append({"text": reply, "calls": [{"name": c.name, "arguments": c.arguments} for c in calls],
                        "finish": finish.reason if finish else None})
        if not calls:
            run.in_text += calls_in_text(reply, set(by_name))
            run.answer = reply
            return run
        messages.append({"role": "assistant", "content": reply, "tool_calls": [
            {"id": c.id or f"call_{run.turns}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]})
        for i, call in enumerate(calls):
            arguments, problem = arguments_of(call.arguments)
            result = _run_call(by_name.get(call.name), call.name, arguments, problem, permit, workspace, deadline)
            run.bad_calls += result.startswith("Error:")
            run.tool_results += 1
            messages.append({"role": "tool", "tool_call_id": call.id or f"call_{run.turns}_{i}",
                             "content": result[:MAX_RESULT_CHARS]})
    run.stop_reason = "max_iterations"
    return run


def _run_call(tool: Tool | None, name: str, arguments: Mapping[str, Any] | None, problem: str | None,
              permit: Permit | None, workspace: Path, deadline: float) -> str:
    """One call's result text; `Error: ...` when it could not run or failed."""
    if tool is None:
        return f"Error: there is no tool named {name!r}"
    if arguments is None:
        return f"Error: {problem}"
    checked, problems = tool.validate(arguments)
    if problems:
        return "Error: invalid arguments: " + "; ".join(problems)
    permission = permit(ToolCall(name, checked), tool) if permit is not None else Permission.allow()
    if not permission.allowed:
        return f"Error: {permission.reason}"
    outcome = run_tool(tool, checked, ToolContext(deadline=deadline, workspace=workspace, grant=permission.grant))
    return f"Error: {outcome.output}" if outcome.is_error else outcome.output

