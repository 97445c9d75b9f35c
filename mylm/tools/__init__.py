"""Tools the model can call: Tool, `@tool`, the registry, the builtin tools and MCP.

Whether a call may run is not decided here: that is the approval policy, `mylm.approval.decide`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Risk, TaskComplete, Tool, ToolContext, ToolOutcome, run_tool, tool
from .registry import ToolRegistry

# The builtin tools and MCP load on first use, so that `import mylm.tools` stays cheap.
_LAZY = {
    "builtin_tools": "builtin",
    "ToolSettings": "builtin",
    "ShellLimits": "shell",
    "Workspace": "paths",
    "MemoryStore": "memory",
    "McpServerConfig": "mcp",
    "McpServers": "mcp",
    "open_mcp_servers": "mcp",
    "parse_mcp_config": "mcp",
}

__all__ = [
    "McpServerConfig", "McpServers", "MemoryStore", "Risk", "ShellLimits", "TaskComplete", "Tool", "ToolContext",
    "ToolOutcome", "ToolRegistry", "ToolSettings", "Workspace", "builtin_tools", "open_mcp_servers",
    "parse_mcp_config", "run_tool", "tool",
]

if TYPE_CHECKING:
    from .builtin import ToolSettings, builtin_tools
    from .mcp import McpServerConfig, McpServers, open_mcp_servers, parse_mcp_config
    from .memory import MemoryStore
    from .paths import Workspace
    from .shell import ShellLimits


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
