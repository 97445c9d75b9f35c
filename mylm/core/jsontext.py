"""`json.dumps` with options, its encoder made once.

`json.dumps(value, ensure_ascii=False)` builds a new `JSONEncoder` at every call (about 1 µs, as long as encoding
a call's short arguments takes), and each step of a run encodes its call's arguments several times (the call's
key, the repeat check, history's canonical form, the printer). `JSONEncoder.encode` is what `json.dumps` runs
with those options, and an encoder keeps no state between calls (each call makes its own), so one is shared.
"""

from __future__ import annotations

import json
from typing import Any

_TEXT = json.JSONEncoder(ensure_ascii=False)
_SORTED = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)


def text_json(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)`."""
    return _TEXT.encode(value)


def sorted_json(value: Any) -> str:
    """`json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)`: a value's key, key order ignored."""
    return _SORTED.encode(value)
