"""XML-ish reading for tool blocks: CDATA, entities (decoded only when the text is consistently escaped), children.

Nothing here is an XML parser: every function is a linear `str.find`/regex scan. No DTD is ever read and no
entity beyond the five predefined ones and numeric character references is ever expanded, so XXE, entity bombs
and entity smuggling (`<!ENTITY c "rm -rf ~">…&c;`) have nothing to act on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CDATA_OPEN = "<![CDATA["
CDATA_CLOSE = "]]>"

_PREDEFINED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}
_ENTITY = re.compile(r"&(?:(lt|gt|amp|quot|apos)|#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6}));")
#: A DTD that declares something: an entity, an internal subset, or an external identifier.
_DTD = re.compile(r"<!ENTITY|<!DOCTYPE(?![ \t\r\n]*[A-Za-z][\w.:-]*[ \t\r\n]*>)", re.IGNORECASE)
_IDENT = r"[A-Za-z_][\w.:-]{0,127}"
#: A child element opener: `<key>`, `<parameter=key>` (Qwen) or `<parameter name="key">` (Claude), or `<key/>`.
_CHILD_OPEN = re.compile(
    rf"<(?:(?P<eq>{_IDENT})=(?P<eqkey>[^>\s]{{1,128}})|(?P<tag>{_IDENT})"
    rf"(?:\s+name\s*=\s*(?P<q>[\"'])(?P<attr>[^\"'<>]{{1,128}})(?P=q))?)\s*(?P<self>/)?>"
)


def _char_ok(code: int) -> bool:
    """XML 1.0 `Char`: what a character reference may denote."""
    return code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF


def _entity_value(match: re.Match[str]) -> str | None:
    name, dec, hexa = match.groups()
    if name:
        return _PREDEFINED[name]
    code = int(dec) if dec else int(hexa, 16)
    return chr(code) if _char_ok(code) else None


def decode_entities(text: str) -> str:
    """Decode `text` if it reads as escaped XML text: no raw `<`, and every `&` starts a known entity.

    A model that escaped consistently (`ls &amp;&amp; pwd`) meant the decoded text. Anything else, such as
    HTML with literal tags, a bare `&`, or an undeclared `&c;`, is content and is returned as written.
    """
    if "&" not in text or "<" in text:
        return text
    matches = list(_ENTITY.finditer(text))
    if len(matches) != text.count("&"):
        return text
    parts: list[str] = []
    last = 0
    for match in matches:
        value = _entity_value(match)
        if value is None:
            return text
        parts.append(text[last : match.start()])
        parts.append(value)
        last = match.end()
    parts.append(text[last:])
    return "".join(parts)


def cdata_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each CDATA section in `text[start:end]`, markers included; an unclosed one runs to `end`."""
    stop = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    pos = start
    while True:
        i = text.find(CDATA_OPEN, pos, stop)
        if i < 0:
            return spans
        j = text.find(CDATA_CLOSE, i + len(CDATA_OPEN), stop)
        close = stop if j < 0 else j + len(CDATA_CLOSE)
        spans.append((i, close))
        pos = close


def text_value(raw: str) -> str:
    """The value of an element's content: CDATA unwrapped and entities decoded when it is XML text, else verbatim.

    Content with a raw `<` outside CDATA is markup the model means literally (HTML, XML, code), so it is kept
    exactly as written, CDATA markers included.
    """
    spans = cdata_spans(raw)
    if not spans:
        return decode_entities(raw)
    outside: list[str] = []
    last = 0
    for i, j in spans:
        outside.append(raw[last:i])
        last = j
    outside.append(raw[last:])
    unclosed = spans[-1][1] == len(raw) and not raw.endswith(CDATA_CLOSE)
    if unclosed or any("<" in piece for piece in outside):
        return raw
    parts: list[str] = []
    last = 0
    for i, j in spans:
        parts.append(decode_entities(raw[last:i]))
        parts.append(raw[i + len(CDATA_OPEN) : j - len(CDATA_CLOSE)])
        last = j
    parts.append(decode_entities(raw[last:]))
    return "".join(parts)


def trim_value(value: str) -> str:
    """Trim the layout around a value: single-line values lose surrounding blanks, others one newline each end."""
    if "\n" not in value.strip():
        return value.strip()
    if value.startswith("\r\n"):
        value = value[2:]
    elif value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
        value = value.removesuffix("\r")
    return value


def find_outside_cdata(text: str, needle: str, start: int, end: int | None = None) -> int:
    """Index of the first `needle` (exact case) at or after `start` that is not inside a CDATA section, or -1."""
    stop = len(text) if end is None else end
    pos = start
    while True:
        i = text.find(needle, pos, stop)
        if i < 0:
            return -1
        c = text.find(CDATA_OPEN, pos, i)
        if c < 0:
            return i
        j = text.find(CDATA_CLOSE, c + len(CDATA_OPEN), stop)
        if j < 0:
            return -1
        pos = j + len(CDATA_CLOSE)


