"""What went wrong at an endpoint: error bodies in every known shape, typed errors, the retry policy."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from ..core.errors import (
    AuthenticationError,
    ContextOverflowError,
    HTTPStatusError,
    LLMError,
    ModelNotFoundError,
    RateLimitError,
    ServerError,
    StreamError,
)

_MAX_MESSAGE = 400
#: Codes meaning the account's money or quota is spent: waiting will not help, so they are never retried.
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "enforced_spend_limit_reached"})
#: Error types or codes inside a 200 stream that say "try again" rather than "your request is wrong".
_TRANSIENT = re.compile(r"overload|unavailable|server_error|api_error|internal|timeout|rate_limit|busy", re.IGNORECASE)
_CONTEXT = re.compile(
    r"context[ _]length|context window|context size|maximum context|exceed_context_size|prompt is too long"
    r"|too many tokens|input token count|reduce the length|prompt too long|exceeds the available context",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Failure:
    """An HTTP error answer, reduced to what decides its handling (the key already scrubbed from the text)."""

    status: int
    #: The server's own message, on one line.
    message: str
    #: The server's error code or type (`insufficient_quota`, `RESOURCE_EXHAUSTED`, `overloaded_error`, ...).
    code: str = ""
    #: The request field the server blames, where it says (`stop`, `max_tokens`).
    param: str = ""
    #: Seconds the server asked to wait (`retry-after-ms`, `retry-after`), if it said.
    retry_after: float | None = None
    #: The server's explicit verdict from `x-should-retry`, if it gave one.
    should_retry: bool | None = None

    def blames(self, *fields: str) -> bool:
        """Whether the error points at one of `fields` (by `param`, or by naming it in the message)."""
        if self.param in fields:
            return True
        return any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", self.message) for f in fields)


def scrub(text: str, secret: str | None) -> str:
    """`text` on one line, capped, with the API key blanked out (servers sometimes echo a key back)."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[REDACTED]")
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def error_fields(payload: Any) -> tuple[str, str, str]:
    """(message, code, param) from any known error shape (OpenAI, Anthropic, Gemini, Ollama, ...)."""
    if not isinstance(payload, Mapping):
        return (str(payload) if payload is not None else ""), "", ""
    error = payload.get("error", payload)
    if isinstance(error, str):
        # Ollama and TGI: {"error": "...", "error_type": "..."}.
        return error, str(payload.get("error_type") or ""), ""
    if not isinstance(error, Mapping):
        return json.dumps(payload)[:_MAX_MESSAGE], "", ""
    message = error.get("message") or payload.get("message") or json.dumps(payload)[:_MAX_MESSAGE]
    details = error.get("details")
    spend = _spend_code(details)
    code = spend or error.get("code") or error.get("status") or error.get("type") or payload.get("type") or ""
    if isinstance(code, int):  # Gemini and llama.cpp put the HTTP status in `code`; the name says more.
        code = error.get("status") or error.get("type") or str(code)
    return str(message), str(code), str(error.get("param") or "")


def _spend_code(details: Any) -> str:
    """Anthropic's `error.details.error_code` (e.g. an enforced spend limit), when present."""
    if isinstance(details, Mapping):
        return str(details.get("error_code") or "")
    return ""


def parse_failure(status: int, body: bytes, headers: Mapping[str, str], *, secret: str | None) -> Failure:
    """Read an HTTP error answer (any body shape, or none) into a `Failure`."""
    text = body.decode("utf-8", errors="replace")
    try:
        message, code, param = error_fields(json.loads(text))
    except (ValueError, RecursionError):  # RecursionError: nested past json's depth limit, as hostile as HTML
        # Not JSON: a proxy's HTML page or a plain-text body. Strip tags so the line stays readable.
        message, code, param = re.sub(r"<[^>]*>", " ", text), "", ""
    should = headers.get("x-should-retry")
    return Failure(
        status=status,
        message=scrub(message, secret) or f"HTTP {status}",
        code=code,
        param=param,
        retry_after=retry_after_seconds(headers),
        should_retry=None if should is None else should.strip().lower() == "true",
    )


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait the server asked for: `retry-after-ms`, else `retry-after` in seconds or as an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


@dataclass(frozen=True)
class Place:
    """Who is being talked to, for messages: provider, redacted URL, model, and where the key is set."""

    provider: str
    url: str
    model: str | None
    key_hint: str
    has_key: bool


