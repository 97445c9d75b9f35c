"""The seam between a run and whoever watches it (a trace): no OpenTelemetry here, so any layer may name it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..types import Event, RunResult


class RunObserver(Protocol):
    """Sees every event of one run (approvals included), and how the run ended."""

    def __call__(self, event: Event) -> None: ...

    def end(self, result: RunResult | None) -> None:
        """The run is over (None: it did not stop in time after a cancel)."""
        ...
