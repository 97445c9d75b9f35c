"""mylm: a text-protocol ReAct agent for any plain-text LLM endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

#: The public API: each name and the module that defines it. `__all__` is these names, in this order, and each is
#: imported on first use so that `import mylm` (and so `mylm --help`) stays as cheap as importing click.
#: docs/api.md documents exactly these (tests/test_public_api.py holds both to this table).
_EXPORTS: dict[str, str] = {
    # The agent and its results.
    "Agent": "mylm.agent.loop",
    "AgentConfig": "mylm.agent.config",
    "AgentStream": "mylm.agent.streams",
    "RunResult": "mylm.core.types",
    "StopReason": "mylm.core.types",
    "Message": "mylm.core.types",
    "ToolCall": "mylm.core.types",
    "Usage": "mylm.core.types",
    "Permission": "mylm.core.types",
    "CancelToken": "mylm.core.cancel",
    "MylmError": "mylm.core.errors",
    # Models: the seam, and endpoints behind it.
    "LLM": "mylm.llm",
    "LLMRequest": "mylm.llm",
    "Sampling": "mylm.llm",
    "Endpoint": "mylm.providers.base",
    "create_llm": "mylm.providers",
    "PromptLoader": "mylm.prompts",
    # Tools.
    "tool": "mylm.tools.base",
    "Tool": "mylm.tools.base",
    "ToolContext": "mylm.tools.base",
    "TaskComplete": "mylm.tools.base",
    "builtin_tools": "mylm.tools.builtin",
    # Events, in the order a run emits them.
    "Event": "mylm.core.types",
    "IterationStartEvent": "mylm.core.types",
    "ReasoningEvent": "mylm.core.types",
    "TextEvent": "mylm.core.types",
    "UsageEvent": "mylm.core.types",
    "ModelCallEvent": "mylm.core.types",
    "StepStartEvent": "mylm.core.types",
    "ToolCallEvent": "mylm.core.types",
    "ApprovalEvent": "mylm.core.types",
    "ToolResultEvent": "mylm.core.types",
    "StepCompleteEvent": "mylm.core.types",
    "ContinueEvent": "mylm.core.types",
    "CompactionEvent": "mylm.core.types",
    "ErrorEvent": "mylm.core.types",
    "FinalResponseEvent": "mylm.core.types",
}

__all__ = list(_EXPORTS)

if TYPE_CHECKING:  # the same names for type checkers, which cannot follow __getattr__ (a test keeps them equal)
    from .agent.config import AgentConfig as AgentConfig
    from .agent.loop import Agent as Agent
    from .agent.streams import AgentStream as AgentStream
    from .core.cancel import CancelToken as CancelToken
    from .core.errors import MylmError as MylmError
    from .core.types import ApprovalEvent as ApprovalEvent
    from .core.types import CompactionEvent as CompactionEvent
    from .core.types import ContinueEvent as ContinueEvent
    from .core.types import ErrorEvent as ErrorEvent
    from .core.types import Event as Event
    from .core.types import FinalResponseEvent as FinalResponseEvent
    from .core.types import IterationStartEvent as IterationStartEvent
    from .core.types import Message as Message
    from .core.types import ModelCallEvent as ModelCallEvent
    from .core.types import Permission as Permission
    from .core.types import ReasoningEvent as ReasoningEvent
    from .core.types import RunResult as RunResult
    from .core.types import StepCompleteEvent as StepCompleteEvent
    from .core.types import StepStartEvent as StepStartEvent
    from .core.types import StopReason as StopReason
    from .core.types import TextEvent as TextEvent
    from .core.types import ToolCall as ToolCall
    from .core.types import ToolCallEvent as ToolCallEvent
    from .core.types import ToolResultEvent as ToolResultEvent
    from .core.types import Usage as Usage
    from .core.types import UsageEvent as UsageEvent
    from .llm import LLM as LLM
    from .llm import LLMRequest as LLMRequest
    from .llm import Sampling as Sampling
    from .prompts import PromptLoader as PromptLoader
    from .providers import create_llm as create_llm
    from .providers.base import Endpoint as Endpoint
    from .tools.base import TaskComplete as TaskComplete
    from .tools.base import Tool as Tool
    from .tools.base import ToolContext as ToolContext
    from .tools.base import tool as tool
    from .tools.builtin import builtin_tools as builtin_tools


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
