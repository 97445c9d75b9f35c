"""The Tool value, the `@tool` decorator, the context a tool runs in, and the done-tool signal."""

from __future__ import annotations

import inspect
import json
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from ..core.cancel import CancelToken, remaining
from ..core.types import Grant
from .schema import parse_docstring, schema_from_signature
from .validation import validate

#: How much a tool can change: `read` tools run without asking, `write` and `execute` ask first in the CLI.
Risk = Literal["read", "write", "execute"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may need from the run: its deadline, its cancel token and the workspace root."""

    deadline: float | None = None
    cancel: CancelToken | None = None
    workspace: Path = field(default_factory=Path.cwd)
    #: What the permission hook granted this call; the sandbox of `execute_command` enforces it.
    grant: Grant = "workspace-write"

    def time_left(self, cap: float | None = None) -> float:
        """Seconds the tool may still take: the run's remaining budget, capped by `cap`."""
        left = remaining(self.deadline)
        return min(left, cap) if cap is not None else left


class TaskComplete(Exception):
    """Raised by a tool to end the run successfully with `message` as the final answer (seed 003 §4.4)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Tool:
    """A tool the model can call: name, description, JSON Schema parameters and the function that runs it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Any]
    risk: Risk = "read"
    #: The name of the function parameter that receives the `ToolContext`, if it takes one.
    context_param: str | None = None

    def validate(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Check arguments against the schema; return them (with unambiguous coercions) and the problems."""
        value, problems = validate(self.parameters, dict(arguments))
        return (value if isinstance(value, dict) else dict(arguments)), problems

    def refine(self, **properties: Mapping[str, Any]) -> Tool:
        """A copy whose named parameter schemas are extended, e.g. `refine(offset={"minimum": 1})`."""
        schema = dict(self.parameters)
        merged = dict(schema.get("properties", {}))
        for name, extra in properties.items():
            merged[name] = {**merged.get(name, {}), **extra}
        schema["properties"] = merged
        return replace(self, parameters=schema)

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext | None = None) -> str:
        """Run the tool with already-validated arguments and return its output as text."""
        kwargs = dict(arguments)
        if self.context_param:
            kwargs[self.context_param] = context or ToolContext()
        return render_output(self.function(**kwargs))


def render_output(value: Any) -> str:
    """Turn a tool's return value into observation text (strings as they are, other values as JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        return str(value)


def _context_param(function: Callable[..., Any]) -> str | None:
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the parameter's name
        hints = {}
    for name in inspect.signature(function).parameters:
        hint = hints.get(name)
        takes_context = hint is ToolContext or ToolContext in typing.get_args(hint)
        if takes_context or (name == "context" and hint is None):
            return name
    return None


@overload
def tool(function: F, /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, risk: Risk = "read"
) -> Callable[[F], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    risk: Risk = "read",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed, documented function into a `Tool`; usable as `@tool` or `@tool(name=..., risk=...)`."""

    def build(fn: Callable[..., Any]) -> Tool:
        summary, _ = parse_docstring(fn.__doc__)
        ctx = _context_param(fn)
        return Tool(
            name=name or fn.__name__,
            description=description or summary or fn.__name__.replace("_", " "),
            parameters=schema_from_signature(fn, skip=frozenset({ctx} if ctx else set())),
            function=fn,
            risk=risk,
            context_param=ctx,
        )

    return build(function) if function is not None else build


@dataclass(frozen=True)
class ToolOutcome:
    """What running one call produced: text for the observation, whether it failed, and how long it took."""

    output: str
    is_error: bool
    duration: float
    #: Set when a tool raised `TaskComplete`: the run ends with this answer.
    final_message: str | None = None
    #: The run's deadline passed while the tool ran, and it was abandoned (see `mylm.tools.bounded`).
    timed_out: bool = False


def run_tool(tool_: Tool, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutcome:
    """Run a tool, turning any exception into an error outcome the model can read (seed 003 §4.3)."""
    from ..core.errors import CancelledError, MylmError

    started = time.monotonic()
    try:
        output = tool_.invoke(arguments, context)
    except TaskComplete as done:
        return ToolOutcome(done.message, False, time.monotonic() - started, final_message=done.message)
    except (CancelledError, KeyboardInterrupt):
        raise
    except MylmError as error:
        return ToolOutcome(str(error), True, time.monotonic() - started)
    except Exception as error:  # noqa: BLE001 - any tool failure becomes an observation, never a crash
        return ToolOutcome(f"{type(error).__name__}: {error}", True, time.monotonic() - started)
    return ToolOutcome(output, False, time.monotonic() - started)
