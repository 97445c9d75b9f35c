"""A guard against degenerate replies: a small model that loops on a line (`#15`, `#16`, ... or the same line over
and over, or a short block of lines) until the token limit. Fed the reply as it streams, it says when the tail
has repeated long enough that nothing useful can follow, so the turn is cut short instead of running to
max_tokens (docs/parser.md, "Repetition guard").

Only consecutive repetition counts: the last lines must be copies of the `period` lines before them (period up
to 16), either exactly or with only their numbers stepping by one (a counter). Legit output repeats less: a
table's rows or a list's items differ in words or in several numbers at once, and code's closing braces
come a few at a time. So the thresholds are in whole lines, and a counter, which a requested list of numbers
can legitimately be, needs many more of them than an exact copy. Cost: a few comparisons per completed line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = re.compile(r"\d+")

#: Lines an exact repetition must cover (the first copy included) before the reply is cut.
EXACT_LINES = 48
#: Lines a repetition whose numbers step by one (a counter) must cover.
COUNTED_LINES = 128
#: The longest repeated block looked for, in lines.
MAX_PERIOD = 16


@dataclass(frozen=True)
class Repetition:
    """A degenerate tail: `lines` lines repeating a block of `period` lines, exactly or as a counter."""

    line: str
    period: int
    lines: int
    counted: bool

    def describe(self) -> str:
        """One sentence for the model and the user."""
        shown = self.line if len(self.line) <= 60 else self.line[:57] + "..."
        what = f"the line {shown!r}" if self.period == 1 else f"a block of {self.period} lines ending {shown!r}"
        how = "with only its numbers counting up" if self.counted else "unchanged"
        return f"the reply repeated {what} {how} for {self.lines} lines, so it was stopped"


@dataclass(frozen=True)
class _Line:
    text: str
    shape: str  # the line with every number replaced by 0
    numbers: tuple[int, ...]


class RepetitionGuard:
    """Watches one streamed reply; `feed` returns the repetition once the tail is degenerate (then stays so)."""

    def __init__(
        self, *, exact_lines: int = EXACT_LINES, counted_lines: int = COUNTED_LINES, max_period: int = MAX_PERIOD
    ) -> None:
        self.exact_lines = exact_lines
        self.counted_lines = counted_lines
        self.max_period = max_period
        self._partial: list[str] = []
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
        return self.found

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
        if exact >= max(self.exact_lines - p, 3 * p):
            self.found = Repetition(line.text, p, exact + p, counted=False)
        elif counted >= max(self.counted_lines - p, 3 * p):
            self.found = Repetition(line.text, p, counted + p, counted=True)


def _counts(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Whether `after` is `before` with some numbers counted one up (or down) and the rest unchanged."""
    return all(b - a in (-1, 0, 1) for a, b in zip(before, after))
