"""Context budgeting: estimate a conversation's tokens and choose what compaction summarises."""

from __future__ import annotations

from typing import Sequence

from .types import Message

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
    if start >= len(messages):
        start = len(messages)
    if start == 0:
        return [], list(messages)
    return list(messages[:start]), list(messages[start:])
