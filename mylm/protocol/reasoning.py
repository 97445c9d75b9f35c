"""Reasoning in every dialect: what the parser scans for, given the table in `tags.REASONING_DIALECTS`.

The parser, the providers that render prompts (does the template open reasoning?) and the loop (what did a reply
show about it?) all ask here, so a dialect added to the table (or by config `reasoning_markers`) is known to all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .blockscan import TagSet
from .parsed import ParsedTurn
from .tags import (
    DRIFT_OPENERS,
    ENVELOPE_MARKERS,
    FINAL_OPEN,
    OBSERVATION_TAGS,
    REASONING_DIALECTS,
    TOOL_CALL_CLOSE,
    TOOL_CLOSE,
    TOOL_OPEN,
    ReasoningDialect,
    lone_closes,
    reasoning_closes,
    reasoning_opens,
)

#: Block openers the parser reads outside any block.
BLOCK_TAGS = (TOOL_OPEN, *DRIFT_OPENERS)
#: End tags of a block met with no block open (maybe the model left the opener out).
LONE_BLOCK_CLOSERS = (TOOL_CLOSE, TOOL_CALL_CLOSE)


@dataclass(frozen=True)
class Vocabulary:
    """The tags the parser looks for outside blocks, and the scanners built from them, for one dialect table."""

    dialects: tuple[ReasoningDialect, ...]
    opens: tuple[str, ...]
    closes: tuple[str, ...]
    lone: tuple[str, ...]
    envelope: tuple[str, ...]
    outside: tuple[str, ...]
    #: The closers of the dialect each opener belongs to (lower case).
    closes_of: dict[str, tuple[str, ...]]
    #: Where a tag may start outside a block, with backtick and tilde runs (the fast prose scanner).
    fast: re.Pattern[str]
    #: The same with newlines (the scanner inside and after code fences).
    special: re.Pattern[str]
    #: Text in which no tag, fence or line start can matter.
    plain: re.Pattern[str]
    #: Characters a tag can start with inside a block's markup.
    first: re.Pattern[str]
    #: The outside tags as a matcher (built once per table: parsers are created per reply).
    outside_set: TagSet


@lru_cache(maxsize=16)
def vocabulary(dialects: tuple[ReasoningDialect, ...] = REASONING_DIALECTS) -> Vocabulary:
    """The parser's tag vocabulary for `dialects` (cached: one per table)."""
    opens, closes, lone = reasoning_opens(dialects), reasoning_closes(dialects), lone_closes(dialects)
    envelope = tuple(m.lower() for m in ENVELOPE_MARKERS if m.lower() not in lone)
    outside = tuple(dict.fromkeys((*BLOCK_TAGS, *OBSERVATION_TAGS, *opens, *lone, *envelope, FINAL_OPEN,
                                   *LONE_BLOCK_CLOSERS)))
    closes_of = {m.lower(): tuple(c.lower() for c in d.closes) for d in dialects for m in d.opens}
    starts: dict[str, set[str]] = {}
    for tag in outside:
        starts.setdefault(tag[0], set()).update({tag[1:2].lower(), tag[1:2].upper()})
    # `<x` matters only if some tag starts with `<x` (or the text ends right after `<`: it may be one).
    alternatives = [f"{re.escape(c)}(?![^{''.join(re.escape(s) for s in sorted(seconds))}])"
                    for c, seconds in sorted(starts.items())]
    heads = "".join(re.escape(c) for c in sorted(starts))
    return Vocabulary(
        dialects=dialects, opens=opens, closes=closes, lone=lone, envelope=envelope, outside=outside,
        closes_of=closes_of,
        fast=re.compile("`+|~+|" + "|".join(alternatives)),
        special=re.compile("[`~\n]|" + "|".join(alternatives)),
        plain=re.compile(f"[^~{heads}]+"),
        first=re.compile(f"[{heads}]"),
        outside_set=TagSet(outside),
    )


def prompt_opens_reasoning(prompt: str, dialects: tuple[ReasoningDialect, ...] = REASONING_DIALECTS) -> bool:
    """Whether a rendered prompt ends inside reasoning (the template wrote `<think>`, `[THINK]`, … for the model)."""
    tail = prompt.rstrip().lower()
    return tail.endswith(reasoning_opens(dialects))


#: The built-in table's lone closers and openers (what `lone_closes()` and `reasoning_opens()` return for it).
_DEFAULT_LONE = lone_closes()
_DEFAULT_OPENS = reasoning_opens()


def template_opens_reasoning(parsed: ParsedTurn, split_reasoning: bool,
                             dialects: tuple[ReasoningDialect, ...] = REASONING_DIALECTS) -> bool | None:
    """What one reply shows about whether the chat template opens reasoning for the model (None: nothing).

    A lone closer (in any dialect) before any opener: it does. An opener of its own, or reasoning the server sent
    apart: it does not. A whole, usable reply without any marker: it does not.
    """
    text = parsed.text.lower()
    default = dialects is REASONING_DIALECTS  # the common case: the built-in table's markers, built once
    lone = _DEFAULT_LONE if default else lone_closes(dialects)
    opens = _DEFAULT_OPENS if default else reasoning_opens(dialects)
    close = min((i for i in (text.find(m) for m in lone) if i >= 0), default=-1)
    opened = min((i for i in (text.find(m) for m in opens) if i >= 0), default=-1)
    if close >= 0 and (opened < 0 or close < opened):
        return True
    if opened >= 0 or split_reasoning:
        return False
    if parsed.tool_calls or (parsed.final_answer or "").strip():
        return False
    return None
