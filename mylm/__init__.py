"""mylm: a text-protocol ReAct agent for any plain-text LLM endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

#: The public API: each name and the module that defines it. `__all__` is these names, in this order, and each is
#: imported on first use so that `import mylm` (and so `mylm --help`) stays as cheap as importing click.
#: docs/api.md documents exactly these (tests/test_public_api.py holds both to this table).
_EXPORTS: dict[str, str] = {
    # The agent and its results.
    "Agent": "mylm.agent",
    "AgentConfig": "mylm.agent_config",
    "AgentStream": "mylm.streams",
    "RunResult": "mylm.types",
    "StopReason": "mylm.types",
    "Message": "mylm.types",
    "ToolCall": "mylm.types",
    "Usage": "mylm.types",
    "Permission": "mylm.types",
    "CancelToken": "mylm.cancel",
    "MylmError": "mylm.errors",
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
    "Event": "mylm.types",
    "IterationStartEvent": "mylm.types",
    "ReasoningEvent": "mylm.types",
    "TextEvent": "mylm.types",
    "UsageEvent": "mylm.types",
    "ModelCallEvent": "mylm.types",
    "StepStartEvent": "mylm.types",
    "ToolCallEvent": "mylm.types",
    "ApprovalEvent": "mylm.types",
    "ToolResultEvent": "mylm.types",
    "StepCompleteEvent": "mylm.types",
    "ContinueEvent": "mylm.types",
    "CompactionEvent": "mylm.types",
    "ErrorEvent": "mylm.types",
    "FinalResponseEvent": "mylm.types",
}

__all__ = list(_EXPORTS)

if TYPE_CHECKING:  # the same names for type checkers, which cannot follow __getattr__ (a test keeps them equal)
    from .agent import Agent as Agent
    from .agent_config import AgentConfig as AgentConfig
    from .cancel import CancelToken as CancelToken
    from .errors import MylmError as MylmError
    from .llm import LLM as LLM
    from .llm import LLMRequest as LLMRequest
    from .llm import Sampling as Sampling
    from .prompts import PromptLoader as PromptLoader
    from .providers import create_llm as create_llm
    from .providers.base import Endpoint as Endpoint
    from .streams import AgentStream as AgentStream
    from .tools.base import TaskComplete as TaskComplete
    from .tools.base import Tool as Tool
    from .tools.base import ToolContext as ToolContext
    from .tools.base import tool as tool
    from .tools.builtin import builtin_tools as builtin_tools
    from .types import CompactionEvent as CompactionEvent
    from .types import ContinueEvent as ContinueEvent
    from .types import ErrorEvent as ErrorEvent
    from .types import Event as Event
    from .types import ApprovalEvent as ApprovalEvent
    from .types import FinalResponseEvent as FinalResponseEvent
    from .types import IterationStartEvent as IterationStartEvent
    from .types import Message as Message
    from .types import ModelCallEvent as ModelCallEvent
    from .types import Permission as Permission
    from .types import ReasoningEvent as ReasoningEvent
    from .types import RunResult as RunResult
    from .types import StepCompleteEvent as StepCompleteEvent
    from .types import StepStartEvent as StepStartEvent
    from .types import StopReason as StopReason
    from .types import TextEvent as TextEvent
    from .types import ToolCall as ToolCall
    from .types import ToolCallEvent as ToolCallEvent
    from .types import ToolResultEvent as ToolResultEvent
    from .types import Usage as Usage
    from .types import UsageEvent as UsageEvent


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
