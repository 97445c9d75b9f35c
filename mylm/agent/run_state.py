"""The mutable bookkeeping of one run, shared by the loop and the tool runner; never shared between runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.cancel import CancelToken
from ..core.errors import RunTimeoutError
from ..core.types import Event, Message
from .corrections import Corrections
from .step import Meter


@dataclass
class RunState:
    """One run: its conversation, its limits, what it cost and what it has seen so far."""

    #: The conversation as it will be sent (after the system message): prior history, then this run's turns.
    messages: list[Message]
    cancel: CancelToken
    #: When the run must end, on `clock`.
    deadline: float
    clock: Callable[[], float]
    #: The corrections sent so far, so a repeated mistake gets a different, more concrete one.
    corrections: Corrections
    #: The user's request (compaction keeps it).
    prompt: str = ""
    added: list[Message] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: Every completion requested (loop turns, the retry without stops, compaction, the summary) and its cost.
    meter: Meter = field(default_factory=Meter)
    iteration: int = 0
    #: Unusable turns in a row.
    failures: int = 0
    compacted: bool = False
    #: The last call that ran (tool, arguments, result), and how many times in a row it was made.
    last_call: tuple[str, str, str, bool] | None = None
    repeats: int = 0
    #: Every call that ran (tool, arguments, result) and how many times in this run: a model going in circles
    #: (read the file, make the same failing edit, read it again...) repeats calls without repeating the last one.
    seen_calls: dict[tuple[str, str, str, bool], int] = field(default_factory=dict)
    #: When the run started, on `clock`; and the time its model turns took, for a paced timeout.
    started: float = 0.0
    model_seconds: float = 0.0
    model_turns: int = 0
    #: The file of the workspace the task asks to be changed (`unwritten.change_target`), as shown, and what it
    #: held when the run began (a digest): an answer while it still holds that is sent back once.
    changing: tuple[str, str] | None = None
    #: Whether the last correction asked for a call (`tool_choice`): the next turn is sampled under a grammar that
    #: admits only a call, where the endpoint takes one.
    call_due: bool = False

    def pace(self, seconds: float, turns_left: int, *, floor: float, cap: float) -> None:
        """Count a model turn that took `seconds`; move the deadline so the `turns_left` turns fit at the
        average pace so far (with a margin), between `floor` and `cap` seconds after the start."""
        self.model_seconds += seconds
        self.model_turns += 1
        average = self.model_seconds / self.model_turns
        needed = self.clock() + 1.5 * average * max(turns_left, 1)
        self.deadline = max(self.deadline, min(needed, self.started + cap), self.started + floor)

    def add(self, message: Message) -> None:
        """Append `message` to the conversation (and to what this run added)."""
        self.messages.append(message)
        self.added.append(message)

    def check(self) -> None:
        """Raise if the run was cancelled or its deadline has passed."""
        self.cancel.raise_if_cancelled()
        if self.clock() >= self.deadline:
            raise RunTimeoutError("deadline passed")

    def monotonic_deadline(self) -> float:
        """The deadline on the clock HTTP reads and tools compare against (the run's clock may be a fake)."""
        return time.monotonic() + (self.deadline - self.clock())
