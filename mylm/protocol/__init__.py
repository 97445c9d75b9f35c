"""The text protocol: its tags, the tolerant parser, the canonical form, corrections and stop strings.

The parser is public (the proxy and users' own loops use it without the agent): `StreamParser` for a stream,
`parse_completion` for whole text, both giving a `ParsedTurn`; the reasoning table says which dialects of
reasoning they know. Names are imported on first use, so importing one protocol module stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CallParsed": "mylm.protocol.parsed",
    "ParsedTurn": "mylm.protocol.parsed",
    "StreamParser": "mylm.protocol.parser",
    "parse_completion": "mylm.protocol.parser",
    "format_tool_call": "mylm.protocol.canonical",
    "neutralise": "mylm.protocol.defuse",
    "REASONING_DIALECTS": "mylm.protocol.tags",
    "ReasoningDialect": "mylm.protocol.tags",
    "with_markers": "mylm.protocol.tags",
}

__all__ = [
    "REASONING_DIALECTS",
    "CallParsed",
    "ParsedTurn",
    "ReasoningDialect",
    "StreamParser",
    "format_tool_call",
    "neutralise",
    "parse_completion",
    "with_markers",
]

if TYPE_CHECKING:
    from .canonical import format_tool_call
    from .defuse import neutralise
    from .parsed import CallParsed, ParsedTurn
    from .parser import StreamParser, parse_completion
    from .tags import REASONING_DIALECTS, ReasoningDialect, with_markers


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
