"""GBNF text: literals escaped as llama.cpp's grammar parser reads them, and an ordered set of rules."""

from __future__ import annotations

import re

_NAME_CHARS = re.compile(r"[^a-z0-9]+")


def literal(text: str) -> str:
    """`text` as a GBNF string literal (UTF-8 passes through; quotes, backslashes, controls escaped)."""
    out = []
    for char in text:
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def rule_name(hint: str) -> str:
    """A valid rule name from free text (lower-case letters, digits and dashes)."""
    name = _NAME_CHARS.sub("-", hint.lower()).strip("-")
    return name or "r"


class Rules:
    """Named rules in order of creation; identical bodies share one name (small, deterministic output)."""

    def __init__(self) -> None:
        self._bodies: dict[str, str] = {}
        self._by_body: dict[str, str] = {}

    def add(self, hint: str, body: str) -> str:
        """Define a rule for `body` (reusing an identical one) and return its name."""
        existing = self._by_body.get(body)
        if existing is not None:
            return existing
        name = self._fresh(hint)
        self._bodies[name] = body
        self._by_body[body] = name
        return name

    def reserve(self, hint: str) -> str:
        """A name to define later with `define` (for recursive rules)."""
        name = self._fresh(hint)
        self._bodies[name] = ""
        return name

    def define(self, name: str, body: str) -> None:
        self._bodies[name] = body

    def _fresh(self, hint: str) -> str:
        base = rule_name(hint)
        name, n = base, 1
        while name in self._bodies or name == "root":
            n += 1
            name = f"{base}-{n}"
        return name

    def text(self, root: str) -> str:
        """The grammar: `root ::= ...` first, then the rules in the order they were made."""
        lines = [f"root ::= {root}"]
        lines.extend(f"{name} ::= {body}" for name, body in self._bodies.items())
        return "\n".join(lines) + "\n"
