"""The protocol grammar: free thought, then a canonical, schema-valid call to a registered tool, or an answer.

Thought text never contains `<`, a backtick or `~`: the only characters with which text before a call could
change how the parser reads the call (a premature `<tool_code`, another call format, `<think>`, an
`<observation>`, a code fence or inline code around the block). A turn can never end on a half-written call.

What the grammar must never do is force a model somewhere it did not mean to go; each rule below was found by a
real small model (Qwen2.5-Coder 0.5B and 1.5B) under greedy decoding:
- **A bare answer ends the turn.** The prose may be the whole turn (the model stops after it): a grammar that
  required a call or `<final_answer>` after it left a model that had answered `2000` no way to stop, and it
  wrote `2000000000…` to the thought cap, then into the answer, until the token limit. The prose keeps its cap
  (`THOUGHT_CHARS`): a longer answer goes in `<final_answer>`, and a model working a question out by hand is
  brought to choose a call.
- **No tool is forced.** In `auto`, a call may name a tool that is not offered (any name but theirs, arguments any
  JSON object): a model that wants `calculate_triangle_area` among tools that cannot do it is no longer steered
  into the nearest real name (`determine_body_mass_index`); the unknown-tool correction then tells it to answer.
- **Calls are bounded.** Several calls per turn are at most `max_calls` (the loop also ends a turn at a call that
  repeats one before it): `call ("\n" call)*` let a model repeat one call until `max_tokens`.

The call is written in the agent's tool dialect (`protocol.dialects`): mylm's `<tool_code>` block, or the
`<tool_call>\n{"name": …, "arguments": …}\n</tool_call>` the Qwen2.5/Hermes chat templates teach; the rules above
hold for both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.tags import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_CLOSE, TOOL_OPEN
from .gbnf import Rules, literal
from .jsonschema import SchemaCompiler

FINAL_OPEN = "<final_answer>"
FINAL_CLOSE = "</final_answer>"
#: The text that switches a lazy grammar on (llama-server `grammar_triggers`), in mylm's dialect.
TRIGGER = TOOL_OPEN
#: The same for each tool dialect: where its call begins.
TRIGGERS = {"mylm": TOOL_OPEN, "hermes": TOOL_CALL_OPEN}

#: How long the thought before a call or an answer may be, in characters, by default: long enough for a plan,
#: short enough that a small model that would ramble on is brought to choose a call or an answer.
THOUGHT_CHARS = 400
#: How long an answer may be, in characters, by default (the agent sizes both to its output token limit, so a
#: constrained turn ends by itself instead of being cut off mid-answer).
ANSWER_CHARS = 2000
#: How many calls one turn may make when several are allowed, by default.
MAX_CALLS = 8
#: Characters of a tool name the model may make up (a call to a tool that is not offered).
_NAME_CHARS = "A-Za-z0-9_.-"
#: Characters Python's `str.strip` removes: an answer needs one character that is not among them.
_SPACE = "\\t\\n\\r\\x0B\\x0C\\x1C-\\x1F\\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000 "
#: The answer: a visible character first, then text in which a `<` is a comparison (followed by a space or
#: `=`, as in `a < b`, `x <= 3`), so neither `</final_answer>` nor a chat format's end-of-turn marker
#: (`<end_of_turn>`, `<|im_end|>`, which a server cuts as a stop string) can sit inside it, and no made-up tag
#: (`<#15>`) either: a model that keeps reaching for a tag (its end-of-turn marker, which it may not write here)
#: once looped on `<#15>\n<#16>\n…` until its token limit; now the one tag it can write is `</final_answer>`,
#: which ends the answer. Nor `< /tag` (a space, then a slash): Qwen2.5-Coder 1.5B closed its answer with
#: `< /final_answer> < /tool_code` when the exact tag was what it meant. `{n}` pieces.
_ANSWER_TEXT = (
    'answer-text ::= [ \\t\\n]{{0,8}} ([^<{space}] | "<=" | "<" [ \\t] [^/<]) '
    '([^<] | "<=" | "<" [ \\t] [^/<]){{0,{n}}}'
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
    #: Where a call begins (the lazy `call` grammar's trigger), in the grammar's dialect.
    trigger: str = TRIGGER


def compile_protocol(
    tools: Iterable[ToolSpec],
    *,
    multiple_calls: bool = False,
    thought_chars: int = THOUGHT_CHARS,
    answer_chars: int = ANSWER_CHARS,
    require_call: bool = False,
    max_calls: int = MAX_CALLS,
    dialect: str = "mylm",
    other_tools: bool = True,
) -> ProtocolGrammar:
    """The grammars for these tools; the same tools always give the same text (cached). Properties keep the
    order their schema declares, which is the order the grammar asks for them. With `require_call` (tool_choice
    required, or a tool's name) a turn must call a tool: its grammar has no answer branch; otherwise the prose
    (at most `thought_chars`) may be the whole turn, a bare answer, and a call may name a tool not offered unless
    `other_tools` is false (the model has been told such a tool is not there). Calls are written in `dialect`
    (`mylm` or `hermes`)."""
    if dialect not in TRIGGERS:
        raise ValueError(f"no grammar for the tool dialect {dialect!r}")
    key = tuple((t.name, json.dumps(t.parameters, default=str)) for t in tools)
    return _compile(key, multiple_calls, max(thought_chars, 0), max(answer_chars, 1), require_call, max(max_calls, 1),
                    dialect, other_tools)


@functools.lru_cache(maxsize=64)
def _compile(
    key: tuple[tuple[str, str], ...], multiple_calls: bool, thought_chars: int, answer_chars: int,
    require_call: bool = False, max_calls: int = MAX_CALLS, dialect: str = "mylm", other_tools: bool = True,
) -> ProtocolGrammar:
    specs = [ToolSpec(name, json.loads(schema)) for name, schema in key]
    # One cap for the prose, whether a call follows or it is the whole (bare) answer: past it the model must
    # choose a call, a tagged answer or the end. At 2000 characters Qwen2.5-Coder 1.5B worked BFCL's questions
    # out by hand instead of calling the tool (4 of 30 simple_python items); at 400 it is brought to choose.
    prose = thought_chars
    shape = _SHAPES[dialect]
    thought = f"thought ::= [^<`~]{{0,{prose}}}"
    if shape.own_line and prose > 0:
        # Qwen2.5-Coder 0.5B leaves `<tool_call>` out, with or without a grammar: prompted by its own template's
        # words it wrote the JSON alone, which as a bare answer the parser refuses (untagged JSON may be quoted
        # data). Neither the prose nor a bare answer may open with JSON (nor with a space: the template writes a
        # newline after the tag), so a reply that starts with it is the call (`tag`).
        thought = f"thought ::= ([^<`~{{[{_SPACE}] [^<`~]{{0,{prose - 1}}})?"
    lines = (thought, _ANSWER_TEXT.format(space=_SPACE, n=answer_chars - 1))
    calls = max_calls if multiple_calls else 1
    return ProtocolGrammar(
        turn=_grammar(specs, calls, "turn", lines, require_call, prose, shape, other_tools),
        call=_grammar(specs, calls, "call", lines, require_call, shape=shape, other_tools=other_tools),
        answer=_grammar(
            specs, calls, "answer", (*lines, _PLAIN_ANSWER.format(space=_SPACE, n=answer_chars - 1))
        ),
        trigger=TRIGGERS[dialect],
    )


@dataclass(frozen=True)
class _Shape:
    """How a dialect writes one call around its arguments: `open`, the name (escaped by `name`), `between`, the
    arguments, `close`."""

    open: str
    between: str
    close: str
    #: The name as it appears between `open` and `between` (escaped for the dialect's syntax).
    name: Callable[[str], str]
    #: The call starts a line: prose before it ends with a newline. The parser reads a `<tool_call>` after an
    #: indented line's text (`\ta<tool_call>`) as part of a code block, and the Qwen2.5 template itself writes
    #: the text, a newline, then the call.
    own_line: bool = False
    #: Written before `open`, and left out where the reply starts with the call: Qwen2.5-Coder 0.5B writes a
    #: call's JSON without its `<tool_call>` (a token of its own, which the grammar allows: the model does not
    #: choose it), and the grammar closes it as the call it is (`{…}\n</tool_call>`, which the parser reads)
    #: instead of letting it become a bare answer the parser refuses.
    tag: str = ""

    def head(self, name: str) -> str:
        return f"{self.open}{self.name(name)}{self.between}"


_SHAPES = {
    "mylm": _Shape(f"{TOOL_OPEN}\n<name>", "</name>\n<parameters>\n", f"\n</parameters>\n{TOOL_CLOSE}",
                   lambda n: _escaped(n)),  # a lambda: _escaped is defined below
    # As the Qwen2.5 template writes an assistant's call: the JSON object on one line between the tags.
    "hermes": _Shape('{"name": "', '", "arguments": ', f"}}\n{TOOL_CALL_CLOSE}",
                     lambda n: json.dumps(n, ensure_ascii=False)[1:-1], own_line=True, tag=f"{TOOL_CALL_OPEN}\n"),
}


def _grammar(
    specs: list[ToolSpec], max_calls: int, form: str, lines: tuple[str, ...], require_call: bool = False,
    prose: int = THOUGHT_CHARS, shape: _Shape | None = None, other_tools: bool = True,
) -> str:
    shape = shape or _SHAPES["mylm"]
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
        calls.append(rules.add(f"call-{spec.name}",
                               f"{literal(shape.head(spec.name))} {params} {literal(shape.close)}"))
    if calls and not require_call and other_tools:
        # Any other name, with any object of arguments: the model says what it wanted, and is corrected. (A
        # name with a character no made-up name has cannot be one, so it need not be excluded.)
        other = _other_name(rules, [n for s in specs if set(n := shape.name(s.name)) <= set(_NAME_ALPHABET)])
        anything = compiler.value({"type": "object"}, "other-params")
        calls.append(rules.add(
            "call-other", f"{literal(shape.open)} {other} {literal(shape.between)} {anything} {literal(shape.close)}"
        ))
    body = call = None
    if calls and shape.tag:
        body = rules.add("call-body", " | ".join(calls))
        call = rules.add("call", f"{literal(shape.tag)} {body}")
    elif calls:
        call = rules.add("call", " | ".join(calls))
    more = f' ("\\n" {call}){{0,{max_calls - 1}}}' if call and max_calls > 1 else ""
    block = f"{call}{more}" if call else None
    # The reply may start with the call's body, its tag left out (see `_Shape.tag`); then it makes that one call
    # (the parser reads a call after `{…}\n</tool_call>` but drops the untagged one before it).
    bare = f" | {body}" if body else ""
    if form == "call":
        return rules.text(block or '""')
    extra = [f"final ::= {literal(FINAL_OPEN)} answer-text {literal(FINAL_CLOSE)}", *lines]
    lead = "thought"
    plain = _PLAIN_ANSWER
    if shape.own_line:
        extra.append('line-thought ::= (thought "\\n")?')
        lead = "line-thought"
        plain = _PLAIN_ANSWER.replace("[^<`~{space}]", "[^<`~{{[{space}]")
    if block and require_call:
        root = f"{lead} {block}{bare}"
    else:
        # Prose alone is a complete turn, the model may stop after it (a bare answer), once it has written
        # something visible: while it has not decided, both branches are alive.
        extra.append(plain.format(space=_SPACE, n=max(prose, 1) - 1))
        if not block:
            root = "thought final | plain-answer"
        elif lead == "thought":
            root = f"thought ({block} | final) | plain-answer"
        else:
            root = f"{lead} {block}{bare} | thought final | plain-answer"
    return rules.text(root) + "\n".join(extra) + "\n"



def _escaped(name: str) -> str:
    return name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _other_name(rules: Rules, names: list[str]) -> str:
    """A rule for every tool name of `_NAME_CHARS` except `names`: a trie of the names in which each node may
    leave the trie by a character none of its children has (then anything), or end where no name ends."""
    trie: dict[str, Any] = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault(char, {})
        node[""] = {}  # a name ends here
    tail = rules.add("other-tail", f"[{_NAME_CHARS}]{{0,63}}")
    return _trie_rule(rules, trie, "other-name", tail, root=True)


def _trie_rule(rules: Rules, node: dict[str, Any], hint: str, tail: str, *, root: bool = False) -> str:
    children = sorted(c for c in node if c)
    options = []
    others = [c for c in _NAME_ALPHABET if c not in children]
    if others:  # leave the trie: a name character none of the children is, then anything
        options.append(f"[{''.join(_class_char(c) for c in others)}] {tail}")
    for i, char in enumerate(children):
        options.append(f"{literal(char)} {_trie_rule(rules, node[char], f'{hint}-{i}', tail)}")
    if not root and "" not in node:
        options.append('""')  # a proper prefix of a name is another name
    return rules.add(hint, " | ".join(options))


#: The characters `_NAME_CHARS` spells.
_NAME_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"


def _class_char(char: str) -> str:
    """`char` inside a GBNF character class."""
    return "\\" + char if char in "-]\\^" else char
