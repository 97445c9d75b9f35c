"""`mylm.core.jsontext`: each shared encoder writes exactly what `json.dumps` with its options writes, and
raises what it raises."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mylm.core.jsontext import sorted_json, text_json

_KEYS = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.booleans(), st.none(), st.floats(allow_nan=True))
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8),
              st.just(date(2024, 1, 2)), st.just(b"raw"), st.just({1, 2})),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


def _outcome(encode: Any, value: Any) -> tuple[str, str]:
    try:
        return "text", encode(value)
    except (TypeError, ValueError) as error:
        return type(error).__name__, str(error)


@given(_VALUES)
def test_the_shared_encoders_write_what_json_dumps_writes(value: Any) -> None:
    assert _outcome(text_json, value) == _outcome(lambda v: json.dumps(v, ensure_ascii=False), value)
    assert _outcome(sorted_json, value) == _outcome(
        lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False, default=str), value)
