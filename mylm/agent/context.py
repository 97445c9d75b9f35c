"""Context budgeting: estimate a conversation's tokens, and compact it through the model near the budget."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.types import CompactionEvent, Message, Usage
from ..llm import LLMRequest, alternating

if TYPE_CHECKING:
    from ..core.cancel import CancelToken
    from ..llm import LLM
    from ..prompts import PromptLoader

logger = logging.getLogger("mylm.agent")

#: Characters per token before any server has reported real counts (English text and code average ~4).
DEFAULT_CHARS_PER_TOKEN = 4.0
#: Per-message overhead of chat templates (role markers, separators), in tokens.
MESSAGE_OVERHEAD = 4


class TokenEstimator:
    """Estimates prompt tokens from characters, calibrated by the prompt token counts servers report."""

    def __init__(self, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> None:
        self.chars_per_token = chars_per_token

    def estimate(self, messages: Sequence[Message]) -> int:
        """Estimated prompt tokens for `messages`."""
        chars = sum(len(m.content) for m in messages)
        return int(chars / self.chars_per_token) + MESSAGE_OVERHEAD * len(messages)

    def calibrate(self, messages: Sequence[Message], prompt_tokens: int) -> None:
        """Learn the real ratio from a request whose prompt the server counted."""
        chars = sum(len(m.content) for m in messages)
        content_tokens = prompt_tokens - MESSAGE_OVERHEAD * len(messages)
        if chars >= 200 and content_tokens > 0:
            measured = chars / content_tokens
            # Smooth, and stay within sane bounds, so one odd count cannot swing the budget.
            self.chars_per_token = min(8.0, max(1.5, 0.5 * self.chars_per_token + 0.5 * measured))


def split_for_compaction(messages: Sequence[Message], keep: int) -> tuple[list[Message], list[Message]]:
    """Split into (older, recent): `recent` keeps about the last `keep` messages and starts with an assistant turn.

    Starting the kept tail at an assistant message lets the summary go in one user message before it, so the
    conversation still alternates user/assistant as every chat template expects.
    """
    if len(messages) <= keep:
        return [], list(messages)
    start = len(messages) - keep
    while start < len(messages) and messages[start].role != "assistant":
        start += 1
    start = min(len(messages), start)
    if start == 0:
        return [], list(messages)
    return list(messages[:start]), list(messages[start:])


@dataclass(frozen=True)
class Compaction:
    """A compacted conversation: the messages that replace it, the event reporting it, the summary's cost."""

    messages: list[Message]
    event: CompactionEvent
    usage: Usage | None


class Compactor:
    """Summarises older turns through a model call (`compaction.j2`) when the prompt nears the budget."""

    def __init__(
        self,
        llm: LLM,
        prompts: PromptLoader,
        estimator: TokenEstimator,
        *,
        budget: int,
        threshold: float = 0.8,
        keep_recent: int = 6,
        max_tokens: int = 4096,
    ) -> None:
        self.llm, self.prompts, self.estimator = llm, prompts, estimator
        self.budget, self.threshold, self.keep_recent, self.max_tokens = budget, threshold, keep_recent, max_tokens

    def compact(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        task: str,
        deadline: float | None,
        cancel: CancelToken | None,
    ) -> Compaction | None:
        """The compacted conversation, or None when it is within budget or too little could be summarised."""
        from .turn import collect_text

        system = Message("system", system_prompt)
        before = self.estimator.estimate([system, *messages])
        # The reply needs room in the same context: reserve the output cap (at most half the budget).
        if before < self.threshold * (self.budget - min(self.max_tokens, self.budget // 2)):
            return None
        older, recent = split_for_compaction(messages, self.keep_recent)
        if self.estimator.estimate(older) < 0.25 * self.budget:
            return None  # too little to summarise: a summary would not free enough to matter
        request = Message("user", self.prompts.render("compaction.j2", task=task))
        summary, usage = collect_text(
            self.llm, LLMRequest(alternating((system, *older, request)), (), self.max_tokens, deadline, cancel)
        )
        replacement = Message("user", self.prompts.render("compacted.j2", task=task, summary=summary))
        compacted = [replacement, *recent]
        after = self.estimator.estimate([system, *compacted])
        logger.info("Compacted %d messages into a summary (~%d -> ~%d tokens)", len(older), before, after)
        return Compaction(compacted, CompactionEvent(len(messages), len(compacted), before, after), usage)
