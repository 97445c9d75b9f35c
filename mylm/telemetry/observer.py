"""The seam between a run and whoever watches it (a trace): no OpenTelemetry here, so any layer may name it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.types import Event, RunResult


class RunObserver(Protocol):
    """Sees every event of one run (approvals included), and how the run ended."""

    def __call__(self, event: Event) -> None: ...

    def end(self, result: RunResult | None) -> None:
        """The run is over (None: it did not stop in time after a cancel)."""
        ...


class RequestObserver(Protocol):
    """Sees one server request (`mylm serve`): what the client asked, its upstream calls' events, its status."""

    def request(self, *, api: str, model: str, stream: bool, tools: int, max_tokens: int | None,
                messages: Sequence[Mapping[str, Any]]) -> None:
        """What the client asked for, once the body is read and checked."""
        ...

    def __call__(self, event: Event) -> None: ...

    def answered(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """The answer the client got (text, calls, finish reason), once it is whole."""
        ...

    def end(self, status: int, error: str | None = None) -> None:
        """The answer's HTTP status, and the error's type if the request failed (also after a streamed 200)."""
        ...


class RequestTracing(Protocol):
    """Starts the observer of each request a server receives."""

    def request(
        self, *, method: str, route: str, path: str, headers: Mapping[str, str], scheme: str = "http",
        server: tuple[str, int] | None = None, client: str | None = None,
    ) -> RequestObserver: ...