def dtd_positions(text: str) -> list[int]:
    """Where `text` declares an entity or a DTD with content (`<!ENTITY`, `<!DOCTYPE x [` / SYSTEM / PUBLIC)."""
    if "<!" not in text:
        return []
    return [m.start() for m in _DTD.finditer(text)]


@dataclass(frozen=True)
class Child:
    """One argument written as an XML element."""

    key: str
    value: str


@dataclass(frozen=True)
class Children:
    """The arguments read from XML children, where reading stopped, and whether the last one was left open."""

    items: tuple[Child, ...]
    end: int
    unclosed: bool = False
    #: Non-blank text that is neither a child element nor a closing tag, if any (the block is then malformed).
    stray: str = ""


def read_children(text: str, start: int = 0) -> Children:
    """Read `<key>value</key>` elements (or `<parameter=key>` / `<parameter name="key">`) from `text[start:]`.

    Reading stops at the first closing tag that belongs to an outer element, or at the end. A value ends at its
    closing tag outside CDATA; a `</parameter>` that is followed by more text is content (a file about the
    protocol). For the `<parameter …>` forms, models also close a value with `</key>`, with a mangled
    `</parameter…`, or not at all; such a value ends where the next parameter or the function ends.
    """
    items: list[Child] = []
    pos = start
    n = len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n or text.startswith("</", pos):
            return Children(tuple(items), pos)
        match = _CHILD_OPEN.match(text, pos)
        if match is None:
            lt = text.find("<", pos)
            stop = n if lt < 0 else lt
            if lt == pos:
                stop = text.find(">", pos) + 1 or n
            return Children(tuple(items), pos, stray=text[pos:stop].strip()[:80])
        tag = match.group("eq") or match.group("tag")
        key = match.group("eqkey") or match.group("attr") or tag
        if match.group("self"):
            items.append(Child(key, ""))
            pos = match.end()
            continue
        value_start = match.end()
        end, after = _value_bounds(text, match, tag, key, value_start)
        items.append(Child(key, text[value_start:end]))
        if after < 0:
            return Children(tuple(items), n, unclosed=True)
        pos = after


def _value_bounds(text: str, opener: re.Match[str], tag: str, key: str, start: int) -> tuple[int, int]:
    """(end of the value, where reading resumes), or resume -1 when the value runs to the end unclosed."""
    closer = f"</{tag}>"
    exact = value_end(text, closer, start)
    if not (opener.group("eq") or opener.group("attr")):
        return (exact, exact + len(closer)) if exact >= 0 else (len(text), -1)
    sibling = _next_sibling(text, opener, start)
    if exact >= 0 and (exact < sibling or exact < _next_sibling(text, opener, start, openers_only=True)):
        # Closed before the next parameter opens: a `</function>` or `</tool_call>` before it was content.
        return exact, exact + len(closer)
    if opener.group("attr"):
        named = value_end(text, f"</{key}>", start)  # `<parameter name="content">…</content>`
        if 0 <= named < sibling:
            return named, named + len(key) + 3
    mangled = _MANGLED_PARAMETER.search(text, start, sibling)
    if mangled is not None:
        return mangled.start(), mangled.end()
    return sibling, (sibling if sibling < len(text) else -1)


_MANGLED_PARAMETER = re.compile(r"</parameter[^<>]{0,24}>?")


def value_end(text: str, closer: str, start: int) -> int:
    """The closing tag that ends a value: the first one followed by another tag or the end, else the first, else -1."""
    first = -1
    pos = start
    while True:
        i = find_outside_cdata(text, closer, pos)
        if i < 0:
            return first
        if first < 0:
            first = i
        after = i + len(closer)
        while after < len(text) and text[after].isspace():
            after += 1
        if after >= len(text) or text.startswith("<", after):
            return i
        pos = after


def _next_sibling(text: str, opener: re.Match[str], start: int, *, openers_only: bool = False) -> int:
    """Where an unclosed value ends: the next opener of the same form (`<parameter=`…), its function's end, or
    the end (`openers_only`: the next opener, or the end)."""
    if opener.group("eq"):
        needles: tuple[str, ...] = (f"<{opener.group('eq')}=", "</function>", "</tool_call>")
    else:
        needles = (f"<{opener.group('tag')} ", "</invoke>", "</function_calls>")
    if openers_only:
        needles = needles[:1]
    found = [i for i in (find_outside_cdata(text, needle, start) for needle in needles) if i >= 0]
    return min(found, default=len(text))
