"""What the model is told when a turn or a call cannot be used: every such message rendered from a template in
prompts/, so users change them like the rest; a mistake made twice in a row gets a more concrete correction."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..core.types import FinishReason, ToolCall
from ..prompts import PromptLoader, dump_json
from ..protocol.canonical import format_tool_call
from ..protocol.defuse import neutralise

if TYPE_CHECKING:
    from ..protocol.parsed import ParsedTurn
    from .turn import ModelTurn

#: The templates a conversation's corrections may render; checked before a run starts.
TEMPLATES = (
    "format_error.j2", "truncated.j2", "unusable_reply.j2", "repeated_mistake.j2", "invalid_arguments.j2",
    "tool_choice_refused.j2", "repeated_call.j2", "unknown_tool.j2", "degenerate.j2",
)


class ParametersTool(Protocol):
    """What a correction needs of a tool: its name and its parameters' JSON Schema."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


class Corrections:
    """The corrections of one conversation. It remembers the problem it reported last: the same one again means
    the correction did not help, so the next one adds a ready-made block to copy."""

    def __init__(self, prompts: PromptLoader, *, max_tokens: int) -> None:
        self.prompts = prompts
        self.max_tokens = max_tokens
        #: The problem reported last (before any escalation), so a repeat is recognised.
        self.last = ""

    def problem(self, parsed: ParsedTurn) -> str | None:
        """Why a turn can be neither run nor taken as the answer, or None if it can."""
        if parsed.error is not None:
            return parsed.error
        if parsed.tool_calls or (parsed.final_answer or "").strip():
            return None
        return self.prompts.render("unusable_reply.j2", unclosed_reasoning=parsed.unclosed_reasoning)

    def unusable(self, turn: ModelTurn, problem: str) -> str:
        """The user message answering an unusable turn: the token limit cut it, or `problem` (escalated)."""
        if turn.finish is FinishReason.MAX_TOKENS:
            return self.prompts.render("truncated.j2", max_tokens=self.max_tokens)
        return self.prompts.render("format_error.j2", message=neutralise(self.escalated(problem)))

    def degenerate(self, problem: str) -> str:
        """The user message answering a turn cut short because it kept repeating itself (`problem`: what)."""
        return self.prompts.render("degenerate.j2", message=neutralise(problem))

    def tool_required(self, tool: str | None) -> str:
        """The user message answering a turn without a call while tool_choice requires one (`tool`: the one)."""
        return self.prompts.render("tool_required.j2", tool=tool)

    def invalid_arguments(self, tool: ParametersTool, problems: Sequence[str]) -> str:
        """What is wrong with a call's arguments, with the schema (escalated when it is the same again)."""
        schema = dump_json(dict(tool.parameters))
        message = self.prompts.render("invalid_arguments.j2", tool=tool.name, problems=list(problems), schema=schema)
        return self.escalated(message, tool)

    def unknown_tool(self, name: str, tools: Sequence[str]) -> str:
        """That `name` is not a tool, naming the real ones and the likeliest intended (escalated when repeated)."""
        close = difflib.get_close_matches(name, list(tools), n=1, cutoff=0.6)
        suggestion = close[0] if close else None
        message = self.prompts.render("unknown_tool.j2", name=name, tools=list(tools), suggestion=suggestion)
        return self.escalated(message)

    def refused_by_choice(self, tool: str, tool_choice: str) -> str:
        """Why tool_choice (`none`, or one tool's name) does not allow calling `tool`."""
        return self.prompts.render("tool_choice_refused.j2", tool=tool, tool_choice=tool_choice)

    def repeated_call(self, tool: str) -> str:
        """The observation for a call that repeated the previous one and gave the same result."""
        return self.prompts.render("repeated_call.j2", tool=tool)

    def escalated(self, message: str, tool: ParametersTool | None = None) -> str:
        """`message`; or, when it repeats the last problem (whose correction evidently did not help), a different
        one: a ready-made block to copy, with the tool's real argument names."""
        repeated = message == self.last
        self.last = message
        if not repeated:
            return message
        if tool is not None:
            schema = dict(tool.parameters)
            names = list(schema.get("required") or schema.get("properties") or ())
            block = format_tool_call(ToolCall(tool.name, {str(n): "VALUE" for n in names}))
        else:
            block = format_tool_call(ToolCall("TOOL_NAME", {"ARGUMENT": "VALUE"}))
        return self.prompts.render(
            "repeated_mistake.j2", message=message, tool=tool.name if tool is not None else None, block=block
        )
