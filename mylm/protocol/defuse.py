"""Make text that is not the model's or the user's (tool output, file names, errors) inert in a prompt."""

from __future__ import annotations

import re

from .tags import DEFUSER, PROTOCOL_TAG, SPECIAL_TOKEN

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
    text = defuse_special_tokens(text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def defuse_special_tokens(text: str) -> str:
    """Break every chat-template special token in `text` (visible, but no longer a token); idempotent."""
    if "<" not in text and "[" not in text:
        return text
    return SPECIAL_TOKEN.sub(_defuse, text)


def _defuse(match: re.Match[str]) -> str:
    token = match.group()
    return token[0] + DEFUSER + token[1:]


def has_special_token(text: str) -> bool:
    """Whether `text` holds an intact chat-template special token."""
    return SPECIAL_TOKEN.search(text) is not None
