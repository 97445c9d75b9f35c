"""The streaming parser's state, shared by the parts of its engine.

`StreamParser` (`parser`) is one object whose methods live in four modules, each a part a reader looks for on its
own: `parser` (the public API, the feed loop, reasoning and `<final_answer>`), `outside` (text outside blocks:
tags, fences, inline code, Markdown context), `blocks` (a block from its opener to its end, and committing its
call) and `readings` (what is read once the reply is whole: drifted forms, other spellings, JSON calls, the
verdict). This base declares the state they share, for readers and for the type checker; `StreamParser.__init__`
sets it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from ..core.types import ToolCall
from .blockscan import BlockScan, TagSet
from .fences import Fence
from .jsoncalls import CallHold
from .parsed import ParsedTurn, ParseEvent
from .reasoning import BLOCK_TAGS, LONE_BLOCK_CLOSERS, Vocabulary
from .structure import LineContext
from .tags import DRIFT_OPENERS, OBSERVATION_TAGS

if TYPE_CHECKING:
    from .drift import Registry

#: Other formats a call may drift into, by opener: the block kind, and what must follow the opener for it to be
#: a call rather than a mention (decided once `DRIFT_WINDOW` characters, or the end of the reply, are there).
_DRIFT_FULL = {
    "<tool_call>":
        r"<tool_call>\s{0,64}(?:[{\[<`\"]|[A-Za-z_][\w.:-]{0,63}\s{0,16}(?:<arg_key>|</tool_call>|</arg_value>))",
    "<function=": r"<function=[\w.:-]{1,64}>",
    "<function_calls>": r"<function_calls>\s{0,64}<",
    "<invoke": r"<invoke\s+name\s*=\s*[\"'][\w.:-]{1,64}[\"']\s*>",
}
DRIFT_RE = {tag: (DRIFT_OPENERS[tag], re.compile(full, re.IGNORECASE)) for tag, full in _DRIFT_FULL.items()}
DRIFT_WINDOW = 160
FENCE_TAGS = (*BLOCK_TAGS, *OBSERVATION_TAGS)
LONE_CLOSERS = LONE_BLOCK_CLOSERS
MAX_BLOCKS = 100
#: The engine's states: outside any block, in reasoning, in a block, in `<final_answer>`, discarding the rest.
OUT, THINK, BLOCK, FINAL, DISCARD = range(5)


@lru_cache(maxsize=64)
def closer_pattern(closes: tuple[str, ...]) -> re.Pattern[str]:
    """One search for any of the reasoning closers, longest first."""
    return re.compile("|".join(re.escape(c) for c in sorted(closes, key=len, reverse=True)), re.IGNORECASE)


class ParserState:
    """The state of one reply being read (see the module's docstring); no behaviour of its own."""

    _vocab: Vocabulary
    _outside_tags: TagSet
    _think_closes: tuple[str, ...]
    _think_close_re: re.Pattern[str]
    _multiple_calls: bool
    _tools: Registry | None
    _json_hold: CallHold | None
    _json_taken: bool
    _quoted: bool
    _call_at: list[int]
    _hold: bool
    _held_raw: list[str]
    _emitted: int
    _skipped: list[str]
    _chunks: list[str]
    _buf: str
    _pos: int
    _base: int
    _state: int
    _events: list[ParseEvent]
    _line_blank: bool
    _inline: int
    _long_run: str
    _fence: Fence | None
    _scan: BlockScan | None
    _block_kind: str
    _block_open: str
    _block_parts: list[str]
    _block_fenced: bool
    _calls: list[ToolCall]
    _errors: list[str]
    _thought: list[str]
    _reasoning: list[str]
    _final: list[str] | None
    _discard_at: int | None
    _made_up: bool
    _ambiguous_example: bool
    _lone_closer: tuple[int, str] | None
    _think_unclosed: bool
    _respelled: bool
    _ctx: LineContext
    _dtd_at: int
    _dtd_tail: str
    _dtd_seen: bool
    _watch: bool
    _line_start: bool
    _closed: bool
    result: ParsedTurn | None

    if TYPE_CHECKING:  # methods one part calls in another (defined in `parser`, `outside`, `blocks`, `readings`)
        def _flush(self) -> None: ...
        def _emit_text(self, text: str) -> None: ...
        def _visible(self, text: str) -> None: ...
        def _release_json_hold(self, *, restart: bool = False) -> None: ...
        def _invented(self, final: bool) -> bool | None: ...
        def _start_block(self, tag: str, text: str, *, fenced: bool) -> None: ...
        def _end_fence_content(self) -> None: ...
        def _content_in_fence(self) -> None: ...
        def _commit(self, call: ToolCall | None, error: str | None) -> None: ...
        def _checked(self, call: ToolCall) -> tuple[ToolCall | None, str | None]: ...
        def _reparse(self, text: str) -> ParsedTurn: ...
