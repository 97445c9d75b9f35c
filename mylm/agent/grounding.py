"""Which of several calls of one tool in one reply the conversation asked for.

Small models asked one question often write many calls of the one tool: every unit, every method, every option,
the first call's values swapped about. The rules here keep what the question names, else the model's first
choice. (Calls of several different tools for one question are asked about instead: `fit`.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.types import Message, ToolCall


def heard(messages: Sequence[Message]) -> str:
    """What the conversation's user messages (tool results included) say: where calls' values should come
    from. The functions below compare case-insensitively, except where only case tells values apart."""
    return "\n".join(m.content for m in messages if m.role == "user")


def grounded(calls: tuple[ToolCall, ...], said: str) -> tuple[ToolCall, ...]:
    """Calls of one tool that only reshuffle an earlier call's values are dropped (see `_unmixed`). Several
    calls of one tool that differ in one argument are kept only for the values the conversation (`said`,
    tool results included) names: asked for the circumference of a circle of radius 4 inches,
    Qwen2.5-Coder-1.5B called the tool eight times, once per unit it could think of (in, cm, m, km, ft...), where
    the weather in Paris, London and Tokyo is three calls the question asks for. When it names none, the model
    listed options instead of choosing one (the area under a curve by every `method`, a speed in km/h, m/s, mph
    and knots, prime factors `formatted` true then false): its first choice is kept. The cost of being wrong is a
    round trip (the model sees the first result and can make the next call), not a wrong answer."""
    if calls and not made_up(calls[0], said):
        # A later call with values from nowhere after one from the question: a step the model has no values for
        # yet (a force from mass 1 and acceleration 1 after the two times asked; a biomass from the energy the
        # first call will compute). It can make it once it sees the results. (BFCL: 1 of 424 parallel questions'
        # right calls has this shape, a chained value.)
        calls = (calls[0], *(c for c in calls[1:] if not made_up(c, said)))
    names = list(dict.fromkeys(c.name for c in calls))
    if len(names) > 1:  # each tool's calls by the same rules (Heron's area, then base-height area three ways)
        chosen = {id(c) for name in names for c in grounded(tuple(c for c in calls if c.name == name), said)}
        return tuple(c for c in calls if id(c) in chosen)
    calls = _unmixed(calls)
    keys = set().union(*(c.arguments for c in calls))
    varying = [k for k in keys if len({json.dumps(c.arguments.get(k), sort_keys=True) for c in calls}) > 1]
    if len(varying) != 1:
        return calls
    key = varying[0]
    listed = [c for c in calls if key in c.arguments]  # a call without the argument lists no value of it
    if len(listed) < 2:
        return calls
    scalar = [c for c in listed if isinstance(c.arguments[key], (str, int, float)) and not isinstance(
        c.arguments[key], bool)]
    folded = [str(c.arguments[key]).casefold() for c in scalar]
    # Values that differ only in case (genotypes AA, Aa and aa; units M and m) are told apart by case: asked for
    # the frequency of the AA genotype, the 1.5B called for all three, and casefolded all three looked named.
    named = [c for c, fold in zip(scalar, folded, strict=True) if (
        _named(str(c.arguments[key]), said) if folded.count(fold) > 1 else _named(fold, said.casefold()))]
    kept = named or listed[:1]
    return tuple(c for c in calls if key not in c.arguments or c in kept)


def _unmixed(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """The calls of one tool less those that only reshuffle an earlier call's values over the same arguments:
    asked for the hypotenuse of a triangle with sides 4 and 5, Qwen2.5-Coder-0.5B called `math.hypot` with
    x=4 y=5, x=5 y=4, x=5 y=5 and x=4 y=4; asked for a route from San Francisco to Los Angeles by Santa Barbara
    and Monterey, the 1.5B added routes between those same places. A question that wants several calls gives
    each its own values (the weather in two cities), never the first call's values moved around."""
    kept: list[tuple[ToolCall, set[str]]] = []
    for call in calls:
        values = {json.dumps(v) for v in _leaves(call.arguments)}
        if not any(set(call.arguments) == set(k.arguments) and (values <= seen or _flipped(call, k))
                   for k, seen in kept):
            kept.append((call, values))
    return tuple(call for call, _ in kept)


def _flipped(call: ToolCall, earlier: ToolCall) -> bool:
    """Whether `call` is `earlier` with only boolean options changed: asked for a triangle's dimensions and
    properties, Qwen2.5-Coder-1.5B called `triangle_properties.get` five times with `get_area`, `get_perimeter`
    and `get_angles` all true, all false, then one true at a time. An option flipped asks nothing new of the
    tool; the question that wants both ways ("with and without human impact") is rare (4 of BFCL's 400 parallel
    questions), and costs a round trip, not a wrong answer."""
    differ = [k for k in call.arguments if call.arguments[k] != earlier.arguments.get(k)]
    return bool(differ) and all(isinstance(call.arguments[k], bool) and isinstance(earlier.arguments.get(k), bool)
                                for k in differ)


