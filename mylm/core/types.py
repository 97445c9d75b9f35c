"""Frozen value types shared by every layer: messages, tool calls, usage, agent events and the run result."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from .errors import MylmError

Role = Literal["system", "user", "assistant"]
#: What a running command may do: read the system and workspace only, or also write the workspace.
Grant = Literal["read-only", "workspace-write"]


@dataclass(frozen=True)
class Message:
    """One chat message; mylm only ever uses plain-text content."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        """Return the message as the `{"role", "content"}` mapping every chat API uses."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the endpoint (zero where it reports nothing)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for: the tool's name and its decoded arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    #: The block exactly as the model wrote it (after stop normalisation).
    raw: str = ""
    #: Unique within a run, assigned by the agent (`call_<iteration>_<index>`).
    id: str = ""


class StopReason(str, Enum):
    """Why a whole run ended."""

    FINAL_ANSWER = "final_answer"
    #: The answer ran into the output token limit (`max_tokens`): it is kept, but it is cut off.
    MAX_TOKENS = "max_tokens"
    DONE_TOOL = "done_tool"
    MAX_ITERATIONS = "max_iterations"
    #: The model kept making the same call and getting the same result (`RepeatedCallError` says which).
    REPEATED_CALL = "repeated_call"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    ERROR = "error"


class FinishReason(str, Enum):
    """Why one model turn ended, normalised across endpoints (seed 004)."""

    TOOL_USE = "tool_use"
    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"


@dataclass(frozen=True)
class Permission:
    """A permission hook's answer for one tool call: allow, or deny with a reason the model will read.

    `grant` says what an allowed command may do once it runs: "read-only" when the call was allowed without
    asking anyone (the policy understood it as a read), "workspace-write" when a person (or --yes) approved it.
    The sandbox, not the classifier, enforces it.
    """

    allowed: bool
    reason: str = ""
    grant: Grant = "workspace-write"

    @classmethod
    def allow(cls, grant: Grant = "workspace-write") -> Permission:
        """Let the call run with `grant`'s access."""
        return cls(True, grant=grant)

    @classmethod
    def deny(cls, reason: str) -> Permission:
        """Refuse the call; `reason` is fed back to the model."""
        return cls(False, reason)


# ----------------------------------------------------------------------------------------------- events


class _Event:
    """Mixin giving every event a stable `type` tag and a JSON-ready dict."""

    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """Return the event as a JSON-serialisable mapping with a leading `type` key."""
        data: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            data[f.name] = _jsonable(getattr(self, f.name))
        return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Usage):
            out["total_tokens"] = value.total_tokens
        return out
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class IterationStartEvent(_Event):
    """A new model call is about to be made."""

    type: ClassVar[str] = "iteration_start"
    iteration: int
    max_iterations: int


@dataclass(frozen=True)
class ReasoningEvent(_Event):
    """A piece of the model's private reasoning (`<think>` text or a separate reasoning field)."""

    type: ClassVar[str] = "reasoning"
    text: str


@dataclass(frozen=True)
class TextEvent(_Event):
    """A piece of visible model text (a thought before a call, or the answer), safe to show as it streams."""

    type: ClassVar[str] = "text"
    text: str


@dataclass(frozen=True)
class StepStartEvent(_Event):
    """A tool call is about to be handled."""

    type: ClassVar[str] = "step_start"
    step_id: str
    iteration: int
    tool_name: str


@dataclass(frozen=True)
class ToolCallEvent(_Event):
    """The parsed tool call, exactly as it will be (or would have been) run."""

    type: ClassVar[str] = "tool_call"
    call: ToolCall


@dataclass(frozen=True)
class ApprovalEvent(_Event):
    """The permission hook's verdict on a call: allowed with the grant the sandbox will enforce, or refused with
    the reason the model is told."""

    type: ClassVar[str] = "approval"
    call_id: str
    allowed: bool
    grant: Grant | None
    reason: str = ""


