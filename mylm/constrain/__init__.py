"""Constrained decoding: grammars compiled from the tool registry, so a server samples only valid protocol."""

from __future__ import annotations

from .protocol import FINAL_CLOSE, FINAL_OPEN, TRIGGER, ProtocolGrammar, ToolSpec, compile_protocol

__all__ = ["FINAL_CLOSE", "FINAL_OPEN", "TRIGGER", "ProtocolGrammar", "ToolSpec", "compile_protocol"]
