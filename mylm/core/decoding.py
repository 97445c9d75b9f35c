"""Foreign text made clean: bytes that are not UTF-8 (or lone surrogates standing for them) become U+FFFD."""

from __future__ import annotations

import re

#: Python hands undecodable bytes from argv, the environment and file names over as lone surrogates
#: (surrogateescape); no encoder for a request body or a terminal accepts them.
_SURROGATES = re.compile(r"[\ud800-\udfff]")


def clean_text(text: str) -> tuple[str, bool]:
    """`text` with every lone surrogate replaced, and whether anything was: bytes smuggled in by
    surrogateescape are decoded again as UTF-8 with replacement, so valid parts around them survive."""
    if not _SURROGATES.search(text):
        return text, False
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte (e.g. from a JSON "\ud800")
        return _SURROGATES.sub("\ufffd", text), True
    return _SURROGATES.sub("\ufffd", data.decode("utf-8", "replace")), True


def decode_bytes(data: bytes) -> tuple[str, bool]:
    """`data` decoded as UTF-8 with replacement, and whether anything had to be replaced."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True
