"""A small GBNF reader for tests: parse the grammar text, decide whether it accepts a string, and sample strings.

It reads the subset llama.cpp's grammar format that mylm's compiler writes (literals, character classes with
ranges, negation and escapes, groups, `|`, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, rule references). It is an
independent reading of the grammar text, so the property tests check the text the server would receive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Union


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    ranges: tuple[tuple[int, int], ...]
    negated: bool

    def has(self, char: str) -> bool:
        inside = any(lo <= ord(char) <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[Expr, ...]


@dataclass(frozen=True)
class Rep:
    item: Expr
    low: int
    high: int | None


Expr = Union[Lit, Cls, Ref, Seq, Alt, Rep]

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/", "-": "-", "^": "^"}


class GrammarSyntaxError(ValueError):
    pass


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def skip(self, newlines: bool) -> None:
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "#":
                while self.i < len(self.text) and self.text[self.i] != "\n":
                    self.i += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            else:
                return

    def char(self) -> str:
        c = self.text[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = self.text[self.i + 1]
        if e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            code = self.text[self.i + 2 : self.i + 2 + width]
            self.i += 2 + width
            return chr(int(code, 16))
        if e not in _ESCAPES:
            raise GrammarSyntaxError(f"unknown escape \\{e} at {self.i}")
        self.i += 2
        return _ESCAPES[e]

    def alternates(self, nested: bool) -> Expr:
        options = [self.sequence(nested)]
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            options.append(self.sequence(nested))
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while True:
            self.skip(newlines=nested)
            if self.i >= len(self.text):
                break
            c = self.text[self.i]
            if c == '"':
                self.i += 1
                out = []
                while self.text[self.i] != '"':
                    out.append(self.char())
                self.i += 1
                item: Expr = Lit("".join(out))
            elif c == "[":
                self.i += 1
                negated = self.text[self.i] == "^"
                if negated:
                    self.i += 1
                ranges = []
                while self.text[self.i] != "]":
                    lo = self.char()
                    hi = lo
                    if self.text[self.i] == "-" and self.text[self.i + 1] != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((ord(lo), ord(hi)))
                self.i += 1
                item = Cls(tuple(ranges), negated)
            elif c == "(":
                self.i += 1
                item = self.alternates(nested=True)
                self.skip(newlines=True)
                if self.text[self.i] != ")":
                    raise GrammarSyntaxError(f"expected ) at {self.i}")
                self.i += 1
            elif re.match(r"[a-zA-Z0-9-]", c):
                m = re.compile(r"[a-zA-Z0-9-]+").match(self.text, self.i)
                assert m is not None
                after = self.text[m.end() :].lstrip(" \t")
                if after.startswith("::="):
                    break  # the next rule's name
                self.i = m.end()
                item = Ref(m.group(0))
            else:
                break
            items.append(self.postfix(item))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def postfix(self, item: Expr) -> Expr:
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "*":
                item, self.i = Rep(item, 0, None), self.i + 1
            elif c == "+":
                item, self.i = Rep(item, 1, None), self.i + 1
            elif c == "?":
                item, self.i = Rep(item, 0, 1), self.i + 1
            elif c == "{":
                m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.text, self.i)
                if not m:
                    raise GrammarSyntaxError(f"bad repetition at {self.i}")
                low = int(m.group(1))
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                item, self.i = Rep(item, low, high), m.end()
            else:
                return item
        return item


def parse_gbnf(text: str) -> dict[str, Expr]:
    """The rules of a GBNF grammar by name; raises `GrammarSyntaxError` on text it cannot read."""
    reader = _Reader(text)
    rules: dict[str, Expr] = {}
    while True:
        reader.skip(newlines=True)
        if reader.i >= len(text):
            break
        m = re.compile(r"([a-zA-Z0-9-]+)[ \t]*::=").match(text, reader.i)
        if not m:
            raise GrammarSyntaxError(f"expected a rule at {reader.i}: {text[reader.i:reader.i + 40]!r}")
        reader.i = m.end()
        rules[m.group(1)] = reader.alternates(nested=False)
    missing = {r.name for e in rules.values() for r in _refs(e)} - set(rules)
    if missing or "root" not in rules:
        raise GrammarSyntaxError(f"undefined rules: {sorted(missing) or ['root']}")
    return rules


def _refs(expr: Expr) -> list[Ref]:
    if isinstance(expr, Ref):
        return [expr]
    if isinstance(expr, Seq):
        return [r for e in expr.items for r in _refs(e)]
    if isinstance(expr, Alt):
        return [r for e in expr.options for r in _refs(e)]
    if isinstance(expr, Rep):
        return _refs(expr.item)
    return []


def accepts(rules: dict[str, Expr], text: str, start: str = "root") -> bool:
    """Whether the grammar derives exactly `text` from `start`."""

    @lru_cache(maxsize=None)
    def ends(expr: Expr, pos: int) -> frozenset[int]:
        if isinstance(expr, Lit):
            return frozenset([pos + len(expr.text)]) if text.startswith(expr.text, pos) else frozenset()
        if isinstance(expr, Cls):
            return frozenset([pos + 1]) if pos < len(text) and expr.has(text[pos]) else frozenset()
        if isinstance(expr, Ref):
            return ends(rules[expr.name], pos)
        if isinstance(expr, Alt):
            return frozenset().union(*(ends(o, pos) for o in expr.options))
        if isinstance(expr, Seq):
            current = frozenset([pos])
            for item in expr.items:
                current = frozenset().union(*(ends(item, p) for p in current)) if current else current
            return current
        # Rep: breadth-first over the count, so long runs of a class do not recurse deeply.
        reached: set[int] = set()
        frontier = frozenset([pos])
        count = 0
        seen: set[int] = set()
        while frontier:
            if count >= expr.low:
                reached |= frontier
            if expr.high is not None and count >= expr.high:
                break
            nxt = frozenset().union(*(ends(expr.item, p) for p in frontier))
            # positions already expanded at a count past the minimum add nothing new
            frontier = frozenset(p for p in nxt if not (count + 1 > expr.low and p in seen))
            seen |= frontier
            count += 1
        return frozenset(reached)

    return len(text) in ends(rules[start], 0)


#: Characters offered when a class is negated: plain text, JSON's troublemakers, the protocol's, non-ASCII.
POOL = tuple(
    "aZ09 _.,:;!?-+=/'\"\\<>`~{}[]()#@&%$*|\n\t\r\x00\x01\x1f\x7féß€中😀"
)


def sample(rules: dict[str, Expr], choose: Callable[[int], int], start: str = "root", budget: int = 400) -> str:
    """A string the grammar derives, steered by `choose(n) -> 0..n-1`; past `budget` steps it heads for the end."""
    depth_to_end = _depths(rules)
    steps = [0]
    out: list[str] = []

    def cheapest(options: tuple[Expr, ...]) -> int:
        return min(range(len(options)), key=lambda i: _depth(options[i], depth_to_end))

    def go(expr: Expr) -> None:
        steps[0] += 1
        late = steps[0] > budget
        if isinstance(expr, Lit):
            out.append(expr.text)
        elif isinstance(expr, Cls):
            if expr.negated:
                pool = [c for c in POOL if expr.has(c)]
                out.append(pool[choose(len(pool))])
            else:
                lo, hi = expr.ranges[choose(len(expr.ranges))]
                out.append(chr(lo + choose(min(hi - lo + 1, 64))))
        elif isinstance(expr, Ref):
            go(rules[expr.name])
        elif isinstance(expr, Seq):
            for item in expr.items:
                go(item)
        elif isinstance(expr, Alt):
            go(expr.options[cheapest(expr.options) if late else choose(len(expr.options))])
        else:
            top = expr.high if expr.high is not None else expr.low + 4
            count = expr.low if late else expr.low + choose(min(top, expr.low + 4) - expr.low + 1)
            for _ in range(count):
                go(expr.item)

    go(rules[start])
    return "".join(out)


def _depths(rules: dict[str, Expr]) -> dict[str, float]:
    depth = {name: float("inf") for name in rules}
    for _ in range(len(rules) + 2):
        for name, expr in rules.items():
            depth[name] = min(depth[name], 1 + _depth(expr, depth))
    return depth


def _depth(expr: Expr, depth: dict[str, float]) -> float:
    if isinstance(expr, (Lit, Cls)):
        return 0
    if isinstance(expr, Ref):
        return depth[expr.name]
    if isinstance(expr, Seq):
        return max((_depth(e, depth) for e in expr.items), default=0)
    if isinstance(expr, Alt):
        return min(_depth(e, depth) for e in expr.options)
    return _depth(expr.item, depth) if expr.low else 0
