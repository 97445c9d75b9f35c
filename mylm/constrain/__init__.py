"""Constrained decoding: grammars compiled from the tool registry, so a server samples only valid protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .select import CONSTRAIN_MODES, TOOL_CHOICES, ConstrainMode, Constraint, select_constraints

# The grammar compiler loads on first use: `Constraint` and `select_constraints` are needed by every agent (and
# `mylm.llm`), the compiler only by an agent that constrains.
_LAZY = ("FINAL_CLOSE", "FINAL_OPEN", "TRIGGER", "ProtocolGrammar", "ToolSpec", "compile_protocol")

__all__ = [
    "CONSTRAIN_MODES", "FINAL_CLOSE", "FINAL_OPEN", "TOOL_CHOICES", "TRIGGER", "ConstrainMode", "Constraint",
    "ProtocolGrammar", "ToolSpec", "compile_protocol", "select_constraints",
]

if TYPE_CHECKING:
    from .protocol import FINAL_CLOSE, FINAL_OPEN, TRIGGER, ProtocolGrammar, ToolSpec, compile_protocol


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
