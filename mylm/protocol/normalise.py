"""Read call markup written in another spelling as the markup it means, before parsing once more.

A reply with no call, no correction and no `<final_answer>` is about to become the answer. If it holds markup in
a spelling the scanner does not match, the reply is rewritten to the plain spelling and parsed again, so every
form the parser knows is recognised in every spelling, without a rule per form:

- tags in confusable brackets or fullwidth letters (`＜tool_code＞`, `〈name〉`: common in CJK output);
- a code fence whose info string names a call (```` ```tool_code ````, `tool`, `tool_call`, `function_call`…)
  is the block it names (Gemma documents ```` ```tool_code ```` around `print(default_api.f(x=1))`);
- a line that is nothing but a Python-style call of a registered tool (`list_dir(path=".")`) is a block.

What the rewritten reply means is decided by the same parser: fences and inline code are still examples, a
broken call is still a correction. `neutralise` defuses all of these spellings in tool output, so an echoed
tool output never becomes a call this way.

Tags written HTML-escaped (`&lt;tool_code&gt;`, `&#60;name&#62;`, or half-escaped `&lt;tool_code>`) are *not*
rewritten: escaping `<` is exactly how `neutralise` defuses protocol tags in tool output, so escaped markup in a
reply is a quoted observation (or a copy of one), never the model's own call. It stays text.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Mapping

#: Brackets that read as `<` and `>`: fullwidth, small, CJK angle, mathematical angle, single guillemets.
OPEN_BRACKETS = "＜﹤〈〈⟨‹《"
CLOSE_BRACKETS = "＞﹥〉〉⟩›》"
_LT = r"(?:&lt;|&#0*60;|&#[xX]0*3[cC];)"
_GT = r"(?:&gt;|&#0*62;|&#[xX]0*3[eE];)"
#: A tag in confusable brackets (its name may be in fullwidth letters too).
CONFUSABLE_TAG = re.compile(
    rf"[<{OPEN_BRACKETS}][ \t　]*[/／]?[ \t　]*[A-Za-zＡ-Ｚａ-ｚ_＿][\w\-.:＿＝=|｜]{{0,63}}"
    rf"(?:[ \t　][^<>{OPEN_BRACKETS}{CLOSE_BRACKETS}\n]{{0,200}})?[>{CLOSE_BRACKETS}]")
#: A tag written with entities for its brackets: `&lt;tool_code&gt;`, `&#60;/name&#62;`. The parser reads it as
#: text (see above); `neutralise` still breaks it, as defence in depth for any reader that decodes entities.
ESCAPED_TAG = re.compile(rf"{_LT}\s*/?\s*[A-Za-z_][\w\-.:=|]{{0,63}}"
                         rf"(?:\s(?:[^<>&\n]|&(?:quot|apos|amp|#[0-9]{{1,7}}|#[xX][0-9a-fA-F]{{1,6}});){{0,200}})?/?{_GT}")
#: Info strings of a fence that means "this is a call".
CALL_LABELS = ("tool_code", "tool_call", "tool_calls", "tool", "tools", "function_call", "function_calls",
               "functions", "tool_use", "call", "action")
_LABELLED_FENCE = re.compile(
    r"(?ms)^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<label>" + "|".join(CALL_LABELS)
    + r")[ \t]*\n(?P<body>.*?)^[ \t]{0,3}(?P=fence)[ \t]*$", )
#: A fence labelled as a call, backticks or tildes (two patterns: a literal prefix keeps the search fast).
_ANY_LABEL = tuple(re.compile(re.escape(run) + rf"{run[0]}*[ \t]*(?:" + "|".join(CALL_LABELS) + r")[ \t]*\n")
                   for run in ("```", "~~~"))
_INLINE_OR_FENCE = re.compile(r"(?ms)^[ \t]{0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]{0,3}\1[ \t]*$|\Z)|(`+)[^`\n]+?\2")
_CALL_LINE = re.compile(r"[ \t]{0,3}(?:print\()?(?:[A-Za-z_]\w*\.)?(?P<name>[A-Za-z_]\w{0,127})\(")
_WIDE = re.compile("[\uff01-\uff5e]")  # fullwidth ASCII forms
_MAX = 1_000_000


def normalise_markup(text: str, tools: Mapping[str, object] | None = None) -> str:
    """`text` with call markup in other spellings rewritten to the plain one; `text` itself if there is none."""
    if len(text) > _MAX:
        return text
    out = text
    if any(c in out for c in OPEN_BRACKETS) or _has_wide_letters_in_tags(out):
        out = CONFUSABLE_TAG.sub(lambda m: unicodedata.normalize("NFKC", m.group()), out)
    if any(p.search(out) for p in _ANY_LABEL):  # a cheap look for a labelled fence before the line-anchored rewrite
        out = _LABELLED_FENCE.sub(_fence_as_block, out)
    if tools:
        out = _call_lines(out, tools)
    return out


def _has_wide_letters_in_tags(text: str) -> bool:
    return "<" in text and _WIDE.search(text) is not None


def _fence_as_block(match: re.Match[str]) -> str:
    body = match.group("body").strip("\n")
    if re.search(r"<\s*/?\s*tool_code\s*>", body, re.IGNORECASE):
        return body  # the fence wraps a block of its own
    return f"<tool_code>\n{body}\n</tool_code>"


def _call_lines(text: str, tools: Mapping[str, object]) -> str:
    """Lines that are nothing but a Python-style call of a registered tool, outside code, as blocks."""
    if "(" not in text:
        return text
    code: list[tuple[int, int]] | None = None  # found only once a registered name starts a line (rare)
    parts: list[str] = []
    last = 0
    for start in _names_called(text, tools):
        line = text.rfind("\n", 0, start) + 1
        match = _CALL_LINE.match(text, line)
        if match is None or match.start("name") != start or match.start() < last:
            continue
        if code is None:
            code = [(m.start(), m.end()) for m in _INLINE_OR_FENCE.finditer(text)]
        if any(a <= match.start() < b for a, b in code) or "<tool_code>" in text[max(0, match.start() - 40):
                                                                                match.start()]:
            continue
        end = _call_end(text, match.start())
        if end is None:
            continue
        parts += [text[last : match.start()], "<tool_code>\n", text[match.start() : end].strip(), "\n</tool_code>"]
        last = end
    return text if not parts else "".join(parts) + text[last:]


def _names_called(text: str, tools: Mapping[str, object]) -> list[int]:
    """Where a registered tool's name is followed by `(`, in order (plain `find`: no regex over every line)."""
    found: list[int] = []
    for name in tools:
        needle = name + "("
        i = text.find(needle)
        while i >= 0 and len(found) < 1000:
            if i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"):
                found.append(i)
            i = text.find(needle, i + 1)
    return sorted(found)


def _call_end(text: str, start: int, max_lines: int = 60) -> int | None:
    """Where the call that starts a line at `start` ends (a line end at which it parses), or None."""
    pos = start
    for _ in range(max_lines):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl
        candidate = text[start:end].strip()
        if candidate.endswith(")"):
            try:
                node = ast.parse(candidate, mode="eval").body
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                node = None
            if isinstance(node, ast.Call):
                return end
        if nl < 0:
            return None
        pos = nl + 1
    return None
