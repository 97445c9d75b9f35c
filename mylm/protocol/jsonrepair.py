"""Lenient JSON for tool arguments: read what a model plainly meant, and refuse whatever would need a guess.

Accepted beyond strict JSON: raw control characters in strings, single-quoted strings, Python literals
(`True`, `None`), bare identifier keys, trailing commas, `//`, `/* */` and `#` comments, a literal `\\n` between
tokens, and unclosed brackets when an explicit end tag shows the model had finished.

Backslashes: a string that contains an escape JSON does not define (`\\U`, `\\d`, `\\'`), or one nobody means
(`\\b` backspace, `\\f` form feed), or a drive path (`C:\\temp`), was written without escaping, so every backslash
in it is kept literally (only `\\"` stays a quote, since it is what kept the string open). Other strings decode
exactly as JSON says. No repair ever swaps quote characters inside a string, so `what's` is never corrupted.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DECODER = json.JSONDecoder(strict=False)
_WS = re.compile(r"[ \t\r\n]*")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_DQ_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_SQ_BODY = re.compile(r"[^'\\]*(?:\\.[^'\\]*)*", re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"-?[A-Za-z_$][\w$]*")
_LITERALS: dict[str, Any] = {
    "true": True, "false": False, "null": None, "True": True, "False": False, "None": None,
    "NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf"),
}
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

_UNESCAPED_QUOTE = 'a " inside a string must be written as \\"'


def _skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    found = pattern.match(text, pos)
    return pos if found is None else found.end()


class JSONRepairError(ValueError):
    """The text is not JSON, even read leniently; says where and what the model should write instead."""

    def __init__(self, what: str, text: str, pos: int, start: int, *, hint: str = "", incomplete: bool = False,
                 in_string: bool = False) -> None:
        self.what = what
        self.pos = pos
        self.lineno = text.count("\n", start, pos) + 1
        line_start = text.rfind("\n", start, pos) + 1 or start
        self.colno = pos - max(line_start, start) + 1
        self.hint = hint
        #: The text ended (or reached an end tag) before the value was complete.
        self.incomplete = incomplete
        self.in_string = in_string
        super().__init__(f"{what} at line {self.lineno}, column {self.colno}")


def loads(text: str, start: int = 0, *, autoclose: bool = False) -> tuple[Any, int]:
    """Decode one JSON value at `text[start:]`; return it and where it ended.

    A `<` outside a string ends the input (it starts the tag that closes the parameters). With `autoclose`,
    brackets still open there are closed, because the caller saw an explicit end.
    """
    pos = _skip(_WS, text, start)
    if not autoclose:
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pass
        else:
            if "\\" not in text[pos:end] or not _needs_raw_reading(text, pos, end):
                return value, end
    return _Reader(text, pos, autoclose).read()


# Escapes that show a string was written without escaping its backslashes: one JSON does not define, `\\b` or
# `\\f` (nobody means backspace or form feed), and a drive path `C:\\temp` (escaped, it would read `C:\\\\temp`).
_ODD_ESCAPE = {
    '"': re.compile(r'\\(?:[bf]|[^\\/bfnrtu"]|u(?![0-9a-fA-F]{4}))', re.DOTALL),
    "'": re.compile(r"\\(?:[bf]|[^\\/bfnrtu'\"]|u(?![0-9a-fA-F]{4}))", re.DOTALL),
}
_DRIVE = re.compile(r":\\[tnr](?<=[A-Za-z]:\\[tnr])")


def _needs_raw_reading(text: str, start: int, end: int, quote: str = '"') -> bool:
    """True when a string holds an escape the model cannot have meant (`\\U`, `\\b`, `C:\\temp`)."""
    for match in _ODD_ESCAPE[quote].finditer(text, start, end):
        i = j = match.start()
        while j > start and text[j - 1] == "\\":
            j -= 1
        if (i - j) % 2 == 0:  # not the second half of an escaped backslash `\\\\`
            return True
    for match in _DRIVE.finditer(text, start, end):
        i = match.start()
        if i - start >= 1 and (i - start < 2 or not text[i - 2].isascii() or not text[i - 2].isalnum()):
            return True
    return False


def decode_string(body: str, quote: str = '"') -> str:
    """Decode the inside of a string literal: JSON escapes, unless the string was plainly written unescaped."""
    if "\\" not in body:
        return body
    if _needs_raw_reading(body, 0, len(body), quote):
        # Written raw: every backslash is literal, except the one that kept the string open.
        return _ESCAPE.sub(lambda m: quote if m.group(1) == quote else m.group(0), body)
    if quote == '"':
        return str(_DECODER.decode('"' + body + '"'))
    parts: list[str] = []
    last = 0
    for m in _ESCAPE.finditer(body):
        parts.append(body[last : m.start()])
        esc = m.group(1)
        parts.append(quote if esc == quote else _SIMPLE[esc] if len(esc) == 1 else chr(int(esc[1:], 16)))
        last = m.end()
    parts.append(body[last:])
    decoded = "".join(parts)
    if any(0xD800 <= ord(ch) <= 0xDBFF for ch in decoded):  # join surrogate pairs written as two escapes
        decoded = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return decoded


class _Reader:
    """One lenient pass over a value; an explicit stack, so deep nesting cannot exhaust Python's recursion."""

    def __init__(self, text: str, pos: int, autoclose: bool) -> None:
        self.text = text
        self.start = pos
        self.pos = pos
        self.autoclose = autoclose
        self.end = len(text)

    def fail(self, what: str, *, hint: str = "", incomplete: bool = False, in_string: bool = False) -> JSONRepairError:
        return JSONRepairError(what, self.text, self.pos, self.start, hint=hint, incomplete=incomplete,
                               in_string=in_string)

    def at_end(self) -> bool:
        return self.pos >= self.end or self.text[self.pos] == "<"

    def skip(self) -> None:
        """Skip blanks, comments and a literal `\\n` between tokens."""
        text, pos, end = self.text, self.pos, self.end
        while pos < end:
            pos = _skip(_WS, text, pos)
            if pos >= end:
                break
            c = text[pos]
            if c == "/" and text.startswith("//", pos) or c == "#":
                nl = text.find("\n", pos)
                pos = end if nl < 0 else nl + 1
            elif c == "/" and text.startswith("/*", pos):
                close = text.find("*/", pos + 2)
                pos = end if close < 0 else close + 2
            elif c == "\\" and pos + 1 < end and text[pos + 1] in "nrt":
                pos += 2
            else:
                break
        self.pos = pos

    def read(self) -> tuple[Any, int]:
        stack: list[tuple[dict[str, Any] | list[Any], str | None]] = []
        expect_key = False
        while True:
            self.skip()
            if expect_key:
                key = self.key(stack)
                if key is None:  # the object closed
                    value: Any = stack.pop()[0]
                else:
                    stack[-1] = (stack[-1][0], key)
                    expect_key = False
                    continue
            else:
                if self.at_end():
                    raise self.fail("the value is missing", incomplete=True)
                c = self.text[self.pos]
                if c == "{":
                    self.pos += 1
                    stack.append(({}, None))
                    expect_key = True
                    continue
                if c == "[":
                    self.pos += 1
                    stack.append(([], None))
                    self.skip()
                    if not self.at_end() and self.text[self.pos] == "]":
                        self.pos += 1
                        value = stack.pop()[0]
                    else:
                        continue
                else:
                    value = self.scalar()
            # A value is complete: attach it and see what follows, closing containers as they end.
            while True:
                if not stack:
                    return value, self.pos
                container, key = stack[-1]
                if isinstance(container, dict):
                    container[key or ""] = value
                else:
                    container.append(value)
                follow = self.after_value(stack)
                if follow == "next":
                    expect_key = isinstance(container, dict)
                    break
                value = stack.pop()[0]

    def key(self, stack: list[tuple[dict[str, Any] | list[Any], str | None]]) -> str | None:
        """Read `key :` or the object's `}` (an empty object or a trailing comma); None when it closed."""
        if self.at_end():
            if self.autoclose:
                return None
            raise self.fail("the object is not closed", hint="end it with }", incomplete=True)
        c = self.text[self.pos]
        if c == "}":
            self.pos += 1
            return None
        if c in "\"'":
            key = self.string(c)
        else:
            match = _WORD.match(self.text, self.pos)
            if match is None or match.group().startswith("-"):
                raise self.fail(f"expected a key in double quotes, found {c!r}", hint='write keys as "key"')
            key = match.group()
            self.pos = match.end()
        self.skip()
        if self.at_end():
            raise self.fail(f"the value of {key!r} is missing", incomplete=True)
        if self.text[self.pos] != ":":
            raise self.fail(f"expected ':' after the key {key!r}, found {self.text[self.pos]!r}")
        self.pos += 1
        return key

    def after_value(self, stack: list[tuple[dict[str, Any] | list[Any], str | None]]) -> str:
        """After a member: 'next' for a comma, 'close' when the container ends (by its bracket or autoclose)."""
        self.skip()
        is_dict = isinstance(stack[-1][0], dict)
        closer = "}" if is_dict else "]"
        if self.at_end():
            if self.autoclose:
                return "close"
            what = "object" if is_dict else "array"
            raise self.fail(f"the {what} is not closed", hint=f"end it with {closer}", incomplete=True)
        c = self.text[self.pos]
        if c == closer:
            self.pos += 1
            return "close"
        if c == ",":
            self.pos += 1
            self.skip()
            if not self.at_end() and self.text[self.pos] == closer:  # trailing comma
                self.pos += 1
                return "close"
            if not is_dict and (self.at_end() and self.autoclose):
                return "close"
            return "next"
        hint = _UNESCAPED_QUOTE if self.text[self.pos - 1] in "\"'" or c in "\"'" else "separate members with ','"
        raise self.fail(f"expected ',' or '{closer}', found {c!r}", hint=hint)

    def scalar(self) -> Any:
        text, pos = self.text, self.pos
        c = text[pos]
        if c in "\"'":
            return self.string(c)
        match = _NUMBER.match(text, pos)
        if match and not (match.end() < self.end and (text[match.end()].isalnum() or text[match.end()] == "_")):
            self.pos = match.end()
            token = match.group()
            try:
                return float(token) if any(ch in token for ch in ".eE") else int(token)
            except ValueError:
                raise self.fail("the number is too long") from None
        match = _WORD.match(text, pos)
        if match and match.group() in _LITERALS:
            self.pos = match.end()
            return _LITERALS[match.group()]
        shown = match.group() if match else c
        raise self.fail(f"unexpected {shown!r}", hint='put text in double quotes: "text"')

    def string(self, quote: str) -> str:
        """Read a string literal; a single-quoted one ends only at a quote followed by `,` `:` `}` `]` or the end."""
        text = self.text
        opened = self.pos
        body_start = pos = self.pos + 1
        pattern = _DQ_BODY if quote == '"' else _SQ_BODY
        while True:
            pos = _skip(pattern, text, pos)
            if pos >= self.end:
                self.pos = opened
                raise self.fail("a string is never closed", hint=f"end it with {quote}; " + _UNESCAPED_QUOTE,
                                incomplete=True, in_string=True)
            if text[pos] == "\\":  # a lone backslash as the very last character
                pos += 1
                continue
            if quote == '"':
                break
            after = _skip(_WS, text, pos + 1)
            if after >= self.end or text[after] in ",:}]<":
                break
            if after > pos + 1 and text[after] in "'\"":  # `'a' 'b'`: two strings or one? Not ours to guess.
                self.pos = pos + 1
                raise self.fail("two strings follow each other", hint="join them into one string")
            pos += 1  # an apostrophe inside the text (`what's`), not the end of the string
        self.pos = pos + 1
        return decode_string(text[body_start:pos], quote)
