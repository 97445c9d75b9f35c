"""One rate gate for the whole batch: a 429 pauses every task and halves the requests in flight."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..core.cancel import CancelToken
from ..core.errors import CancelledError, LLMError, LLMTimeoutError, RateLimitError
from ..llm import LLM, FinishChunk, LLMChunk, LLMRequest, ToolCallChunk
from ..providers.failures import RetryPolicy


class RateGate:
    """Admits model requests: at most `limit` in flight, none while the endpoint asked everyone to wait.

    A 429 pauses the gate for the server's `Retry-After` (else an exponential backoff) and halves the
    requests allowed in flight; each run of successes as long as the current limit raises it by one again,
    up to the batch's concurrency (additive increase, multiplicative decrease, as TCP does).
    """

    def __init__(
        self,
        limit: int,
        *,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.max_limit = limit
        self.limit = limit
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._clock = clock
        self._cond = threading.Condition()
        self.in_flight = 0
        self.paused_until = 0.0
        #: 429 answers seen in all (for the summary).
        self.rate_limited = 0
        self._strikes = 0
        self._successes = 0

    def acquire(self, cancel: CancelToken | None = None, deadline: float | None = None) -> None:
        """Wait for a slot; raise on cancel, or `LLMTimeoutError` if the pause outlasts `deadline`."""
        unregister = cancel.on_cancel(self._wake) if cancel is not None else (lambda: None)
        try:
            with self._cond:
                while True:
                    if cancel is not None and cancel.cancelled:
                        raise CancelledError("cancelled while waiting for the rate gate")
                    now = self._clock()
                    if deadline is not None and now >= deadline:
                        raise LLMTimeoutError("the run's time ran out while the endpoint asked to slow down")
                    pause = self.paused_until - now
                    if pause <= 0 and self.in_flight < self.limit:
                        self.in_flight += 1
                        return
                    waits = [w for w in (pause if pause > 0 else None,
                                         deadline - now if deadline is not None else None) if w is not None]
                    self._cond.wait(min(waits) if waits else None)
        finally:
            unregister()

    def release(self, ok: bool) -> None:
        """A request ended; `ok` when it went through (not rate limited)."""
        with self._cond:
            self.in_flight -= 1
            if ok:
                self._strikes = 0
                self._successes += 1
                if self.limit < self.max_limit and self._successes >= self.limit:
                    self.limit += 1
                    self._successes = 0
            self._cond.notify_all()

    def slow_down(self, retry_after: float | None) -> float:
        """The endpoint said 429: pause everyone and halve the limit; returns the pause in seconds."""
        with self._cond:
            self.rate_limited += 1
            self._strikes += 1
            delay = retry_after if retry_after is not None else min(
                self.max_delay, self.base_delay * 2.0 ** (self._strikes - 1)
            )
            self.paused_until = max(self.paused_until, self._clock() + delay)
            self.limit = max(1, self.limit // 2)
            self._successes = 0
            self._cond.notify_all()
            return delay

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class GatedLLM:
    """An `LLM` whose requests pass the batch's gate; a 429 before any output waits at the gate and retries.

    It also counts the tokens generated, for the batch's tokens/s (the server's usage when it reports it,
    else about four characters a token).
    """

    def __init__(
        self,
        inner: LLM,
        gate: RateGate,
        *,
        on_tokens: Callable[[int], None] = lambda n: None,
        on_rate_limit: Callable[[float, int], None] = lambda delay, limit: None,
    ) -> None:
        self.inner = inner
        self.gate = gate
        self.on_tokens = on_tokens
        self.on_rate_limit = on_rate_limit

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Stream `request` through the gate."""
        while True:
            self.gate.acquire(request.cancel, request.deadline)
            produced, ok, chars, tokens = False, False, 0, 0
            chunks = iter(self.inner.stream(request))
            try:
                for chunk in chunks:
                    if isinstance(chunk, FinishChunk):
                        if chunk.usage is not None:
                            tokens = chunk.usage.completion_tokens
                    else:
                        produced = True
                        chars += len(chunk.arguments if isinstance(chunk, ToolCallChunk) else chunk.text)
                    yield chunk
                ok = True
                return
            except RateLimitError as error:
                if produced or not error.retryable:
                    raise
                delay = self.gate.slow_down(error.retry_after)
                self.on_rate_limit(delay, self.gate.limit)
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()  # an early close releases the connection now
                self.gate.release(ok)
                self.on_tokens(tokens or (chars + 3) // 4)


@dataclasses.dataclass(frozen=True)
class GateRetry(RetryPolicy):
    """A provider's retry policy leaving rate limits to the batch's gate (other failures retry as usual)."""

    def delay(self, error: LLMError, attempt: int, remaining: float) -> float:
        if isinstance(error, RateLimitError) and error.retryable:
            raise error
        return super().delay(error, attempt, remaining)


def defer_rate_limits(llm: Any) -> None:
    """Make a provider hand 429s to the gate instead of retrying them on its own."""
    policy = getattr(llm, "retry", None)
    if isinstance(policy, RetryPolicy) and not isinstance(policy, GateRetry):
        llm.retry = GateRetry(**{f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)})
