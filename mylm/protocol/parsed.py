"""A parsed turn (`ParsedTurn`) and the events the parser emits while reading one."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.types import ReasoningEvent, TextEvent, ToolCall


@dataclass(frozen=True)
class CallParsed:
    """A complete tool call, certain to be part of the result, in order."""

    call: ToolCall


#: What the parser emits as text arrives: the loop's own text and reasoning events, and each complete call.
ParseEvent = TextEvent | ReasoningEvent | CallParsed


@dataclass(frozen=True)
class ParsedTurn:
    """What one model turn means: the calls to run, or the final answer, or an error to send back."""

    tool_calls: tuple[ToolCall, ...] = ()
    #: The answer when the turn has no call: `<final_answer>` content if present, else the visible text.
    final_answer: str | None = None
    #: Set when the turn is unusable; written for the model, telling it exactly what to fix.
    error: str | None = None
    #: Visible text outside blocks and reasoning (the model's thought when it calls a tool).
    thought: str = ""
    reasoning: str = ""
    #: The text the verdict was reached on (everything after a fabricated `<observation>` is dropped).
    text: str = ""
    #: Messages for blocks that were not run although other calls were (e.g. a second, broken block).
    warnings: tuple[str, ...] = ()
    #: The text ended inside reasoning that was never closed (e.g. a server stop fired mid-thought).
    unclosed_reasoning: bool = False
