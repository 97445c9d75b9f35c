"""Make text that is not the model's or the user's (tool output, file names, errors) inert in a prompt."""

from __future__ import annotations

import re
import unicodedata

from .normalise import CALL_LABELS, CONFUSABLE_TAG, ESCAPED_TAG
from .tags import DEFUSER, PROTOCOL_NAMES, PROTOCOL_TAG, REASONING_DIALECTS, SPECIAL_TOKEN

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")


def neutralise(text: str) -> str:
    """Make tool output safe to place inside `<observation>`: it can neither close it, open a tool call, nor
    forge a chat turn.

    Protocol tags are defused (their `<` becomes `&lt;`) and chat-template special tokens broken by a zero-width
    space after their first character (`<|im_start|>` still reads as such, but no tokenizer sees the token), so
    ordinary code keeps its `<` and stays readable. Control characters other than tab and newline become
    visible `\\xNN`; carriage returns become newlines so progress bars and CRLF files read as lines.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = PROTOCOL_TAG.sub(lambda m: "&lt;" + m.group(1), text)
    text = defuse_spellings(text)
    text = defuse_special_tokens(text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_RESULT_TAG = re.compile(r"<(\s*/?\s*(?:observation|tool_response|function_results)\b)", re.IGNORECASE)


def defuse_correction(text: str) -> str:
    """Make a correction's message safe to place inside `<observation>` while it still teaches the protocol: it
    can neither close the observation nor forge a chat turn, but the tags it names (`<tool_code>`, `</name>`)
    stay as written. A correction is mylm's own text quoting the model's; shown escaped (`&lt;tool_code>`), a
    small model learned that form and wrote it back, which never runs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _RESULT_TAG.sub(lambda m: "&lt;" + m.group(1), text)
    text = defuse_special_tokens(text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def defuse_special_tokens(text: str, *, keep: frozenset[str] = frozenset()) -> str:
    """Break every chat-template special token in `text` (visible, but no longer a token), except those in
    `keep`; idempotent."""
    if "<" not in text and "[" not in text and "]" not in text and ">" not in text:
        return text
    if keep:
        return SPECIAL_TOKEN.sub(lambda m: m.group() if m.group() in keep else _defuse(m), text)
    return SPECIAL_TOKEN.sub(_defuse, text)


def _defuse(match: re.Match[str]) -> str:
    token = match.group()
    return token[0] + DEFUSER + token[1:]


def has_special_token(text: str) -> bool:
    """Whether `text` holds an intact chat-template special token."""
    return SPECIAL_TOKEN.search(text) is not None


_NAMES = frozenset(PROTOCOL_NAMES)
_TAG_NAME = re.compile(r"[<>/\s]*([A-Za-z_][\w-]*)")
_MARKERS = re.compile("|".join(re.escape(m) for d in REASONING_DIALECTS for m in (*d.opens, *d.closes)
                               if not m.startswith("<|")), re.IGNORECASE)
_LABEL = re.compile(r"(?m)^([ \t]{0,3}(?:`{3,}|~{3,})[ \t]*)(?=(?:" + "|".join(CALL_LABELS) + r")[ \t]*$)",
                    re.IGNORECASE)


#: A character above U+2000 (the test before `CONFUSABLE_TAG`): one search in C, where testing each character in
#: Python cost ~50 ns a character of every tool output, which is neutralised twice a step.
_ABOVE_U2000 = re.compile("[\u2001-\U0010ffff]")


def defuse_spellings(text: str) -> str:
    """Break the other spellings the parser reads as call markup (see `normalise`), so an echoed tool output
    never becomes a call: protocol tags in confusable brackets or fullwidth letters, or entity-escaped, fences
    labelled as a call, and reasoning markers of every dialect. A zero-width space after the first character
    keeps the text readable; no normalisation brings the tag back."""
    if "&" in text:
        text = ESCAPED_TAG.sub(lambda m: _break_named(m.group(), m.group().index(";") + 1, decoded=True), text)
    if _ABOVE_U2000.search(text):
        text = CONFUSABLE_TAG.sub(lambda m: _break_named(m.group(), 1, decoded=False), text)
    if "`" in text or "~" in text:
        text = _LABEL.sub(lambda m: m.group(1) + DEFUSER, text)
    return _MARKERS.sub(lambda m: m.group()[0] + DEFUSER + m.group()[1:], text)


def _break_named(tag: str, cut: int, *, decoded: bool) -> str:
    plain = tag[cut:] if decoded else unicodedata.normalize("NFKC", tag[1:])
    name = _TAG_NAME.match(plain)
    if name is None or name.group(1).lower() not in _NAMES or DEFUSER in tag:
        return tag
    return tag[:cut] + DEFUSER + tag[cut:]
