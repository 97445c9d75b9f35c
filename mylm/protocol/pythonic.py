"""Calls written Python-style: `read_file(path="a.txt")`, a list `[read_file(path="a"), list_dir()]`, Gemma's
`print(default_api.list_dir(path="."))`. Keyword arguments with literal values only: the text is parsed, never
evaluated.
"""

from __future__ import annotations

import ast
from typing import Any

from ..core.types import ToolCall
from .corrections import EXAMPLE, BlockError, example
from .tags import KIND_TAGS


def python_call(src: str, kind: str) -> ToolCall:
    """The body of a `kind` block written `read_file(path="a.txt")`: keyword arguments with literal values only;
    nothing is evaluated. The name is as written (the caller cleans it)."""
    try:
        node = ast.parse(src.strip().rstrip(";").strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        node = None
    if isinstance(node, ast.Call) and _dotted(node.func) == "print" and len(node.args) == 1 and not node.keywords \
            and isinstance(node.args[0], ast.Call):
        node = node.args[0]  # Gemma's documented `print(default_api.list_dir(path="."))`
    name = _dotted(node.func) if isinstance(node, ast.Call) else None
    if not isinstance(node, ast.Call) or name is None or node.args or any(k.arg is None for k in node.keywords):
        raise BlockError(
            f"Your {KIND_TAGS[kind][0]} block holds code, not a tool call, so nothing was run. Write the tool's "
            "name in <name></name> and its arguments as JSON in <parameters></parameters>:\n" + EXAMPLE
        )
    args: dict[str, Any] = {}
    for keyword in node.keywords:
        try:
            args[str(keyword.arg)] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise BlockError(
                f"The argument {keyword.arg} of your call to {name} is not a plain value, so nothing was run. "
                "Write:\n" + example(name)
            ) from None
    return ToolCall(name, args)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def pythonic_calls(text: str) -> tuple[ToolCall, ...]:
    """`[read_file(path="a"), list_dir()]` or `read_file(path="a")`: keyword arguments with literal values only."""
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ()
    nodes = node.elts if isinstance(node, ast.List) else [node]
    calls: list[ToolCall] = []
    for item in nodes:
        if not isinstance(item, ast.Call) or not isinstance(item.func, ast.Name) or item.args:
            return ()
        args: dict[str, object] = {}
        for keyword in item.keywords:
            if keyword.arg is None:
                return ()
            try:
                args[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return ()
        calls.append(ToolCall(item.func.id, args, raw=ast.unparse(item)))
    return tuple(calls)
