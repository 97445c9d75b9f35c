"""Find where a streamed tool block ends, structurally: end tags inside JSON strings or CDATA are data.

The scanner keeps its state between chunks, so every character is examined once however the text is split;
only a possible partial tag (a bounded tail) is left unconsumed until more text arrives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from .tags import (
    BLOCK_KINDS,
    NAME_OPEN,
    OBSERVATION_TAGS,
    PARAMS_CLOSE_TAGS,
    PARAMS_OPEN_TAGS,
    TOOL_CALL_OPEN,
    TOOL_OPEN,
)

WAIT: Final = "\x00wait"

CDATA_OPEN = "<![cdata["

#: Scan outcomes.
MORE, CLOSED, INTERRUPTED = 0, 1, 2

_EXPECT, _TOP, _JSON, _CDATA, _DONE = range(5)
_JSON_SPECIAL = re.compile(r"[\"'{}\[\],:<]")
_DQ_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_SQ_BODY = re.compile(r"[^'\\]*(?:\\.[^'\\]*)*", re.DOTALL)
_DONE_SKIP = re.compile(r"(?:\s|`|~|\]\]>)*")
_MANGLED_CLOSER = re.compile(r"</[A-Za-z_][\w:.-]{0,30}\s*>?")
#: An element tag in a block's markup: `<path>`, `</path>`, `<parameter=path>`, `<parameter name="path">`.
_ELEMENT_TAG = re.compile(r"<(?P<slash>/)?\s*(?:parameter=(?P<eq>[^>\s]{1,128})|(?P<name>[A-Za-z_][\w.:-]{0,127}))"
                          r"(?:\s+[^<>]{0,200})?/?>")
_TAG_START = re.compile(r"<(?:/\s*)?(?:[A-Za-z_][^<>]*)?\Z")
_NOT_ARGUMENTS = frozenset({"name", "parameters", "arguments", "tool_code", "tool_call", "function", "invoke",
                            "function_calls"})
#: How far past a literal end tag inside an argument element the scanner looks for the element's end.
_MAX_AHEAD = 1 << 20


def skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where a pattern that may match nothing (`x*`) stops matching from `pos`."""
    found = pattern.match(text, pos)
    return pos if found is None else found.end()


class TagSet:
    """A fixed set of tags (lower case) matched case-insensitively at a position, with hold-back for partial tags."""

    def __init__(self, tags: tuple[str, ...]) -> None:
        self.tags = tags
        self.longest = max(len(t) for t in tags)
        self._full = re.compile("|".join(re.escape(t) for t in sorted(tags, key=len, reverse=True)), re.IGNORECASE)

    def match(self, text: str, pos: int, final: bool) -> str | None:
        """The tag that starts at `text[pos]`, None, or WAIT if more text could still make it one."""
        found = self._full.match(text, pos)
        if found is not None:
            return found.group().lower()
        if final or len(text) - pos >= self.longest:
            return None
        head = text[pos:].lower()
        return WAIT if any(t.startswith(head) for t in self.tags) else None


_TAG_SETS: dict[tuple[str, ...], TagSet] = {}


def match_tag(text: str, pos: int, tags: tuple[str, ...], final: bool) -> str | None:
    """The tag (lower case, from `tags`) that starts at `text[pos]`, None, or WAIT if more text could decide."""
    tag_set = _TAG_SETS.get(tags)
    if tag_set is None:
        tag_set = _TAG_SETS[tags] = TagSet(tags)
    return tag_set.match(text, pos, final)


def partial_suffix(text: str, start: int, tags: tuple[str, ...]) -> int:
    """Length of the longest tail of `text[start:]` that is a proper prefix of one of `tags` (lower case)."""
    longest = max(len(t) for t in tags) - 1
    tail = text[max(start, len(text) - longest) :].lower()
    for n in range(len(tail), 0, -1):
        piece = tail[-n:]
        if any(t.startswith(piece) for t in tags):
            return n
    return 0


@dataclass(frozen=True)
class Kind:
    """A block format: its end tags, and whether JSON may start right after its opener."""

    name: str
    opener: str
    closers: tuple[str, ...]
    expect_json: bool
    implicit: tuple[str, ...] = (TOOL_OPEN, *OBSERVATION_TAGS)


KINDS = {
    name: Kind(name, opener, closers, expect_json,
               (TOOL_OPEN, *((TOOL_CALL_OPEN,) if name == "tool_call" else ()), *OBSERVATION_TAGS))
    for name, (opener, closers, expect_json) in BLOCK_KINDS.items()
}
#: Openers repeated before anything else (a stutter, or a flood of unclosed openers) belong to one block.
STUTTER = {kind: re.compile(rf"(?:{re.escape(k.opener)}\s*)+", re.IGNORECASE) for kind, k in KINDS.items()}


@lru_cache(maxsize=64)
def _heads(tags: tuple[str, ...]) -> tuple[frozenset[str], re.Pattern[str]]:
    """The first characters of `tags`, as a set and as a pattern (computed once per tag set)."""
    heads = sorted({t[0] for t in tags})
    return frozenset(heads), re.compile("[" + "".join(re.escape(h) for h in heads) + "]")


