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
    #: The model began writing a tool result itself: `<observation>` or `<tool_response>` (also half-written at
    #: the very end, where a server stop cut it), or after a call an `Observation:`/`Result:` line or an `output`
    #: fence. The turn ended there; with no call before it, the reply opened with an invented result (what a
    #: `<observation>` stop string leaves as an empty reply), which deserves its own correction.
    invented_observation: bool = False
    #: The text read after the turn's end (the invented result as written, or what followed a one-call turn's
    #: call), as far as it was read: the stream may be closed there.
    discarded: str = ""
