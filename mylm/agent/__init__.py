"""The agent layer: the loop (`loop`), its settings (`config`), one model turn (`step` around `turn`'s
stream), the calls of a turn (`tool_runner`), a run's bookkeeping (`run_state`), compaction (`context`),
corrections (`corrections`) and a run's events as a stream (`streams`, `aio`).

`from mylm.agent import Agent` is kept: the names below are imported on first use, so that importing one
module of the package (`mylm.agent.step` for `mylm serve`) does not load the loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["FALLBACK_ANSWER", "Agent", "AgentConfig", "AgentStream", "BeforeFinishHook", "PermissionHook"]

if TYPE_CHECKING:
    from .loop import FALLBACK_ANSWER as FALLBACK_ANSWER
    from .loop import Agent as Agent
    from .loop import AgentConfig as AgentConfig
    from .loop import AgentStream as AgentStream
    from .loop import BeforeFinishHook as BeforeFinishHook
    from .loop import PermissionHook as PermissionHook


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'mylm.agent' has no attribute {name!r}")
    from . import loop

    value = getattr(loop, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
