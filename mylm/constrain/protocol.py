"""The protocol grammar: free thought, then a canonical, schema-valid call to a registered tool, or an answer.

Thought text never contains `<`, a backtick or `~`: the only characters with which text before a call could
change how the parser reads the call (a premature `<tool_code`, another call format, `<think>`, an
`<observation>`, a code fence or inline code around the block). The answer is written in `<final_answer>` tags
so a model has to choose, and can never end its turn on a half-written call.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.tags import TOOL_CLOSE, TOOL_OPEN
from .gbnf import Rules, literal
from .jsonschema import SchemaCompiler

FINAL_OPEN = "<final_answer>"
FINAL_CLOSE = "</final_answer>"
#: The text that switches a lazy grammar on (llama-server `grammar_triggers`).
TRIGGER = TOOL_OPEN

#: How long the thought before a call or an answer may be, in characters, by default: long enough for a plan,
#: short enough that a small model that would ramble on is brought to choose a call or an answer.
THOUGHT_CHARS = 400
#: How long an answer may be, in characters, by default (the agent sizes both to its output token limit, so a
#: constrained turn ends by itself instead of being cut off mid-answer).
ANSWER_CHARS = 2000
#: Characters Python's `str.strip` removes: an answer needs one character that is not among them.
_SPACE = "\\t\\n\\r\\x0B\\x0C\\x1C-\\x1F\\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000 "
#: The answer: a visible character first, then text in which a `<` is a comparison (followed by a space or
#: `=`, as in `a < b`, `x <= 3`), so neither `</final_answer>` nor a chat format's end-of-turn marker
#: (`<end_of_turn>`, `<|im_end|>`, which a server cuts as a stop string) can sit inside it, and no made-up tag
#: (`<#15>`) either: a model that keeps reaching for a tag (its end-of-turn marker, which it may not write here)
#: once looped on `<#15>\n<#16>\n…` until its token limit; now the one tag it can write is `</final_answer>`,
#: which ends the answer. `{n}` pieces.
_ANSWER_TEXT = (
    'answer-text ::= [ \\t\\n]{{0,8}} ([^<{space}] | "<" [ \\t=]) '
    '([^<] | "<" [ \\t=]){{0,{n}}}'
)
_PLAIN_ANSWER = "plain-answer ::= [ \\t\\n]{{0,8}} [^<`~{space}] [^<`~]{{0,{n}}}"


@dataclass(frozen=True)
class ToolSpec:
    """What the grammar needs of a tool: its name and its parameters' JSON Schema."""

    name: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ProtocolGrammar:
    """The grammars of one agent (compiled once): a turn, the call part of a turn, and the last answer."""

    #: Thought, then one call (several with `multiple_calls`) or a `<final_answer>`.
    turn: str
    #: The call part alone, from `TRIGGER` on: for servers that apply a grammar once the trigger appears.
    call: str
    #: An answer with no call (the summary request at the iteration limit).
    answer: str


def compile_protocol(
    tools: Iterable[ToolSpec],
    *,
    multiple_calls: bool = False,
    thought_chars: int = THOUGHT_CHARS,
    answer_chars: int = ANSWER_CHARS,
    require_call: bool = False,
) -> ProtocolGrammar:
    """The grammars for these tools; the same tools always give the same text (cached). Properties keep the
    order their schema declares, which is the order the grammar asks for them. With `require_call` (tool_choice
    required, or a tool's name) a turn must call a tool: its grammar has no answer branch."""
    key = tuple((t.name, json.dumps(t.parameters, default=str)) for t in tools)
    return _compile(key, multiple_calls, max(thought_chars, 0), max(answer_chars, 1), require_call)


@functools.lru_cache(maxsize=64)
def _compile(
    key: tuple[tuple[str, str], ...], multiple_calls: bool, thought_chars: int, answer_chars: int,
    require_call: bool = False,
) -> ProtocolGrammar:
    specs = [ToolSpec(name, json.loads(schema)) for name, schema in key]
    lines = (
        f"thought ::= [^<`~]{{0,{thought_chars}}}",
        _ANSWER_TEXT.format(space=_SPACE, n=answer_chars - 1),
    )
    return ProtocolGrammar(
        turn=_grammar(specs, multiple_calls, "turn", lines, require_call),
        call=_grammar(specs, multiple_calls, "call", lines),
        answer=_grammar(
            specs, multiple_calls, "answer", (*lines, _PLAIN_ANSWER.format(space=_SPACE, n=answer_chars - 1))
        ),
    )


def _grammar(
    specs: list[ToolSpec], multiple_calls: bool, form: str, lines: tuple[str, ...], require_call: bool = False
) -> str:
    rules = Rules()
    if form == "answer":
        rules.define("final", f'{literal(FINAL_OPEN)} answer-text {literal(FINAL_CLOSE)}')
        return rules.text("thought final | plain-answer") + "\n".join(lines) + "\n"
    compiler = SchemaCompiler(rules)
    calls = []
    for spec in specs:
        params = compiler.value(spec.parameters, f"{spec.name}-params")
        if params is None:
            continue  # a schema nothing satisfies: the tool cannot be called validly
        name = spec.name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        head = f"{TOOL_OPEN}\n<name>{name}</name>\n<parameters>\n"
        tail = f"\n</parameters>\n{TOOL_CLOSE}"
        calls.append(rules.add(f"call-{spec.name}", f"{literal(head)} {params} {literal(tail)}"))
    call = rules.add("call", " | ".join(calls)) if calls else None
    block = f'{call} ("\\n" {call})*' if call and multiple_calls else call
    if form == "call":
        return rules.text(block or '""')
    extra = [f"final ::= {literal(FINAL_OPEN)} answer-text {literal(FINAL_CLOSE)}", *lines]
    if block and require_call:
        root = f"thought {block}"
    else:
        root = f"thought ({block} | final)" if block else "thought final"
    return rules.text(root) + "\n".join(extra) + "\n"
