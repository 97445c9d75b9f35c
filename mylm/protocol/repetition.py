"""A guard against degenerate replies: a small model that loops on a line (`#15`, `#16`, ... or the same line over
and over, or a short block of lines) until the token limit. Fed the reply as it streams, it says when the tail
has repeated long enough that nothing useful can follow, so the turn is cut short instead of running to
max_tokens (docs/parser.md, "Repetition guard").

Only consecutive repetition counts: the last lines must be copies of the `period` lines before them (period up
to 16), either exactly or with only their numbers stepping by one (a counter). Legit output repeats less: a
table's rows or a list's items differ in words or in several numbers at once, and code's closing braces
come a few at a time. So the thresholds are in whole lines, and a counter, which a requested list of numbers
can legitimately be, needs many more of them than an exact copy; but a block of `LONG_BLOCK` characters or more
(paragraphs) is cut at its third copy. Cost: a few comparisons per completed line.

A reply can also degenerate inside one line, with no newline at all ("Python 3.11.2 Python 3.11.2 ...",
"2000000000000...", "0.5.5.5.5..."). So a line that keeps growing is looked at every `INLINE_STEP` characters:
if its tail is one short unit (up to `INLINE_MAX_PERIOD` characters) copied end to end long enough, it is cut
too. How long depends on what the unit is made of:

- a tiny unit (up to `TINY_PERIOD` characters) holding a letter or a digit (`0`, `.5`, `ha `): `TINY_CHARS`
  characters. No number, word or identifier repeats one or two characters for that long (a 64-digit zero hash,
  2**1000's 302 digits and base64 do not); a number that keeps growing this way is a runaway, not an answer;
- a longer unit holding a letter (a sentence said again and again): `WORDS_CHARS` characters and
  `INLINE_COPIES` copies; a unit of `LONG_UNIT` characters or more (a paragraph, as Qwen2.5-Coder-1.5B loops its
  answer: "The task is now complete. No more tools will be run. The remaining steps are ...", ~250 characters)
  needs only three copies end to end: nobody means a paragraph three times in a row;
- any other unit, of punctuation and blanks (`=`, `-`, `*`, `-+`) or a cycle of numbers: `INLINE_CHARS`
  characters, since Markdown separators and rules are long runs of one character that nobody means as a loop,
  and a list of numbers may cycle.

A legit long line (a paragraph, minified code, base64) does not repeat one unit end to end. Call arguments are
data (a file of repeated lines may be what was asked for), so they are watched by a second guard of `scale`
`ARGUMENTS_SCALE`, every threshold that many times longer, and only units of words judged at all: the 1.5B, writing release.txt a third time through
LangChain, ran 4,096 tokens (1,000 s on two cores) inside the call's content. Cost: one `rfind` and one
comparison of the tail per step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar

_S = TypeVar("_S", str, list[str])

_NUMBER = re.compile(r"\d+")
#: A JSON string's escapes (`\n`, `\"`, `\u00e9`), left out when a unit in a call's arguments is judged.
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")
#: The end of a sentence (`stats.py` is not one) or of a line.
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")

#: Lines an exact repetition must cover (the first copy included) before the reply is cut.
EXACT_LINES = 48
#: A block of lines this long (in characters) is cut at its third copy, however few lines it has: a paragraph
#: said three times in a row is a loop, where a short line (`}`, `pass`, a table's rule) may legitimately recur.
LONG_BLOCK = 160
#: Lines a repetition whose numbers step by one (a counter) must cover.
COUNTED_LINES = 128
#: The longest repeated block looked for, in lines.
MAX_PERIOD = 16
#: Characters of one line a repetition of punctuation and blanks (a separator) must cover before it is cut.
INLINE_CHARS = 1024
#: Copies of the unit it must hold (a short unit covers its length in characters long before this many copies
#: of a long one).
INLINE_COPIES = 8
#: The longest unit looked for inside a line, in characters.
INLINE_MAX_PERIOD = 512
#: A unit at least this long holding a letter is cut at its third copy (see the module's docstring).
LONG_UNIT = 96
#: A unit this short holding a letter or a digit (`0` of `2000000...`, `.5` of `0.5.5.5...`) is cut after
#: `TINY_CHARS` characters.
TINY_PERIOD = 4
TINY_CHARS = 128
#: A longer unit holding a letter or a digit (a sentence again and again) is cut after this many characters.
WORDS_CHARS = 384
#: How often, in characters of a growing line, its tail is looked at.
INLINE_STEP = 64
#: How many times longer every threshold is for the guard over a call's arguments (see the module's docstring):
#: a 7-character unit (`hello\\n` in a JSON string) may be written ~440 times before it is cut, a sentence ~64.
ARGUMENTS_SCALE = 8


@dataclass(frozen=True)
class Repetition:
    """A degenerate tail: `lines` lines repeating a block of `period` lines, exactly or as a counter."""

    line: str
    period: int
    lines: int
    counted: bool
    #: The repetition is inside one line: `line` is the repeated unit, `period` its length in characters and
    #: `lines` its number of copies.
    inline: bool = False

    def describe(self) -> str:
        """One sentence for the model and the user."""
        shown = self.line if len(self.line) <= 60 else self.line[:57] + "..."
        if self.inline:
            return f"the reply repeated {shown!r} {self.lines} times in one line, so it was stopped"
        what = f"the line {shown!r}" if self.period == 1 else f"a block of {self.period} lines ending {shown!r}"
        how = "with only its numbers counting up" if self.counted else "unchanged"
        return f"the reply repeated {what} {how} for {self.lines} lines, so it was stopped"

    def first_copy(self, text: str) -> str:
        """`text` (a reply cut for this repetition) up to the end of the repeated unit's first copy, back to the
        last sentence's end inside it when there is one: what the model meant to say once. A counter is left
        as it is (its lines differ)."""
        if self.counted:
            return text
        if self.inline:
            kept = _periodic_start(text.rstrip(), self.period)
            ends = [m.end() for m in _SENTENCE_END.finditer(kept, max(0, len(kept) - self.period))]
            return kept[:ends[-1]].rstrip() if ends else kept
        return "\n".join(_periodic_start(self._whole_lines(text), self.period))

    def before(self, text: str) -> str:
        """`text` (a reply cut for this repetition of lines) before the repeated block's first copy: what the
        model wrote before it began to loop ("" for a counter or a loop inside a line)."""
        if self.counted or self.inline:
            return ""
        kept = _periodic_start(self._whole_lines(text), self.period)
        return "\n".join(kept[: max(0, len(kept) - self.period)])

    @staticmethod
    def _whole_lines(text: str) -> list[str]:
        lines = text.split("\n")
        if lines and not text.endswith("\n"):
            lines.pop()  # the line being written when the reply was cut
        return lines


@dataclass(frozen=True)
class _Line:
    text: str
    shape: str  # the line with every number replaced by 0
    numbers: tuple[int, ...]


class RepetitionGuard:
    """Watches one streamed reply; `feed` returns the repetition once the tail is degenerate (then stays so)."""

    def __init__(
        self, *, exact_lines: int = EXACT_LINES, counted_lines: int = COUNTED_LINES, max_period: int = MAX_PERIOD,
        inline_chars: int = INLINE_CHARS, scale: int = 1,
    ) -> None:
        #: Every threshold (lines, characters, copies) is this many times longer (`ARGUMENTS_SCALE` for arguments).
        self.scale = scale
        self.exact_lines = exact_lines * scale
        self.counted_lines = counted_lines * scale
        self.max_period = max_period
        self.inline_chars = inline_chars
        self._partial: list[str] = []
        self._partial_len = 0  # characters in `_partial`
        self._inline_at = INLINE_STEP  # the partial line's length at which its tail is next looked at
        self._recent: list[_Line] = []  # the last max_period lines, oldest first
        self._shapes: dict[str, int] = {}  # how many of them have each shape: most lines match none (fast path)
        # For each period p (index p - 1): how many lines in a row equal the line p before them.
        self._exact = [0] * max_period
        self._counted = [0] * max_period
        self.found: Repetition | None = None

    def feed(self, text: str) -> Repetition | None:
        """Take the next piece of the reply; the repetition found, if the reply has degenerated."""
        if "\n" not in text:  # most chunks: a few characters of the current line
            if text and self.found is None:
                self._partial.append(text)
                self._partial_len += len(text)
                if self._partial_len >= self._inline_at:
                    self._look_inline()
            return self.found
        if self.found is not None:
            return self.found
        lines = text.split("\n")
        self._partial.append(lines[0])
        self._line("".join(self._partial))
        for line in lines[1:-1]:
            if self.found is not None:
                break
            self._line(line)
        self._partial = [lines[-1]] if lines[-1] else []
        self._partial_len = len(lines[-1])
        self._inline_at = INLINE_STEP
        if self._partial_len >= self._inline_at and self.found is None:
            self._look_inline()
        return self.found

    def interrupt(self) -> None:
        """Text not fed here came between (a call block): the next piece starts a new line."""
        self._partial = []
        self._partial_len = 0
        self._inline_at = INLINE_STEP

    def _look_inline(self) -> None:
        """Whether the growing line's tail is one short unit copied end to end (see the module's docstring)."""
        line = "".join(self._partial)
        self._partial = [line]  # joined once per step, not per chunk
        self._inline_at = len(line) + INLINE_STEP
        if len(line) <= min(self.inline_chars, TINY_CHARS) * self.scale:
            return
        # The unit's length is the distance back to the tail's last 16 characters' previous occurrence.
        probe, end = line[-16:], len(line) - 1
        lowest = max(0, len(line) - 16 - INLINE_MAX_PERIOD)
        while True:
            at = line.rfind(probe, lowest, end)
            if at < 0:
                return
            period = len(line) - 16 - at
            window = self._window(line[-period:]) * self.scale
            if len(line) >= window + period and line[-window:] == line[-window - period:-period]:
                break
            end = at + 15  # the next occurrence further back (a unit with the probe inside it more than once)
        # How far back the copies go, for the message: the tail matches itself shifted by one unit.
        start = len(line) - window - period
        while start >= period and line[start - period:start] == line[start:start + period]:
            start -= period
        unit = line[-period:]
        self.found = Repetition(unit, period, (len(line) - start) // period, counted=False, inline=True)

    def _window(self, unit: str) -> int:
        """How many characters a unit repeated end to end must cover before the line is degenerate."""
        if self.scale > 1:  # judged by its shortest unit: `a a a ` is `a ` three times, a tiny unit's run
            unit = unit[:(unit + unit).find(unit, 1)]
            # Only words said again and again are a loop in arguments; anything else is data: a line of numbers
            # (`0,0,0,0\n`: its `\n` is JSON's escape, not a letter), a run of punctuation (`{{{{`, `$($($(`, a
            # rule of `=`), padding. The security battery's 60,000-brace command must reach the approval.
            if len(unit) <= TINY_PERIOD or not any(c.isalpha() for c in _ESCAPE.sub("", unit)):
                return 1 << 30
        if not any(c.isalnum() for c in unit):
            return max(self.inline_chars, len(unit) * INLINE_COPIES)  # a separator: `=====`, `-+-+-+`
        if len(unit) <= TINY_PERIOD:
            return min(self.inline_chars, TINY_CHARS)
        if any(c.isalpha() for c in unit):  # words said again and again
            if len(unit) >= LONG_UNIT:
                if (unit + unit).find(unit, 1) < len(unit):
                    return 1 << 30  # copies of a shorter unit: that unit's own rule decides
                return 2 * len(unit)  # with the unit itself, three copies
            return min(self.inline_chars, max(WORDS_CHARS, len(unit) * INLINE_COPIES))
        return max(self.inline_chars, len(unit) * INLINE_COPIES)  # a cycle of numbers may be data: `[0, 1, ..., 9, 0, …]`

    def _line(self, raw: str) -> None:
        text = raw.rstrip()
        numbers = _NUMBER.findall(text)
        line = _Line(text, _NUMBER.sub("0", text) if numbers else text, tuple(map(int, numbers)))
        recent = self._recent
        if line.shape not in self._shapes:
            if any(self._counted):  # every exact run is a counted run too
                self._exact = [0] * self.max_period
                self._counted = [0] * self.max_period
            self._remember(line)
            return
        for p in range(1, self.max_period + 1):
            if p > len(recent):
                self._exact[p - 1] = self._counted[p - 1] = 0
                continue
            before = recent[-p]
            if before.text == line.text:
                self._exact[p - 1] += 1
                self._counted[p - 1] += 1
            elif before.shape == line.shape and _counts(before.numbers, line.numbers):
                self._exact[p - 1] = 0
                self._counted[p - 1] += 1
            else:
                self._exact[p - 1] = self._counted[p - 1] = 0
                continue
            self._check(p, line)
            if self.found is not None:
                break
        self._remember(line)

    def _long_block(self, p: int, line: _Line) -> bool:
        """Whether the block of `p` lines ending with `line` (not yet remembered) is a paragraph (`LONG_BLOCK`),
        and not a shorter block's copies (the same line seven times is judged as one line, by the line rule)."""
        if any(self._exact[q - 1] >= p for q in range(1, p) if p % q == 0):
            return False
        return len(line.text) + sum(len(before.text) for before in self._recent[len(self._recent) - p + 1:]) >= LONG_BLOCK

    def _remember(self, line: _Line) -> None:
        recent, shapes = self._recent, self._shapes
        recent.append(line)
        shapes[line.shape] = shapes.get(line.shape, 0) + 1
        if len(recent) > self.max_period:
            old = recent.pop(0).shape
            shapes[old] -= 1
            if not shapes[old]:
                del shapes[old]

    def _check(self, p: int, line: _Line) -> None:
        # A run of r lines each equal to the one p before covers r + p lines; at least four copies of the block.
        exact, counted = self._exact[p - 1], self._counted[p - 1]
        if exact >= max(self.exact_lines - p, 3 * p) or (exact >= 2 * p * self.scale and self._long_block(p, line)):
            self.found = Repetition(line.text, p, exact + p, counted=False)
        elif counted >= max(self.counted_lines - p, 3 * p):
            self.found = Repetition(line.text, p, counted + p, counted=True)


def _periodic_start(items: _S, period: int) -> _S:
    """`items` without the copies of its last `period` items that end it (the first copy kept)."""
    j = len(items) - 1
    while j - period >= 0 and items[j - period] == items[j]:
        j -= 1
    return items[:j + 1]


def _counts(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Whether `after` is `before` with some numbers counted one up (or down) and the rest unchanged."""
    return all(b - a in (-1, 0, 1) for a, b in zip(before, after))
