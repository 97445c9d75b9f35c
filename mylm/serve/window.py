"""How much of the upstream's context a request may use: the window measured once, the prompt counted, and a
request that cannot fit refused at once in the API's own context-length shape, or its `max_tokens` capped to
what is left (docs/serve.md, "Context").

Without this, a client that sends more than the upstream holds (Claude Code sends 10.7k tokens and asks for 32k
`max_tokens`; an 8k llama.cpp engine) gets a 502 after the upstream's refusals, and retries the same request
again and again. The context-length error every client knows (OpenAI's `context_length_exceeded`, Anthropic's
"prompt is too long") makes it compact or stop instead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from ..agent.context import MESSAGE_OVERHEAD, TokenEstimator
from ..core.errors import RequestError
from ..core.types import Message

logger = logging.getLogger("mylm.serve")

#: The code and param OpenAI answers a prompt beyond the model's context with (its SDKs and LangChain read them).
CODE = "context_length_exceeded"
#: A reply this short cannot hold a call: below it (or the client's own `max_tokens`, if smaller) the request is
#: refused as too long rather than capped.
MIN_REPLY = 64
#: Seconds before an upstream that could not be reached is asked for its window again.
RETRY_AFTER = 30.0


def too_long(prompt: int, window: int, how: str) -> RequestError:
    """The refusal of a prompt of `prompt` tokens for a `window`-token context, in words both APIs' clients
    recognise: Anthropic's "prompt is too long: N tokens > M maximum" first (Claude Code looks for it), then
    OpenAI's "maximum context length" sentence; the code is OpenAI's."""
    return RequestError(
        f"prompt is too long: {prompt} tokens > {window} maximum. This model's maximum context length is {window} "
        f"tokens, and your messages resulted in {prompt} tokens ({how}, with the tools and the server's protocol "
        "prompt). Please reduce the length of the messages.",
        status=400, param="messages", code=CODE)


class ContextWindow:
    """The upstream's context window, measured on first use, and what a request may ask for within it.

    Sources, in order: the window an in-process engine allocated (`context_window`, the local provider's n_ctx);
    llama.cpp's server (`GET /props`: `default_generation_settings.n_ctx`, else `GET /slots`: a slot's `n_ctx`,
    the context one request really gets); vLLM's model list (`max_model_len`); else `fallback` (the configured
    `context_tokens`, Ollama's `num_ctx`, or the model registry's figure). None: unknown, and nothing is checked.
    Thread-safe; an upstream that cannot be reached is asked again after `RETRY_AFTER` seconds."""

    def __init__(self, llm: Any, *, fallback: int | None = None, probe: bool = True, timeout: float = 5.0) -> None:
        self.llm = llm
        self.fallback = fallback
        self.probe = probe
        self.timeout = timeout
        self.estimator = TokenEstimator()
        #: Where the window came from (`engine`, `/props`, `/slots`, `/v1/models`, `configured`), for the log.
        self.source: str | None = None
        self._size: int | None = None
        self._measured = False
        self._failed_at: float | None = None
        #: llama.cpp's `/tokenize` (found with `/props`): exact counts for a prompt near the limit.
        self._tokenize: str | None = None
        self._lock = threading.Lock()

    # -------------------------------------------------------------------------------------------- measuring

    def size(self) -> int | None:
        """The window in tokens (None: unknown)."""
        with self._lock:
            if self._measured or (self._failed_at is not None
                                  and time.monotonic() - self._failed_at < RETRY_AFTER):
                return self._size if self._measured else self.fallback
            size, source, reached = self._measure()
            if size is None and not reached:
                self._failed_at = time.monotonic()  # the upstream is down: its window is asked again later
                return self.fallback
            if size is None and self.fallback is not None:
                size, source = self.fallback, "configured"
            self._size, self.source, self._measured = size, source, True
            logger.info("Upstream context window: %s (%s)", size if size else "unknown", source or "no source")
            return size

    def _measure(self) -> tuple[int | None, str | None, bool]:
        """(window, source, whether the upstream answered at all)."""
        engine = getattr(self.llm, "context_window", None)
        if isinstance(engine, int) and not isinstance(engine, bool) and engine > 0:
            return engine, "engine", True
        endpoint = getattr(self.llm, "endpoint", None)
        base = str(getattr(endpoint, "base_url", "") or "").rstrip("/")
        if not self.probe or not base.startswith(("http://", "https://")):
            return None, None, True
        root = base.removesuffix("/v1")
        key = getattr(endpoint, "api_key", None)
        reached = False
        props, answered = self._get(f"{root}/props", key)
        reached |= answered
        n_ctx = _positive(_dig(props, "default_generation_settings", "n_ctx")) or _positive(_dig(props, "n_ctx"))
        if n_ctx:
            self._tokenize = f"{root}/tokenize"
            return n_ctx, "/props", True
        slots, answered = self._get(f"{root}/slots", key)
        reached |= answered
        if isinstance(slots, list) and slots and isinstance(slots[0], dict):
            n_ctx = _positive(slots[0].get("n_ctx"))
            if n_ctx:
                self._tokenize = f"{root}/tokenize"
                return n_ctx, "/slots", True
        listed, answered = self._get(f"{root}/v1/models", key)
        reached |= answered
        entries = listed.get("data") if isinstance(listed, dict) else None
        if isinstance(entries, list):
            model = getattr(endpoint, "model", None)
            chosen = [e for e in entries if isinstance(e, dict) and (e.get("id") == model or len(entries) == 1)]
            length = _positive(chosen[0].get("max_model_len")) if chosen else None
            if length:
                return length, "/v1/models", True
        return None, None, reached

    def _get(self, url: str, key: str | None) -> tuple[Any, bool]:
        """The JSON `url` answers (None for any other answer), and whether the server answered at all."""
        return self._call(urllib.request.Request(url, headers=_auth(key)))

    def _call(self, request: urllib.request.Request) -> tuple[Any, bool]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read(1 << 20)
        except urllib.error.HTTPError:
            return None, True
        except (OSError, ValueError):
            return None, False
        try:
            return json.loads(raw), True
        except ValueError:
            return None, True

    # ---------------------------------------------------------------------------------------------- fitting

    def fit(self, messages: Sequence[Message], max_tokens: int, extra: str = "") -> int:
        """The `max_tokens` to send for a prompt of `messages` (and `extra` text, such as forwarded tool schemas):
        `max_tokens` when it fits or the window is unknown, what is left when only the prompt fits. Raises the API's context-length `RequestError` when the prompt cannot fit."""
        window = self.size()
        if window is None:
            return max_tokens
        estimate = self._estimate(messages, extra)
        if estimate + max_tokens <= window:
            return max_tokens  # the common case costs nothing more
        prompt, how = estimate, "estimated at 4 characters a token"
        counted = self._count(messages, extra)
        if counted is not None:
            prompt, how = counted, "counted by the upstream's tokenizer"
        left = window - prompt
        if left < min(max_tokens, MIN_REPLY):
            logger.info("Refused: a prompt of %d tokens (%s) in a %d-token context", prompt, how, window)
            raise too_long(prompt, window, how)
        if left < max_tokens:
            logger.info("max_tokens %d capped to %d: a prompt of %d tokens (%s) in a %d-token context",
                        max_tokens, left, prompt, how, window)
            return left
        return max_tokens

    def count(self, messages: Sequence[Message], extra: str = "") -> tuple[int, bool]:
        """The tokens of a prompt of `messages` (and `extra` text) and whether they were counted: by the upstream's
        tokenizer where it has one (llama.cpp's `/tokenize`, found when the window is measured), else estimated."""
        self.size()
        counted = self._count(messages, extra)
        return (counted, True) if counted is not None else (self._estimate(messages, extra), False)

    def _estimate(self, messages: Sequence[Message], extra: str) -> int:
        """The prompt's tokens at the estimator's characters a token."""
        return self.estimator.estimate(messages) + int(len(extra) / self.estimator.chars_per_token)

    def _count(self, messages: Sequence[Message], extra: str) -> int | None:
        """The prompt's tokens as llama.cpp's `/tokenize` counts them (None: no such route)."""
        url = self._tokenize
        if url is None:
            return None
        text = "".join(m.content for m in messages) + extra
        body = json.dumps({"content": text, "add_special": False, "parse_special": False}).encode("utf-8")
        key = getattr(getattr(self.llm, "endpoint", None), "api_key", None)
        answer, _ = self._call(urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json", **_auth(key)}, method="POST"))
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            self._tokenize = None  # not llama.cpp's after all: estimates from now on
            return None
        return len(tokens) + MESSAGE_OVERHEAD * len(messages)


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _dig(document: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