def _named(value: str, said: str) -> bool:
    """Whether `value` stands in `said` as a word of its own (`in` in "4 inches" counts; `m` in "compute" not)."""
    return re.search(rf"(?<![\w]){re.escape(value)}", said) is not None if value.strip() else False


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", re.IGNORECASE)
_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen twenty").split()
_TENS = {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
         "hundred": 100, "thousand": 1000}
#: A string value longer than this is text the model writes (a command, code, a message), not a value to copy.
_WRITTEN = 24


def mostly_mentioned(call: ToolCall, said: str) -> bool:
    """Whether most of the values `call` passes (more than half) come from the conversation (`said`): each
    string in it, each number among its numbers (`5` and `5.0` alike); booleans are choices, not values to copy.
    A call that adds a constant or a default to the question's values (`medium_permittivity: 8.854e-12` beside
    the question's charges and distance) still answers it; asked a triangle's area (base 10, height 5) with only a
    BMI tool offered, Qwen2.5-Coder-1.5B called it with weight 1.0 and height 1.0, then made-up tools: values
    from nowhere."""
    said = said.casefold()
    numbers = _numbers(said)
    values = [v for v in _leaves(call.arguments) if not isinstance(v, bool) and v is not None]
    return 2 * sum(_from(v, said, numbers) for v in values) > len(values) if values else True


def made_up(call: ToolCall, said: str) -> bool:
    """Whether `call`'s values all come from nowhere: it passes numbers, and not one of its values is in the
    conversation (`said`). The shape of a small model calling the one tool it was given for a
    question that tool does not answer (BFCL irrelevance, Qwen2.5-Coder-1.5B: the latest movies as
    `calculate_velocity(0.0, 0.0, 0.0)`, a flight's duration as `currency_converter("USD", "USD", 1.0)`).
    Text the model writes (a command, a path, code: strings over a few words) is never made up."""
    values = [v for v in _leaves(call.arguments) if not isinstance(v, bool) and v is not None]
    if not any(isinstance(v, (int, float)) for v in values):
        return False
    if any(isinstance(v, str) and len(v) > _WRITTEN for v in values):
        return False
    said = said.casefold()
    numbers = _numbers(said)
    return not any(_from(v, said, numbers) for v in values)


#: A URL's host after its scheme (`https://HOST/...`), or a bare `example.com/...` (a bare `unit.test/` is as likely a
#: directory).
_URL_HOST = re.compile(r"\b[a-z][a-z0-9+.-]*://([\w.-]+)|(?<![\w@./-])((?:[\w-]+\.)*example\.(?:com|net|org))/",
                       re.IGNORECASE)
#: Names reserved for examples and documentation (RFC 2606, RFC 6761): no real resource lives there.
_PLACEHOLDER = re.compile(r"(?:^|\.)(?:example\.(?:com|net|org)|example|test|invalid)$")


def placeholder_host(call: ToolCall, said: str) -> str | None:
    """The reserved example host (`example.com`, `*.test`, ...) a URL among `call`'s values is on, where the
    conversation (`said`) never names it: an address made up, not one the task or a result gave. Asked what
    notes.txt says, Qwen2.5-Coder-1.5B behind Cline called `fetch_web_content` on
    https://example.com/project/notes.txt, twice, then made the code name up from the errors."""
    said = said.casefold()
    for value in _leaves(call.arguments):
        if not isinstance(value, str):
            continue
        for found in _URL_HOST.finditer(value):
            host = (found.group(1) or found.group(2)).casefold().rstrip(".")
            if _PLACEHOLDER.search(host) and host not in said:
                return host
    return None


#: A fenced code block's body (Markdown, ``` or ~~~).
_FENCED = re.compile(r"(?ms)^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)")


def code_call(text: str, tools: Mapping[str, Sequence[str]]) -> ToolCall | None:
    """The first call of one of `tools` (names and their parameters) that `text` writes as code inside a fence,
    with a JSON object (`read_files({"files": [...]})`, its result assigned or not) or keyword arguments that
    are the tool's parameters (`read_files(files=[...])`, the values JSON); None where there is none. Behind
    Cline the 1.5B, asked to write a file, wrote its plan and then its calls as Python in a ```python block:
    "The final response will be the tool calls for the above steps." Nothing ran, and the plan was the answer."""
    for fence in _FENCED.finditer(text):
        body = fence.group(2)
        for name, parameters in tools.items():
            if re.search(rf"\b(?:def|function|fn|func)\s+{re.escape(name)}\b", body):
                continue  # code that defines a function of that name is a program, not a call of the tool
            for found in re.finditer(rf"(?<![\w.]){re.escape(name)}\s*\(", body):
                call = _code_arguments(name, body[found.end():], parameters)
                if call is not None:
                    return call
    return None


