"""Counted nouns in what mylm says: `1 line`, `2 lines`, never `1 lines` or `line(s)`. Imports nothing."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, the noun plural unless n is 1 (`plural` for irregular ones: directory -> directories)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


__all__ = ["counted"]
