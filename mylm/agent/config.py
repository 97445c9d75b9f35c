"""Every knob of an `Agent` in one place: its default and what it means."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.types import Message, Permission, ToolCall
from ..llm import ConstrainMode
from ..protocol.dialects import checked
from .step import StepConfig, ToolChoice

if TYPE_CHECKING:
    from ..prompts import PromptLoader
    from ..tools.base import Tool

#: Asked before each call runs: allow it (with a grant for the sandbox), or deny it with a reason the model reads.
PermissionHook = Callable[[ToolCall, "Tool"], Permission]
#: Called with the model's final answer and the conversation so far; a message it returns sends the model back
#: to work (it is added as a user message), None lets the answer stand.
BeforeFinishHook = Callable[[str, Sequence[Message]], "str | None"]


@dataclass(frozen=True)
class AgentConfig:
    """How an agent runs: `Agent(llm, tools, config=AgentConfig(max_iterations=5))`. Keyword arguments to `Agent`
    set the same fields (over `config`'s): `Agent(llm, tools, max_iterations=5)`."""

    # The loop.
    #: Model turns a run may take; at the limit, one more call asks for an answer without tools.
    max_iterations: int = 10
    #: Seconds a whole run may take, model calls and tools included; then it ends with `StopReason.TIMEOUT`.
    timeout: float = 120.0
    #: Whether `timeout` grows with the model's measured pace: after each model call the run may last as long as
    #: its remaining iterations need at the average call time so far (never less than `timeout`, at most
    #: `MAX_PACED_TIMEOUT`). The CLI sets it when the timeout is its default, so a 1.5B model on a laptop CPU
    #: (20-60 s a turn) is not cut off at 120 s, while a run that stops producing anything still ends.
    pace_timeout: bool = False
    #: Unusable turns in a row (unreadable, or every call invalid) after which the run fails.
    max_consecutive_failures: int = 3
    #: The same call (tool and arguments) giving the same result this many times in a row ends the run with
    #: `StopReason.REPEATED_CALL`; each repeat before that is answered with `repeated_call.j2` instead of the
    #: output again. 0: never.
    max_repeated_calls: int = 3
    #: What `timeout` is measured on (tests pass a fake).
    clock: Callable[[], float] = time.monotonic

    # The model turn (see `mylm.agent.step.StepConfig`).
    #: The output token limit of every completion.
    max_tokens: int = 4096
    #: Whether one turn may call several tools (they run in order); otherwise only its first call runs.
    multiple_calls: bool = False
    #: `auto`: sample under the protocol grammar where the endpoint can; `grammar`: insist; `off`: never.
    constrain: ConstrainMode = "off"
    #: `auto`: call or answer; `none`: no tools; `required`: every turn calls one; a tool's name: that tool.
    tool_choice: ToolChoice = "auto"
    #: The form of call the prompt teaches and the grammar allows: `mylm` (`<tool_code>` blocks), `hermes`
    #: (`<tool_call>{"name", "arguments"}</tool_call>`, as Qwen2.5's chat template teaches), or `auto` (the
    #: model registry's dialect for the endpoint's model, else `mylm`). See `mylm.protocol.dialects`.
    tool_dialect: str = "mylm"
    #: Send stop strings where the endpoint accepts them (off for APIs that refuse them).
    stop_strings: bool = True
    #: The templates of everything the model reads (None: `PromptLoader.default()`).
    prompts: PromptLoader | None = None
    #: Extra text at the end of the system prompt.
    instructions: str = ""

    # The tools.
    #: Asked before each call runs (None: every call runs).
    permission: PermissionHook | None = None
    #: The directory tools work in, named in the system prompt (None: the current directory).
    workspace: Path | None = None
    #: A longer output is cut in the middle for the model.
    max_observation_chars: int = 30_000
    #: Keep cut outputs whole, for the model to page through with the (unlisted) `read_output` tool.
    output_cache: bool = True

    # The context.
    #: Prompt tokens the conversation may take; nearing it, older turns are summarised (None: never).
    context_budget: int | None = None
    #: The share of `context_budget` at which compaction starts.
    compaction_threshold: float = 0.8
    #: Messages kept word for word at the end when compacting.
    keep_recent_messages: int = 6

    #: More reasoning dialects as `(open, close)` pairs (the `reasoning_markers` setting; see protocol.tags).
    reasoning_markers: tuple[tuple[str, str], ...] = ()

    # Hooks.
    #: Sees the final answer before the run ends, and may send the model back to work.
    before_finish: BeforeFinishHook | None = None

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        if self.max_repeated_calls == 1 or self.max_repeated_calls < 0:
            raise ValueError("max_repeated_calls must be 0 (never stop) or at least 2")
        if self.tool_dialect != "auto":
            checked(self.tool_dialect)

    def step(self) -> StepConfig:
        """The part of this configuration that shapes each model turn."""
        return StepConfig(self.max_tokens, self.multiple_calls, self.constrain, self.tool_choice, self.stop_strings,
                          self.reasoning_markers, self.tool_dialect)
