"""Turn-level verdicts that no single block decides: calls drafted in reasoning, empty replies, shown examples."""

from __future__ import annotations

import re

from .callblock import EXAMPLE

_CALL_OPENER = re.compile(r"<tool_code>|<tool_call>|<function=[\w.:-]+>|<invoke\s+name=", re.IGNORECASE)


def reasoning_call_error(reasoning: str, *, unclosed: bool, answer: str) -> str | None:
    """A call written only inside reasoning never runs; say so when it was plainly the reply's intent."""
    if not _CALL_OPENER.search(reasoning):
        return None
    if unclosed:
        return (
            "Your tool call was inside <think>, which you never closed, so nothing was run: reasoning is never "
            "executed. Close your reasoning with </think> first, then write the block after it:\n" + EXAMPLE
        )
    if not answer:
        return (
            "Your tool call was inside <think>…</think>, so nothing was run: reasoning is never executed. After "
            "</think>, write the block again:\n" + EXAMPLE
        )
    return None


def verdict_error(*, answer: str, reasoning: str, ambiguous_example: bool, unclosed: bool = False) -> str | None:
    """Errors for a turn without calls: an example that may have been meant as a call, or no answer at all."""
    if ambiguous_example:
        return (
            "Your <tool_code> block was inside a ``` code fence together with other text, so it was read as an "
            "example and nothing was run. To call a tool, write the block on its own, outside code fences; to "
            "answer, write the answer as plain text."
        )
    if answer:
        return None
    if unclosed and reasoning:
        return (
            "Your reply ended inside <think> without an answer or a tool call, so there is nothing to use. Keep "
            "your reasoning short, close it with </think>, then answer in plain text or write a <tool_code> block."
        )
    if reasoning:
        return (
            "Your reply had only reasoning (<think>…</think>) and no answer or tool call. After </think>, answer "
            "in plain text or write a <tool_code> block."
        )
    return (
        "Your reply was empty. To call a tool, write a <tool_code> block:\n" + EXAMPLE
        + "\nTo answer, write the answer as plain text. Never begin a reply with <observation>."
    )