class BlockScan:
    """Incremental end-of-block finder for one block body."""

    def __init__(self, kind: Kind, interrupts: tuple[str, ...] = ()) -> None:
        """`interrupts`: more tags that end the block without being its end (reasoning closers: a block opened
        while planning, in reasoning the template opened, ends where that reasoning does)."""
        self.kind = kind
        self._implicit = (*kind.implicit, *interrupts)
        self.mode = _EXPECT if kind.expect_json else _TOP
        self.after_cdata = _TOP
        self.depth = 0
        self.quote = ""
        self.token_start = True  # the last JSON token was `{ [ , :`, so a `'` here opens a string
        self.after_tick = False
        self.blank = True  # nothing but layout and repeated openers so far
        self.close_len = 0
        #: `<name>` tags met after complete parameters (a second pair, or a name written after its arguments).
        self.names_after_params = 0
        #: The argument element open in the markup (`content` after `<content>`), if any.
        self.element: str | None = None
        self._cand: int | None = None  # where an end tag met inside that element starts, while undecided
        self._cand_len = 0
        self._ahead = 0
        implicit = self._implicit
        self._top_tags = (*kind.closers, *implicit, *PARAMS_OPEN_TAGS, *PARAMS_CLOSE_TAGS, CDATA_OPEN)
        self._json_tags = (*kind.closers, *(t for t in implicit if t[0] == "<"), *PARAMS_CLOSE_TAGS)
        # `<name>` after the parameters (models that write the arguments first): the block goes on.
        self._done_tags = (*kind.closers, *implicit, *PARAMS_CLOSE_TAGS, NAME_OPEN)
        self._heads, self._top_first = _heads(self._top_tags)

    def inside_string(self, text: str) -> bool:
        """Whether all of `text` continues the JSON string being scanned (so it cannot end the block)."""
        if self.mode != _JSON or not self.quote:
            return False
        return skip(_DQ_BODY if self.quote == '"' else _SQ_BODY, text, 0) == len(text)

    def scan(self, text: str, pos: int, final: bool) -> tuple[int, int]:
        """Advance from `pos`; return (position reached, MORE | CLOSED | INTERRUPTED).

        CLOSED: an end tag of `close_len` characters starts at the position. INTERRUPTED: the block ended without
        its end tag (another block or an observation starts there, or the parameters ended and prose follows).
        """
        if self._cand is not None:
            # An end tag inside an open argument element was met: it is resumed where the look-ahead stopped.
            self._cand, pos = pos, pos + self._ahead
        pos, outcome = self._scan(text, pos, final)
        cand = self._cand
        if cand is None:
            return pos, outcome
        if outcome == MORE and not final and pos - cand <= _MAX_AHEAD:
            self._ahead = pos - cand
            return cand, MORE
        # The element never closed (the reply ended, another block began, or it ran on too long): the end tag
        # was the block's end after all.
        self._cand, self.element, self.close_len = None, None, self._cand_len
        return cand, CLOSED

    def _scan(self, text: str, pos: int, final: bool) -> tuple[int, int]:
        n = len(text)
        while pos < n:
            mode = self.mode
            if mode == _JSON:
                pos, outcome = self._json(text, pos, final)
            elif mode == _TOP:
                if self._cand is not None and pos - self._cand > _MAX_AHEAD:
                    return pos, MORE  # looked far enough past an end tag inside an argument element
                found = self._top_first.search(text, pos)
                if found is None:
                    return n, MORE
                pos, outcome = self._tag(text, found.start(), final, self._top_tags)
            elif mode == _EXPECT:
                pos, outcome = self._expect(text, pos, final)
            elif mode == _CDATA:
                end = text.find("]]>", pos)
                if end < 0:
                    return (n if final else n - partial_suffix(text, pos, ("]]>",))), MORE
                pos, self.mode = end + 3, self.after_cdata
                continue
            else:
                pos, outcome = self._done(text, pos, final)
            if outcome is not None:
                return pos, outcome
        return pos, MORE

    def _tag(self, text: str, lt: int, final: bool, tags: tuple[str, ...]) -> tuple[int, int | None]:
        tag = match_tag(text, lt, tags, final)
        if tag is WAIT:
            return lt, MORE
        if tag is None:
            end = self._element(text, lt, final)
            return (lt, MORE) if end is None else (end, None)
        if tag in self.kind.closers:
            if self.element is not None and self.mode == _TOP:
                # Inside `<content>…`: a literal end tag may be content. Look on for `</content>` to decide.
                if self._cand is None:
                    self._cand, self._cand_len = lt, len(tag)
                return lt + len(tag), None
            self.close_len = len(tag)
            return lt, CLOSED
        if tag in self._implicit:
            return lt, INTERRUPTED
        if tag == CDATA_OPEN:
            self.after_cdata, self.mode = self.mode, _CDATA
        elif tag in PARAMS_OPEN_TAGS:
            self.mode, self.after_tick = _EXPECT, False
        elif tag == NAME_OPEN:
            self.mode = _TOP
            self.names_after_params += 1  # maybe the block holds a second name/parameters pair
        elif self.element is not None and self.mode == _TOP:
            pass  # `</parameters>` inside `<content>…`: content (if the element never closes, the block end decides)
        else:  # a parameters end tag: the arguments are complete
            self.mode = _DONE
        return lt + len(tag), None

    def _element(self, text: str, lt: int, final: bool) -> int | None:
        """An argument element opening or closing in the markup: followed, so an end tag inside it is data.
        None: the tag is not complete yet (more text decides)."""
        if self.mode != _TOP:
            return lt + 1
        match = _ELEMENT_TAG.match(text, lt)
        if match is None:
            if not final and text.find(">", lt) < 0 and len(text) - lt < 256 and _TAG_START.match(text, lt):
                return None
            return lt + 1
        name = "parameter" if match.group("eq") else match.group("name").lower()
        if match.group("slash"):
            if name == self.element:
                self.element, self._cand = None, None
        elif self.element is None and name not in _NOT_ARGUMENTS and not match.group().endswith("/>"):
            self.element = name
        return match.end()

    def _expect(self, text: str, pos: int, final: bool) -> tuple[int, int | None]:
        """Before the arguments: skip blanks and a code fence line; JSON starts at `{`, `[` or `"`."""
        c = text[pos]
        if c.isspace():
            self.after_tick = self.after_tick and c != "\n"
            return pos + 1, None
        if c in "`~":
            self.after_tick = True
            return pos + 1, None
        if self.after_tick and (c.isalnum() or c in "-_+#."):
            return pos + 1, None
        if c == "<" and self.blank:
            tag = match_tag(text, pos, (CDATA_OPEN, self.kind.opener), final)
            if tag is WAIT:
                return pos, MORE
            if tag == self.kind.opener:
                return skip(STUTTER[self.kind.name], text, pos), None
        self.blank = False
        if c in "{[":
            self.mode, self.depth, self.token_start = _JSON, 1, True
            return pos + 1, None
        if c == '"':
            self.mode, self.depth, self.quote = _JSON, 0, '"'
            return pos + 1, None
        if c == "<":
            tag = match_tag(text, pos, (CDATA_OPEN,), final)
            if tag is WAIT:
                return pos, MORE
            if tag is not None:
                return pos + len(tag), None
        self.mode = _TOP
        return pos, None

    def _json(self, text: str, pos: int, final: bool) -> tuple[int, int | None]:
        if self.quote:
            body = _DQ_BODY if self.quote == '"' else _SQ_BODY
            end = skip(body, text, pos)
            if end >= len(text):
                return end, MORE
            if text[end] == "\\":  # the escaped character has not arrived yet
                return (end + 1, MORE) if final else (end, MORE)
            self.quote, self.token_start = "", False
            if self.depth <= 0:
                self.mode = _DONE
            return end + 1, None
        match = _JSON_SPECIAL.search(text, pos)
        if match is None:
            if pos < len(text) and not text[pos:].isspace():
                self.token_start = False
            return len(text), MORE
        i, c = match.start(), match.group()
        if i > pos and not text[pos:i].isspace():
            self.token_start = False
        if c == '"' or (c == "'" and self.token_start):
            self.quote = c
        elif c in "{[":
            self.depth += 1
            self.token_start = True
        elif c in "}]":
            self.depth -= 1
            self.token_start = False
            if self.depth <= 0:
                self.mode = _DONE
        elif c in ",:":
            self.token_start = True
        elif c == "<":
            return self._tag(text, i, final, self._json_tags)
        else:
            self.token_start = False
        return i + 1, None

    def _done(self, text: str, pos: int, final: bool) -> tuple[int, int | None]:
        """The arguments are complete: only layout and end tags may follow; anything else ends the block."""
        pos = skip(_DONE_SKIP, text, pos)
        if pos >= len(text):
            return pos, MORE
        if text[pos] == "]" and not final and len(text) - pos < 3:
            return pos, MORE
        c = text[pos]
        if c in "{[":  # a second JSON value: keep it in the block, so the decoder can report it
            self.mode, self.depth, self.token_start = _JSON, 1, True
            return pos + 1, None
        if c not in self._heads:
            return pos, INTERRUPTED
        tag = match_tag(text, pos, self._done_tags, final)
        if c != "<" and tag is None:
            return pos, INTERRUPTED
        if tag is WAIT:
            return pos, MORE
        if tag in PARAMS_CLOSE_TAGS:
            return pos + len(tag), None
        if tag is not None:
            return self._tag(text, pos, final, self._done_tags)
        mangled = _MANGLED_CLOSER.match(text, pos)
        if mangled is not None:
            if not final and mangled.end() >= len(text):
                return pos, MORE
            self.close_len = mangled.end() - pos
            return pos, CLOSED
        if not final and len(text) - pos < 2:
            return pos, MORE
        return pos, INTERRUPTED
