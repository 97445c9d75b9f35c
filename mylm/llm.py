"""The seam between the agent and a model endpoint: the `LLM` protocol, its request and its stream items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal, Protocol, Sequence, Union, runtime_checkable

from .cancel import CancelToken
from .types import Message, Usage

#: `auto`: constrain where the endpoint can; `grammar`: insist (an error where it cannot); `off`: never.
ConstrainMode = Literal["auto", "grammar", "off"]
CONSTRAIN_MODES: tuple[ConstrainMode, ...] = ("auto", "grammar", "off")


@dataclass(frozen=True)
class Constraint:
    """A GBNF grammar the completion must follow, for endpoints that can sample under one."""

    grammar: str
    #: The same protocol from `trigger` on only, for servers that leave the text before the trigger free.
    lazy_grammar: str | None = None
    trigger: str | None = None
    #: The user insisted (`--constrain grammar`): an endpoint that cannot enforce it is an error, and a lazy
    #: form is not enough.
    required: bool = False


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
    has arrived, so a server that ignores stop strings costs nothing extra).
    """

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Stream the completion for `request`."""
        ...


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
