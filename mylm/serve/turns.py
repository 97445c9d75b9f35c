"""What a client sees of a reply: reasoning as it streams, and the text only once the reply is known to be an
answer or the thought before a call (docs/serve.md, "What comes before a call"); never a protocol tag in the
spelling the grammar forces (`< observation>`) or a neutralised one (`&lt;tool_code>`)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

from ..agent.step import StepOutcome
from ..core.types import Event, ReasoningEvent, Usage, UsageEvent
from ..protocol.tags import answer_shown as shown
from .wire import Finish, Finished, Out, ReasoningOut, TextOut

#: Sees the events of a request's upstream calls (a trace of the request); see `Core.run`.
Observe = Callable[[Event], None]

def relay(steps: Generator[Any, None, StepOutcome], counted: list[bool],
           observe: Observe | None = None) -> Generator[Out, None, StepOutcome]:
    """The step's reasoning as the server's `ReasoningOut` items as it streams; returns its outcome. Its text is
    held: until the reply has ended nobody knows whether it is the answer or the thought before a call (see
    `answered` and `thought_of`). `counted[0]` is set once the upstream has reported usage, `counted[1]` once
    reasoning was sent; `observe` sees every event."""
    try:
        while True:
            try:
                event = next(steps)
            except StopIteration as stop:
                result: StepOutcome = stop.value
                return result
            if observe is not None:
                observe(event)
            if isinstance(event, ReasoningEvent):
                if event.text:
                    counted[1] = True
                    yield ReasoningOut(event.text)
            elif isinstance(event, UsageEvent):
                counted[0] = True
    finally:
        steps.close()  # a client gone mid-reply: the upstream stream is released now, not when collected


def thought_of(thought: str, after: list[bool] | None = None) -> Iterator[Out]:
    """The prose a reply wrote before its calls, sent as reasoning. As content it would reach the client ahead
    of the calls, and clients take content for the answer: pydantic-ai's `run_stream` ends the run on the first
    text and never runs the tool, Codex prints it (even a lone newline) as a message of its own. `after[1]`:
    reasoning was sent before it (a blank line then parts the two)."""
    thought = shown(thought)
    if thought:
        yield ReasoningOut(("\n\n" if after and after[1] else "") + thought)


def answered(thought: str, final: str | None, reason: Finish, usage: Usage | None,
             after: list[bool] | None = None) -> Iterator[Out]:
    """A reply without calls: the answer as content (the `<final_answer>` if the model wrote one, its prose before
    that as reasoning), then the end."""
    answer = shown(final if final is not None else thought)
    before = thought[: thought.rfind(final)] if final and final in thought else ""
    yield from thought_of(before, after)
    if answer:
        yield TextOut(answer)
    yield Finished(reason, usage, answer)
