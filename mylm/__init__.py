"""mylm: a text-protocol ReAct agent for any plain-text LLM endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

# Public names map to the module that defines them; they are imported on first use so that `import mylm`
# (and so `mylm --help`) stays as cheap as importing click.
_EXPORTS = {
    "Agent": "mylm.agent",
    "AgentStream": "mylm.agent",
    "LLM": "mylm.llm",
    "LLMRequest": "mylm.llm",
    "CancelToken": "mylm.cancel",
    "Tool": "mylm.tools.base",
    "ToolContext": "mylm.tools.base",
    "TaskComplete": "mylm.tools.base",
    "tool": "mylm.tools.base",
    "PromptLoader": "mylm.prompts",
    "Message": "mylm.types",
    "Permission": "mylm.types",
    "RunResult": "mylm.types",
    "StopReason": "mylm.types",
    "ToolCall": "mylm.types",
    "Usage": "mylm.types",
    "MylmError": "mylm.errors",
}

__all__ = [
    "Agent",
    "AgentStream",
    "CancelToken",
    "LLM",
    "LLMRequest",
    "Message",
    "MylmError",
    "Permission",
    "PromptLoader",
    "RunResult",
    "StopReason",
    "TaskComplete",
    "Tool",
    "ToolCall",
    "ToolContext",
    "Usage",
    "tool",
]

if TYPE_CHECKING:
    from .agent import Agent, AgentStream
    from .cancel import CancelToken
    from .errors import MylmError
    from .llm import LLM, LLMRequest
    from .prompts import PromptLoader
    from .tools.base import TaskComplete, Tool, ToolContext, tool
    from .types import Message, Permission, RunResult, StopReason, ToolCall, Usage


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mylm' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