def to_error(failure: Failure, place: Place, *, models: list[str] | None = None) -> HTTPStatusError:
    """The typed error for an HTTP failure, with one readable line naming what to do about it."""
    status, said = failure.status, failure.message
    where = f"{place.provider} endpoint {place.url}"
    error: HTTPStatusError
    if status in (401, 403):
        if not place.has_key:
            fix = f"no API key was sent; set {place.key_hint}"
        elif status == 401:
            fix = f"the API key was rejected; check {place.key_hint}"
        else:
            fix = f"the API key lacks permission for this; check {place.key_hint}"
        error = AuthenticationError(f"{where}: HTTP {status}: {said} ({fix})", status=status)
    elif status == 404:
        error = ModelNotFoundError(_not_found(failure, place, models), status=status)
    elif status in (400, 413, 422) and (_CONTEXT.search(said) or _CONTEXT.search(failure.code)):
        error = ContextOverflowError(
            f"the conversation no longer fits the model's context window ({where}: HTTP {status}: {said})",
            status=status,
        )
    elif status == 429:
        error = RateLimitError(f"{where} is rate limiting: HTTP 429: {said}", status=status)
        if failure.code.lower() in _QUOTA_CODES:
            error.message = f"{where}: the account's quota or spend limit is used up: {said}"
            error.args = (error.message,)
            error.retryable = False
    elif status >= 500:
        error = ServerError(f"{where} failed: HTTP {status}: {said}", status=status)
    elif 300 <= status < 400:
        error = HTTPStatusError(
            f"{where} redirected (HTTP {status}); mylm does not follow redirects, so set --base-url or "
            f"MYLM_BASE_URL to the final address: {said}",
            status=status,
        )
    else:
        error = HTTPStatusError(f"{where}: HTTP {status}: {said}", status=status)
        # 408 Request Timeout is the server asking for the same request again.
        error.retryable = status == 408
    error.retry_after = failure.retry_after
    if failure.should_retry is not None and status not in (400, 401, 403, 404):
        error.retryable = failure.should_retry
    return error


def _not_found(failure: Failure, place: Place, models: list[str] | None) -> str:
    if "model" not in failure.message.lower() and "model" not in failure.code.lower():
        return (
            f"{place.url} has no such route (HTTP 404: {failure.message}); check the base URL "
            f"(--base-url / MYLM_BASE_URL) and the provider "
            f"(--provider / MYLM_PROVIDER, now {place.provider})"
        )
    text = f"model {place.model!r} not found at {place.url} (HTTP 404: {failure.message})"
    if models:
        shown = ", ".join(models[:20]) + (f", … ({len(models)} in all)" if len(models) > 20 else "")
        return f"{text}; the server has: {shown}"
    if models is not None:
        return f"{text}; the server lists no models"
    return f"{text}; `mylm models` lists the ones it has"


def stream_error(payload: Any, place: Place, *, secret: str | None) -> StreamError:
    """An error object that arrived inside a 200 stream, as a `StreamError` (retryable if transient)."""
    message, code, _ = error_fields(payload)
    error = StreamError(
        f"{place.provider} endpoint {place.url} reported an error mid-stream: {scrub(message, secret)}"
    )
    error.retryable = bool(_TRANSIENT.search(code) or _TRANSIENT.search(message))
    return error


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed call (only before any content has arrived)."""

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    #: A server asking for a longer wait than this is refused at once, with its value in the message.
    max_retry_after: float = 30.0
    #: Returns a number in [0, 1); injectable so tests are deterministic.
    random: Callable[[], float] = field(default=random.random, repr=False)

    def delay(self, error: LLMError, attempt: int, remaining: float) -> float:
        """Seconds to wait before retry number `attempt + 1`, or raise `error` when it must not be retried."""
        if not error.retryable:
            raise error
        if attempt >= self.max_retries:
            _note(error, f"gave up after {attempt + 1} attempts")
            raise error
        asked = error.retry_after if isinstance(error, HTTPStatusError) else None
        if asked is not None:
            if asked > self.max_retry_after or asked > remaining:
                limit = (
                    "the run's remaining time"
                    if asked <= self.max_retry_after
                    else f"{self.max_retry_after:g} s"
                )
                _note(error, f"the server asked to retry after {asked:g} s, longer than {limit}")
                raise error
            return float(asked)
        # Exponential backoff with jitter in [50%, 100%] of the step: clients that failed together spread out.
        step = min(self.max_delay, self.base_delay * 2.0**attempt)
        wait = step * (0.5 + self.random() / 2)
        if wait > remaining:
            _note(error, f"no time left in the run for retry {attempt + 1}")
            raise error
        return wait


def _note(error: LLMError, note: str) -> None:
    error.message = f"{error.message} ({note})"
    error.args = (error.message,)
