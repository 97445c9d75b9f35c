"""Markdown block structure around a tag: is it quoted (`>`), in indented code, or in a list?

The parser asks only where a tag is found, looking back over the text already shown; the answer for a line is
cached until a new line starts, so the work stays linear however many tags a line holds. A call in a quoted or
example context (a blockquote, an indented code block, a fence: see `fences`) is text and never runs.

The rules are CommonMark's, reduced to what decides a tag's meaning:
- a line whose first non-blank character (after at most 3 spaces) is `>` is quoted;
- a line indented by 4 or more columns is indented code if a blank line (or the start of the reply) comes before
  it and it is not the continuation of a list item (a list item's content is indented too: it is not an example);
  an indented line right after a paragraph line continues the paragraph.
"""

from __future__ import annotations

import re

QUOTE, CODE, PLAIN = "quote", "code", ""
_QUOTE = re.compile(r"[ ]{0,3}>")
_LIST_ITEM = re.compile(r"[ ]{0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
#: Look back at most this far for the start of the current line and the lines above it.
_LOOKBACK = 4000
#: An invented result after a call: `Observation:`, `Result:`, `Output:`, `Tool output:` (bold, quoted or as a
#: heading too), in any case.
INVENTED = re.compile(
    r"[ \t]{0,3}(?:[>*_#]+[ \t]*)*(?:observation|tool[ _](?:output|result|response)|function[ _](?:output|result)"
    r"|result|output)s?[ \t*_]*:", re.IGNORECASE)
_INVENTED_WORDS = ("observation", "tool output", "tool result", "tool response", "tool_output", "tool_result",
                   "tool_response", "function output", "function result", "result", "output")
#: Info strings of a fence that shows a result rather than code.
OUTPUT_LABELS = frozenset({"output", "outputs", "observation", "result", "results", "stdout", "stderr",
                           "tool_output", "tool_result", "tool_response", "response"})


def may_be_invented(line: str) -> bool:
    """Whether more text could still make `line` (the start of a line) an invented result."""
    word = line.lstrip(" \t>*_#").lower()
    return any(w.startswith(word) or word.startswith(w) for w in _INVENTED_WORDS)


def _width(line: str) -> int:
    """The indentation of `line` in columns (a tab reaches the next multiple of 4)."""
    col = 0
    for ch in line:
        if ch == " ":
            col += 1
        elif ch == "\t":
            col += 4 - col % 4
        else:
            break
    return col


class LineContext:
    """The context of the line being shown, from the pieces of text shown so far (cached per line)."""

    def __init__(self) -> None:
        self._pieces_seen = 0
        self._result: str | None = None

    def of(self, pieces: list[str]) -> str:
        """QUOTE, CODE or PLAIN for the current (last) line of `pieces`."""
        n = len(pieces)
        if self._result is not None and self._pieces_seen <= n and not any(
                "\n" in p for p in pieces[self._pieces_seen :]):
            self._pieces_seen = n
            return self._result
        self._result, self._pieces_seen = _context(pieces), n
        return self._result


def _context(pieces: list[str]) -> str:
    tail: list[str] = []
    size, whole = 0, True
    for piece in reversed(pieces):
        tail.append(piece)
        size += len(piece)
        if size > _LOOKBACK:
            whole = False
            break
    text = "".join(reversed(tail))
    if not whole:
        text = text[-_LOOKBACK:]
    lines = text.split("\n")
    if not whole and len(lines) == 1:
        return PLAIN  # a line longer than the look-back: nothing structural is known about it
    current = lines[-1]
    if _QUOTE.match(current):
        return QUOTE
    if _width(current) < 4:
        return PLAIN
    blank_between = False
    for line in reversed(lines[:-1]):
        if not line.strip():
            blank_between = True
            continue
        if _width(line) >= 4:
            continue  # more of the same indented run (or of a list item's content)
        if _LIST_ITEM.match(line):
            return PLAIN  # a list item's content
        return CODE if blank_between else PLAIN  # after a paragraph line with no blank line: a continuation
    return CODE if whole else PLAIN


def quoted_lines(text: str) -> list[tuple[int, int]]:
    """The spans of the lines of `text` that are quoted or indented code (the same rules, in one forward pass)."""
    spans: list[tuple[int, int]] = []
    pos, blank_between, anchor = 0, True, ""  # anchor: "" (start), "list" or "para": the last unindented line
    for line in text.split("\n"):
        end = pos + len(line)
        if not line.strip():
            blank_between = True
        elif _QUOTE.match(line):
            spans.append((pos, end))
            anchor, blank_between = "para", False
        elif _width(line) >= 4:
            if anchor != "list" and (blank_between or anchor == "code"):
                spans.append((pos, end))
                anchor = "code"
            blank_between = False
        else:
            anchor, blank_between = ("list" if _LIST_ITEM.match(line) else "para"), False
        pos = end + 1
    return spans
