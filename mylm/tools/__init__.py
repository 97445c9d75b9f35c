"""Tools the model can call: the Tool value, the @tool decorator, the registry and the builtin tools."""

from .base import Risk, TaskComplete, Tool, ToolContext, ToolOutcome, run_tool, tool
from .registry import ToolRegistry

__all__ = ["Risk", "TaskComplete", "Tool", "ToolContext", "ToolOutcome", "ToolRegistry", "run_tool", "tool"]
