"""The seam between the agent and a model endpoint: the `LLM` protocol, its request and its stream items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence, Union, runtime_checkable

from .cancel import CancelToken
from .constrain.select import CONSTRAIN_MODES as CONSTRAIN_MODES
from .constrain.select import ConstrainMode as ConstrainMode
from .constrain.select import Constraint as Constraint
from .types import Message, Usage


@dataclass(frozen=True)
class LLMRequest:
    """One completion request; `messages` starts with the system message."""

    messages: tuple[Message, ...]
    #: Stop strings to send where the endpoint accepts them (the agent also cuts client-side).
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    #: `time.monotonic()` value by which the whole call, streaming included, must end.
    deadline: float | None = None
    cancel: CancelToken | None = None
    #: A grammar to sample under, where the endpoint can; None: unconstrained.
    constraint: Constraint | None = None


@dataclass(frozen=True)
class TextChunk:
    """A piece of the completion's text."""

    text: str


@dataclass(frozen=True)
class ReasoningChunk:
    """A piece of reasoning the server sent in a separate field (`reasoning_content`, `thinking`)."""

    text: str


@dataclass(frozen=True)
class FinishChunk:
    """The end of the stream, with what the server said about it (all optional hints)."""

    #: The server's own finish value, lower-cased (`stop`, `length`, `end_turn`, `max_tokens`, ...).
    reason: str | None = None
    #: The stop string the server says fired, where it says so (llama.cpp, vLLM, Anthropic).
    stop_sequence: str | None = None
    usage: Usage | None = None


LLMChunk = Union[TextChunk, ReasoningChunk, FinishChunk]


@runtime_checkable
class LLM(Protocol):
    """A model endpoint: streams one completion for a request.

    Implementations yield `TextChunk`/`ReasoningChunk` items and at most one final `FinishChunk`; they raise
    `mylm.errors.LLMError` subclasses for failures, honour `request.deadline` inside blocking reads, and release
    the connection when the consumer closes the generator early (the agent does so once a complete tool call
    has arrived, so a server that ignores stop strings costs nothing extra). An endpoint that renders the chat
    template itself also tells the loop what it rendered: see `PromptRenderingLLM`.
    """

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Stream the completion for `request`."""
        ...


@runtime_checkable
class PromptRenderingLLM(LLM, Protocol):
    """An `LLM` that renders the chat template itself (a raw-prompt provider), and so knows exactly whether the
    prompt it sent ends inside `<think>`: the loop reads `opens_reasoning` of such an endpoint instead of
    learning it from the replies. Other endpoints need not have the attribute."""

    #: Whether the last prompt this endpoint rendered opened `<think>` for the model (None: not known yet).
    opens_reasoning: bool | None


def alternating(messages: Sequence[Message]) -> tuple[Message, ...]:
    """`messages` with consecutive messages of one role joined, so user and assistant alternate.

    Chat templates of several model families (Mistral, Gemma) reject two user messages in a row, which a
    resumed conversation, an interrupted tool or the iteration-limit request can produce. Joining is done for
    the request only: the recorded history is never rewritten.
    """
    merged: list[Message] = []
    for message in messages:
        if merged and merged[-1].role == message.role and message.role != "system":
            merged[-1] = Message(message.role, merged[-1].content + "\n\n" + message.content)
        else:
            merged.append(message)
    return tuple(merged)
