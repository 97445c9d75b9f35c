"""mylm as a component another agent calls: delegated runs confined to a workspace, served over MCP.

`DelegateService` holds the behaviour and needs no protocol library; `mylm.delegate.server.build_server` puts it
on the official `mcp` SDK (the `mcp` extra), and `mylm mcp` composes both from the settings."""

from __future__ import annotations

from ..telemetry.observer import RunObserver
from .runs import AgentFactory, RunReport, RunRequest, ToolLogEntry, drive
from .service import DelegateService, ObserverFactory
from .transcripts import RunSessions
from .workspace import Bounds

__all__ = [
    "AgentFactory", "Bounds", "DelegateService", "ObserverFactory", "RunObserver", "RunReport", "RunRequest",
    "RunSessions", "ToolLogEntry", "drive",
]