def _code_arguments(name: str, rest: str, parameters: Sequence[str]) -> ToolCall | None:
    rest = rest.lstrip()
    if rest.startswith("{"):
        try:
            value, _ = json.JSONDecoder().raw_decode(rest)
        except ValueError:
            return None
        return ToolCall(name, value) if isinstance(value, dict) else None
    arguments: dict[str, Any] = {}
    while (keyword := re.match(r"(\w+)\s*=\s*", rest)) is not None and keyword.group(1) in parameters:
        try:
            value, end = json.JSONDecoder().raw_decode(rest[keyword.end():])
        except ValueError:
            return None
        arguments[keyword.group(1)] = value
        rest = rest[keyword.end() + end:].lstrip().removeprefix(",").lstrip()
    return ToolCall(name, arguments) if arguments and rest.startswith(")") else None


def _from(value: Any, said: str, numbers: set[float]) -> bool:
    if isinstance(value, (int, float)):
        return float(value) in numbers
    return str(value).casefold() in said


def _numbers(said: str) -> set[float]:
    """The numbers `said` names: in digits (with thousands separators, or a thousand, million or billion
    after them) or, up to twenty and in round tens, in words."""
    said = re.sub(r"(?<=\d),(?=\d{3}\b)", "", said)  # 2,000,000
    found = {float(n) for n in _NUMBER.findall(said)}
    for number, scale in re.findall(r"(\d+(?:\.\d+)?)\s*(thousand|million|billion)\b", said):
        found.add(float(number) * {"thousand": 1e3, "million": 1e6, "billion": 1e9}[scale])  # 100 million
    words = set(re.findall(r"[a-z]+", said))
    found.update(float(i) for i, word in enumerate(_WORDS) if word in words)
    found.update(float(n) for word, n in _TENS.items() if word in words)
    return found


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


#: Words before a tool's name that say the model means to call it now ("I'll use the `list_dir` tool"), up to two
#: words between (`I will now use`), and an optional article.
_INTENT = re.compile(
    r"(?:\b(?:i'll|i will|i'm going to|i am going to|let me|let's|let us|i need to|i must|i should|i can|we can|"
    r"we'll|we will|we need to|i would|first,? i|next,? i|now,? i)\s+(?:\w+\s+){0,2}?"
    r"(?:use|call|run|invoke|try|execute))\s+(?:the\s+|a\s+)?(?:`|'|\")?$",
    re.IGNORECASE,
)
#: A refusal in the same sentence ("I can't use X", "I don't need to call X") is not an intent.
_NOT = re.compile(r"\b(?:not|no|cannot|never)\b|n't\b|n’t\b", re.IGNORECASE)


def announced(text: str, names: Iterable[str]) -> str | None:
    """The tool `text` says the model is about to call, or None: a reply with no call that announces one ("To
    answer this question, I'll use the `list_dir` tool to list all files") and goes on to answer without its
    result (Qwen2.5-Coder-0.5B named a file it never listed). Only the model's own words decide it: one of
    `names`, written as a name, right after words of intent in the same sentence and not negated there."""
    for name in sorted(set(names), key=len, reverse=True):
        for found in re.finditer(r"(?<![\w.])" + re.escape(name) + r"(?![\w.])", text):
            before = text[max(0, found.start() - 60):found.start()]
            sentence = re.split(r"[.!?\n]\s", before)[-1]
            if _INTENT.search(sentence) and not _NOT.search(sentence):
                return name
    return None


#: A word of a task that may name a path: letters, digits and `._-/`, with a dot or a slash in it.
_PATHLIKE = re.compile(r"(?<![\w./-])[\w.-]*[./][\w./-]*\w")
#: At most this many such words are looked up in the workspace.
_PATHS_TRIED = 20


#: Words that name the working directory itself ("How many Python files are in this directory?").
_HERE = re.compile(r"\b(?:this|the current|the working|current|working|the present) "
                   r"(?:directory|folder|dir|workspace|project|repo|repository)\b", re.IGNORECASE)


def named_paths(task: str, root: Path) -> list[Path]:
    """The files and directories inside the workspace `root` that `task` names, as written (`secret.txt`,
    `src/app.py`), in the order named, after `root` itself where the task names it ("this directory", "the
    current folder"): the file system says which words are paths, nothing is guessed. A name that leads outside
    `root` (`..`, a symlink out) is not one."""
    base = root.resolve()
    found: list[Path] = [base] if _HERE.search(task) else []
    for word in _PATHLIKE.findall(task)[:_PATHS_TRIED]:
        word = word.rstrip(".")
        if not word or word.startswith("/") or word in (".", ".."):
            continue
        try:
            path = (base / word).resolve()
            inside = path.is_relative_to(base) and path != base and path.exists()  # `.` is named only in words
        except (OSError, ValueError):
            continue
        if inside and path not in found:
            found.append(path)
    return found
