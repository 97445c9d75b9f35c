"""Markdown code fences around tool blocks: tell a stray wrapper (the call runs) from an example (it does not).

A block inside a fence is held until the fence is decided. The fence was a wrapper if it holds nothing but
blocks and no prose follows it (the reply ends, or an observation or another block starts); then its blocks
run. Any other text in the fence, or prose after it, makes its blocks examples, shown as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ..core.types import ToolCall
from .blockscan import skip

MAX_RUN = 64  # longer runs of backticks or blanks are plain text; this bounds what is ever held back

_RUN = {"`": re.compile(r"`+"), "~": re.compile(r"~+")}
#: A fence's info string, of any form (`xml`, `python title="a.py"`, `{.json}`): the rest of the opening line.
_INFO = re.compile(r"[^`\n]*")
_BLANKS = re.compile(r"[ \t]*")

FenceAction = Literal["wait", "open", "close", "long", "run"]


@dataclass
class Pending:
    """A block inside a fence, waiting for the fence's fate: its call or error, and its text as written."""

    call: ToolCall | None
    error: str | None
    raw: str


@dataclass
class Fence:
    """An open (or just closed) code fence and the blocks it holds."""

    char: str
    length: int
    #: Index of the opening line in the thought pieces, removed when the fence turns out to be a wrapper.
    thought_at: int | None
    tainted: bool = False  # it holds text besides blocks: its blocks are examples
    closed: bool = False
    had_block: bool = False
    held: list[Pending | str] = field(default_factory=list)

    def release(self) -> list[str]:
        """Non-blank content in the fence or prose after it: its blocks were examples; return them as text."""
        held, self.held = self.held, []
        if not self.closed:
            self.tainted = True
        return [item if isinstance(item, str) else item.raw for item in held]

    def close(self, line: str) -> str | None:
        """The closing line arrived; return it to show, or None while it is held with the blocks."""
        self.closed = True
        if self.held:
            self.held.append(line)
            return None
        return line

    def wrapped(self) -> list[Pending]:
        """Nothing but blanks followed the content: the fence was a wrapper, so its blocks count."""
        held, self.held = self.held, []
        return [item for item in held if isinstance(item, Pending)]

    @property
    def ambiguous(self) -> bool:
        """It showed a block among other text and nothing followed: maybe an example, maybe a call."""
        return self.tainted and self.had_block


def fence_run(text: str, pos: int, *, line_blank: bool, fence: Fence | None, long_run: str,
              final: bool) -> tuple[FenceAction, int]:
    """Classify the run of backticks or tildes at `text[pos]`; return the action and where it ends.

    `open`: a fence opener, its info string included. `close`: the open fence's closing line, trailing blanks
    included. `long`: a run too long to matter (plain text). `run`: any other run (inline code or text). `wait`:
    more text is needed to decide.
    """
    ch = text[pos]
    end = skip(_RUN[ch], text, pos)
    if long_run == ch or end - pos > MAX_RUN:
        return "long", end
    if end == len(text) and not final:
        return "wait", pos
    run = end - pos
    if not line_blank or run < 3:
        return "run", end
    if fence is not None and not fence.closed:
        if ch != fence.char or run < fence.length:
            return "run", end
        rest = skip(_BLANKS, text, end)
        if rest == len(text) and not final and rest - end <= MAX_RUN:
            return "wait", pos
        return ("close", rest) if rest == len(text) or text[rest] in "\r\n" else ("run", end)
    info = skip(_INFO, text, end)
    if info == len(text) and not final and info - end <= MAX_RUN:
        return "wait", pos
    return "open", info
