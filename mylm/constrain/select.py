"""Which grammars a model turn samples under: the `Constraint` a request carries, chosen from the tools, the mode
and the tool choice (the grammars themselves are compiled by `constrain.protocol`, only when needed)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

#: `auto`: constrain where the endpoint can; `grammar`: insist (an error where it cannot); `off`: never.
ConstrainMode = Literal["auto", "grammar", "off"]
CONSTRAIN_MODES: tuple[ConstrainMode, ...] = ("auto", "grammar", "off")
#: The tool choices that are not a tool's name.
TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class Constraint:
    """A GBNF grammar the completion must follow, for endpoints that can sample under one."""

    grammar: str
    #: The same protocol from `trigger` on only, for servers that leave the text before the trigger free.
    lazy_grammar: str | None = None
    trigger: str | None = None
    #: The user insisted (`--constrain grammar`): an endpoint that cannot enforce it is an error, and a lazy
    #: form is not enough.
    required: bool = False


class SchemaTool(Protocol):
    """What grammar selection needs of a tool: its name and its parameters' JSON Schema."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


def thought_cap(max_tokens: int) -> int:
    """How many characters of prose the turn grammar allows before a call or an answer, for `max_tokens`."""
    from .protocol import THOUGHT_CHARS

    return min(THOUGHT_CHARS, max_tokens // 2)


def select_constraints(
    tools: Iterable[SchemaTool],
    *,
    mode: ConstrainMode,
    multiple_calls: bool,
    max_tokens: int,
    tool_choice: str = "auto",
    always: Collection[str] = (),
    dialect: str = "mylm",
    other_tools: bool = True,
) -> tuple[Constraint | None, Constraint | None]:
    """The (turn, summary) constraints for `mode` (`auto`: where the endpoint can; `grammar`: insist), with
    `tool_choice` mapped onto the grammar: `none` offers no call, a tool's name only that tool (and the tools
    named in `always`, callable whatever the choice), `required` and a name leave no answer branch; without
    `other_tools`, a call can name only the tools given.

    Calls are written in the tool `dialect` (`mylm` or `hermes`, see `protocol.dialects`).

    Thought and answer are sized to the output token limit (a token is rarely under two characters), so a
    model under the grammar closes its answer itself rather than being cut off mid-turn."""
    if mode == "off":
        return None, None
    if mode not in ("auto", "grammar"):
        raise ValueError(f"constrain must be auto, grammar or off, not {mode!r}")
    from .protocol import ANSWER_CHARS, ToolSpec, compile_protocol

    named = tool_choice not in TOOL_CHOICES
    offered = [t for t in tools if not named or t.name == tool_choice or t.name in always]
    grammar = compile_protocol(
        [] if tool_choice == "none" else [ToolSpec(t.name, t.parameters) for t in offered],
        multiple_calls=multiple_calls,
        thought_chars=thought_cap(max_tokens),
        answer_chars=min(ANSWER_CHARS, max_tokens),
        require_call=tool_choice not in ("auto", "none"),
        dialect=dialect,
        other_tools=other_tools,
    )
    required = mode == "grammar"
    return (
        Constraint(grammar.turn, grammar.call, grammar.trigger, required),
        Constraint(grammar.answer, required=required),
    )
