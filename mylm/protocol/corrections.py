"""What the parser tells the model when a reply cannot be used: what was wrong, and exactly what to write.

Every message says what happened ("nothing was run"), why, and the exact form to write instead, with the
canonical block as the example, so a model can recover on its next turn.
"""

from __future__ import annotations

import re

from ..core.types import ToolCall
from .canonical import format_tool_call
from .tags import KIND_TAGS, NAME_CLOSE, NAME_OPEN, PARAMS_CLOSE, PARAMS_OPEN, TOOL_CLOSE, TOOL_OPEN

EXAMPLE = (f'{TOOL_OPEN}\n{NAME_OPEN}TOOL_NAME{NAME_CLOSE}\n{PARAMS_OPEN}\n{{"ARGUMENT": "VALUE"}}\n{PARAMS_CLOSE}\n'
           f"{TOOL_CLOSE}")
JSON_HOWTO = (
    'Write the arguments as one JSON object with double-quoted keys and strings, e.g. {"command": "ls -la"}; '
    'inside a string write \\" for a quote and \\\\ for a backslash. Long text full of quotes or backslashes can '
    "instead be written as one element per argument: <parameters><content>text</content></parameters>."
)


class BlockError(Exception):
    """A block that cannot be run; `message` is written for the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def cut_off(kind: str, where: str, name: str | None = None) -> str:
    opener, closer = KIND_TAGS[kind]
    call = f" (the call to {name})" if name else ""
    return (
        f"Your reply ended inside a {opener} block{call}, in {where}, before the block was complete, so nothing "
        f"was run. Write the whole block again and end it with {closer}. If it was long, split the work into "
        "smaller calls."
    )


def cut_off_tag(fragment: str) -> str:
    """The reply ended inside a tag: the model was cut off mid-call (or mid-markup), so it must finish."""
    return (
        f"Your reply ended inside the tag {fragment[:60]!r}, so it was cut off before the call was written: "
        "nothing was run and it was not taken as your answer. Finish what you were writing: write the whole "
        f"block again, ending it with {TOOL_CLOSE}:\n{EXAMPLE}"
    )


def skipped_calls(names: tuple[str, ...]) -> str:
    """Calls after an unusable block were not run: a turn's calls run in order, so they must come again."""
    listed = ", ".join(names)
    return (f" The {len(names)} call(s) after it ({listed}) were not run either, because a turn's calls run in "
            "order: fix this one, then write those again.")


def example(name: str) -> str:
    return EXAMPLE.replace("TOOL_NAME", name)


def prefer_canonical() -> str:
    return "Nothing was run. Write calls in this form:\n" + EXAMPLE


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


def bare_json_error(call: ToolCall) -> str:
    """A reply that was only a JSON call object: not run (untagged text may be quoted data); show the block."""
    return (
        "Your reply was a bare JSON tool call with no <tool_code> block, so nothing was run: mylm runs only calls "
        "written as blocks. To make this call, write exactly:\n" + format_tool_call(call)
        + "\nTo make several calls, write one block per call."
    )


def dtd_refused() -> str:
    """A DTD or entity declaration came before a block: refused, never expanded."""
    return ("Your reply declares a DTD or an entity (<!DOCTYPE …> / <!ENTITY …>) before its tool call. mylm never "
            "expands entities, so nothing was run. Write every argument value literally in the block, with no "
            "declarations before it.")


def several_calls_error(count: int) -> str:
    """One block with several name/parameters pairs, in a turn that may make one call."""
    return (f"Your {TOOL_OPEN} block holds {count} calls (a <name> and <parameters> pair each), and a turn makes one "
            f"call here, so nothing was run. Write one call per reply, in its own block:\n" + EXAMPLE)
