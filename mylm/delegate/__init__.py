"""mylm as a component other agents and editors call: delegated runs confined to a workspace, served over MCP
(`mylm mcp`), A2A (`mylm a2a`) and ACP (`mylm acp`).

`DelegateService` holds the behaviour and needs no protocol library; `core` is what the three front ends share (a
held workspace, the approval hook and its bridge to whoever answers, the cancel path); `server`, `a2a` and `acp`
put it on the official SDKs (the `mcp`, `a2a` and `acp` extras), and the CLI composes them from the settings."""

from __future__ import annotations

from ..telemetry.observer import RunObserver
from .core import Ask, HeldWorkspace, Question, RunHooks, RunSetup, ToolSwap
from .runs import AgentFactory, RunReport, RunRequest, ToolLogEntry, drive
from .service import DelegateService, Finished, ObserverFactory, Relay
from .transcripts import RunSessions
from .workspace import Bounds

__all__ = [
    "AgentFactory", "Ask", "Bounds", "DelegateService", "Finished", "HeldWorkspace", "ObserverFactory",
    "Question", "Relay", "RunHooks", "RunObserver", "RunReport", "RunRequest", "RunSessions", "RunSetup",
    "ToolLogEntry", "ToolSwap", "drive",
]