@dataclass(frozen=True)
class ToolResultEvent(_Event):
    """What the tool returned (or why it did not run)."""

    type: ClassVar[str] = "tool_result"
    call_id: str
    name: str
    output: str
    is_error: bool
    duration: float


@dataclass(frozen=True)
class StepCompleteEvent(_Event):
    """A tool call has been handled and its observation recorded."""

    type: ClassVar[str] = "step_complete"
    step_id: str
    #: `interrupted`: Ctrl-C (or a cancel) stopped the tool before it finished.
    status: Literal["completed", "error", "denied", "interrupted"]


@dataclass(frozen=True)
class UsageEvent(_Event):
    """Tokens used by the model call that just ended, and the run's total so far."""

    type: ClassVar[str] = "usage"
    usage: Usage
    total: Usage


@dataclass(frozen=True)
class ModelCallEvent(_Event):
    """A model call of the loop has ended (a turn, its retry, the summary); traces draw one span per call.

    `duration` runs from the request to the end of the reply; `time_to_first_token` to its first chunk (None
    when nothing came back); `usage` is None when the endpoint reported none."""

    type: ClassVar[str] = "model_call"
    finish_reason: FinishReason
    duration: float
    time_to_first_token: float | None
    usage: Usage | None


@dataclass(frozen=True)
class ErrorEvent(_Event):
    """Something went wrong; `fatal` errors end the run, the others are fed back to the model."""

    type: ClassVar[str] = "error"
    message: str
    kind: str
    fatal: bool = False


@dataclass(frozen=True)
class CompactionEvent(_Event):
    """Older turns were summarised to fit the context budget; the conversation was rewritten once."""

    type: ClassVar[str] = "compaction"
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True)
class ContinueEvent(_Event):
    """The `before_finish` hook sent the model back to work instead of accepting `answer`."""

    type: ClassVar[str] = "continue"
    answer: str
    message: str


@dataclass(frozen=True)
class FinalResponseEvent(_Event):
    """The run's answer."""

    type: ClassVar[str] = "final"
    text: str
    stop_reason: StopReason


Event = (
    IterationStartEvent
    | ReasoningEvent
    | TextEvent
    | StepStartEvent
    | ToolCallEvent
    | ApprovalEvent
    | ToolResultEvent
    | StepCompleteEvent
    | UsageEvent
    | ModelCallEvent
    | ErrorEvent
    | CompactionEvent
    | ContinueEvent
    | FinalResponseEvent
)


@dataclass(frozen=True)
class RunResult:
    """Everything a finished run produced (seed 000's AgenticLoopResult)."""

    final_text: str
    stop_reason: StopReason
    #: Turns of the loop started (each one model call); retries and the compaction and summary calls are not
    #: counted here, see `model_calls`.
    iterations_used: int
    timed_out: bool
    #: Only the messages this run added (the prompt, the model's turns, the observations), ready to append.
    history_delta: tuple[Message, ...]
    events: tuple[Event, ...]
    usage: Usage = Usage()
    #: The error that ended the run when `stop_reason` is `error`, `timeout` or `cancelled`.
    error: MylmError | None = None
    #: The whole conversation after the run (prior history plus this run, or its compacted form).
    history: tuple[Message, ...] = ()
    #: Whether compaction rewrote the conversation: then continue from `history`, not history + delta.
    compacted: bool = False
    #: Every completion the agent requested: loop turns, a turn asked again without stop strings, compaction
    #: and summary calls (HTTP retries inside one call are not counted).
    model_calls: int = 0

    def reported_usage(self) -> dict[str, int] | None:
        """The run's token counts as saved and printed, or None when the endpoint reported none (0/0 would be a
        false count)."""
        if not any(isinstance(event, UsageEvent) for event in self.events):
            return None
        return {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens}

    @property
    def ok(self) -> bool:
        """True when the run ended with an answer: the model's (maybe cut off) or a done tool's."""
        return self.stop_reason in (StopReason.FINAL_ANSWER, StopReason.MAX_TOKENS, StopReason.DONE_TOOL)
