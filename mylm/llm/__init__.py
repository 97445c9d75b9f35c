"""The seam between the agent and a model endpoint: the `LLM` protocol, its request and its stream items."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from ..constrain.select import CONSTRAIN_MODES as CONSTRAIN_MODES
from ..constrain.select import ConstrainMode as ConstrainMode
from ..constrain.select import Constraint as Constraint
from ..core.cancel import CancelToken
from ..core.errors import ConfigError
from ..core.types import Message, Usage

#: The providers that can forward tools natively (`LLMRequest.native`), for messages naming them.
NATIVE_TOOL_PROVIDERS = ("openai",)


@dataclass(frozen=True)
class NativeTools:
    """Tools forwarded to an endpoint with native tool calling, in OpenAI's chat-completions shapes.

    Sent only by providers that speak that API (`supports_native_tools`); the calls come back as
    `ToolCallChunk`s beside the text."""

    #: The conversation as OpenAI chat messages (assistant `tool_calls`, `tool` results), sent instead of
    #: `LLMRequest.messages` so a model with native calling sees its own format.
    messages: tuple[Mapping[str, Any], ...]
    #: `{"type": "function", "function": {"name", "description", "parameters"}}` entries.
    tools: tuple[Mapping[str, Any], ...]
    #: `auto`, `none`, `required`, or `{"type": "function", "function": {"name": ...}}`.
    tool_choice: str | Mapping[str, Any] = "auto"
    #: `parallel_tool_calls`; None sends none, leaving the server's default (as most clients do: llama-server's
    #: default is false, OpenAI's true).
    parallel: bool | None = True


@dataclass(frozen=True)
class Sampling:
    """The sampling settings one request asks for (a `mylm serve` client's `temperature`, ...); None leaves the
    option to the endpoint's configured `options`, else to the server's default.

    A value set here wins over the configured option of the same name, as a model server lets a request's own
    value win over its command line's default. Each provider sends the values where its wire format expects them
    (`over`), and drops those its API has no field for (Anthropic has no `seed` or penalties)."""

    temperature: float | None = None
    top_p: float | None = None
    #: Not in OpenAI's API; llama.cpp, vLLM, Ollama, Anthropic and Gemini take it.
    top_k: int | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    #: llama.cpp's, vLLM's, Ollama's and LM Studio's; not OpenAI's, Anthropic's or Gemini's.
    min_p: float | None = None
    #: llama.cpp's, Ollama's and LM Studio's name (vLLM's `repetition_penalty` is read as it by `mylm serve`).
    repeat_penalty: float | None = None

    def items(self) -> tuple[tuple[str, float | int], ...]:
        """The options this request sets, as `(name, value)` pairs in `SAMPLING_OPTIONS` order."""
        # The field names, made once (`fields` builds them anew at each call).
        names = SAMPLING_OPTIONS if type(self) is Sampling else tuple(f.name for f in fields(self))
        found = ((name, getattr(self, name)) for name in names)
        return tuple((name, value) for name, value in found if value is not None)

    def over(self, options: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, Any]:
        """`options` (an endpoint's configured ones) with this request's values on top, each under the name the
        wire gives it in `names` (None: the names of `SAMPLING_OPTIONS`; an option missing from `names` has no
        field in that wire and is dropped). A configured option of the same meaning, spelt either way, is
        replaced and moves last, so a provider that files options in order (Ollama's nested `options`) lets
        the request's value win too."""
        merged = dict(options)
        for option, value in self.items():
            wire = option if names is None else names.get(option)
            if wire is None:
                continue
            merged.pop(option, None)
            merged.pop(wire, None)
            merged[wire] = value
        return merged


#: The sampling options one request may set (`Sampling`'s fields), in the words of OpenAI's and llama.cpp's APIs.
SAMPLING_OPTIONS: tuple[str, ...] = tuple(f.name for f in fields(Sampling))


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
    #: Tools to forward natively (only to an endpoint that `supports_native_tools`); None: tools, if any, are
    #: in the prompt.
    native: NativeTools | None = None
    #: The request's own sampling settings, over the endpoint's configured `options`.
    sampling: Sampling = field(default_factory=Sampling)
    #: What it is for: `turn` (a turn of the conversation), `fit` or `count` (a side question about the turn's
    #: calls, `agent.fit`; no turn of its own: test doubles answer it apart, recorders leave it out).
    purpose: str = "turn"


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


@dataclass(frozen=True)
class ToolCallChunk:
    """A piece of a native tool call (only for a request with `native` tools): the calls are assembled by
    `index`, the id and name arriving in the first piece of each, the arguments' JSON text in fragments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


LLMChunk = TextChunk | ReasoningChunk | FinishChunk | ToolCallChunk


@runtime_checkable
class LLM(Protocol):
    """A model endpoint: streams one completion for a request.

    Implementations yield `TextChunk`/`ReasoningChunk` items and at most one final `FinishChunk`; they raise
    `LLMError` subclasses (`mylm.core.errors`) for failures, honour `request.deadline` inside blocking reads,
    and release the connection when the consumer closes the generator early (the agent does so once a complete
    tool call has arrived, so a server that ignores stop strings costs nothing extra). An endpoint that
    renders the chat template itself also tells the loop what it rendered: see `PromptRenderingLLM`.
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


def supports_native_tools(llm: LLM) -> bool:
    """Whether `llm` forwards `LLMRequest.native` tools (others refuse such a request with a `ConfigError`)."""
    return bool(getattr(llm, "native_tools", False))


def native_refused(provider: str) -> ConfigError:
    """The error for native tools sent to a provider that cannot forward them."""
    return ConfigError(
        f"the {provider} provider cannot forward tools natively; native tool calling works with the "
        f"{', '.join(NATIVE_TOOL_PROVIDERS)} provider (OpenAI-compatible chat: llama.cpp server, vLLM, Ollama's "
        "/v1, LM Studio); use --tools emulate for this one"
    )


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
