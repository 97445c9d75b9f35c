"""Message text tokenized by llama-server itself, so no data in a raw prompt can become a control token.

llama-server reads a string prompt with special tokens parsed: `<|im_start|>` written in a tool result would be
the real control token. Its `POST /tokenize` has the engine's "no special tokens" path (`parse_special: false`),
and `/completion` (and its `/v1/completions`) takes a flat array mixing strings and token ids: strings are read
with special tokens parsed, ids are used as they are, and a BOS is added only when the first element is a
string. So the template's text goes as strings and the messages' contents as ids (issue 19 §7).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import StreamError
from ..llm import LLMRequest
from ..protocol.reasoning import prompt_opens_reasoning
from .engine import StatusFailure, bearer
from .failures import Failure, parse_failure
from .formats import data_segments
from .transport import MAX_ERROR_BYTES, MAX_RESPONSE_BYTES, CallGuard, HTTPCall, iter_body, read_all, send

if TYPE_CHECKING:
    from ..core.types import Message
    from .engine import HTTPProvider

_log = logging.getLogger("mylm.providers")
#: A prompt as sent: one string, or llama.cpp's flat array of template strings and data token ids.
Prompt = str | tuple[str | int, ...]

#: Statuses that say "no such route here" (or "not this body shape": another server's `/tokenize`).
_NOT_HERE = frozenset({400, 404, 405, 422, 501})


@dataclass(frozen=True)
class Prompted(LLMRequest):
    """A request whose prompt is ready to send (rendered, and its data tokenized where the server can)."""

    prompt: Prompt = ""


def prompted(request: LLMRequest, prompt: Prompt) -> Prompted:
    """`request` carrying `prompt`."""
    return Prompted(**{f.name: getattr(request, f.name) for f in dataclasses.fields(LLMRequest)}, prompt=prompt)


def post_json(provider: HTTPProvider, url: str, body: Any, guard: CallGuard, *, limit: int = MAX_RESPONSE_BYTES
              ) -> tuple[int, bytes, Any]:
    """POST `body` to one of the server's helper routes, under the call's deadline and cancel token: (status,
    body, headers). Connection failures raise like the call itself (and are retried like it)."""
    endpoint = provider.endpoint
    call = HTTPCall("POST", url, {"Content-Type": "application/json", **bearer(endpoint)},
                    json.dumps(body, ensure_ascii=False).encode("utf-8"))
    response = send(provider._session, call, guard, connect_timeout=endpoint.connect_timeout,
                    read_timeout=endpoint.read_timeout)
    try:
        if response.status_code >= 300:
            return response.status_code, read_all(response, guard, idle=endpoint.read_timeout,
                                                  limit=MAX_ERROR_BYTES), response.headers
        return response.status_code, _whole(response, guard, endpoint.read_timeout, limit), response.headers
    finally:
        guard.detach()
        response.close()


def _whole(response: Any, guard: CallGuard, idle: float, limit: int) -> bytes:
    """An answer read to its end: one that breaks off raises (and is retried like the call), so a cut answer
    is never mistaken for one of another shape; one past `limit` is read as nothing."""
    try:
        return b"".join(list(iter_body(response, guard, idle=idle, limit=limit)))
    except StreamError as error:
        if error.retryable:
            raise
        return b""


class ServerTokenizer:
    """A llama.cpp server's `POST /tokenize`, asked for each message content once (an agent resends a growing
    prefix: a least-recently-used cache keyed by the text leaves only new messages to tokenize).

    `probe`: the route is a guess (an OpenAI-compatible base URL may be vLLM, LM Studio, a gateway): any answer
    but llama.cpp's exact shape, `{"tokens": [...]}` and nothing else, means "not here", never an error.
    """

    def __init__(self, url: str, *, probe: bool = False, max_tokens: int = 1 << 19, max_entries: int = 1024
                 ) -> None:
        self.url = url
        self.probe = probe
        #: None until the server has answered; False once it has shown it has no usable `/tokenize`.
        self.available: bool | None = None
        self.max_tokens, self.max_entries = max_tokens, max_entries
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._size = 0
        # `mylm serve` relays many calls at once through one provider.
        self._lock = threading.Lock()

    def prompt(self, provider: HTTPProvider, render: Callable[[list[Message]], str],
               messages: Sequence[Message], guard: CallGuard) -> Prompt:
        """The conversation as the server should read it: template strings and data token ids where the server
        tokenizes, else the rendered string (its special tokens defused by shape, as before)."""
        prompt: Prompt | None = None
        if self.available is not False:
            prompt = self._mixed(provider, data_segments(render, messages), guard)
        if prompt is None:
            prompt = render(list(messages))
        template = prompt if isinstance(prompt, str) else "".join(p for p in prompt if isinstance(p, str))
        # Only the template writes `<think>` for the model: its own text decides how calls are read.
        provider.opens_reasoning = prompt_opens_reasoning(template)
        return prompt

    def _mixed(self, provider: HTTPProvider, pieces: list[tuple[str, bool]], guard: CallGuard) -> Prompt | None:
        out: list[str | int] = []
        for k, (text, data) in enumerate(pieces):
            if data:
                tokens = self.tokens(provider, text, guard)
                if tokens is None:
                    return None
                out.extend(tokens)
            elif out and isinstance(out[-1], str):
                out[-1] += text
            elif text or k == 0:
                # The first element stays a string even when empty: the server then adds the BOS as it would
                # for a string prompt.
                out.append(text)
        if not any(isinstance(p, int) for p in out):
            # An array of strings alone is several prompts to llama-server.
            return "".join(p for p in out if isinstance(p, str))
        return tuple(out)

    def tokens(self, provider: HTTPProvider, text: str, guard: CallGuard) -> tuple[int, ...] | None:
        """`text` tokenized as plain text (None: the server has no usable `/tokenize`, remembered)."""
        if not text:
            return ()
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return cached
        guard.check()
        size = len(text.encode("utf-8"))
        status, body, headers = post_json(
            provider, self.url, {"content": text, "add_special": False, "parse_special": False}, guard,
            # Ids are at most one per byte, and none is longer than 11 characters in JSON.
            limit=max(MAX_RESPONSE_BYTES, 12 * size + 1024),
        )
        if status >= 300 and not self.probe and status not in _NOT_HERE:
            # A server still loading its model (503), a bad key (401): retried or reported like any call.
            raise StatusFailure(parse_failure(status, body, headers, secret=provider.endpoint.api_key))
        tokens = _token_ids(body, size, exact=self.probe) if status == 200 else None
        if tokens is None:
            if not self.probe:
                _log.info("%s answered HTTP %s without llama.cpp's token list: prompts go as text from now on, "
                          "special tokens in it defused by shape", self.url, status)
            self.available = False
            return None
        self.available = True
        self._remember(text, tokens)
        return tokens

    def _remember(self, text: str, tokens: tuple[int, ...]) -> None:
        with self._lock:
            if text in self._cache:  # another call asked for the same text meanwhile
                return
            self._cache[text] = tokens
            self._size += len(tokens)
            while self._cache and (self._size > self.max_tokens or len(self._cache) > self.max_entries):
                _, dropped = self._cache.popitem(last=False)
                self._size -= len(dropped)


def _token_ids(body: bytes, size: int, *, exact: bool) -> tuple[int, ...] | None:
    """The ids in llama.cpp's answer `{"tokens": [1, 2, ...]}`, or None for any other answer."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or (exact and set(document) != {"tokens"}):
        return None
    tokens = document.get("tokens")
    # Never more than one id per byte (plus a SentencePiece prefix space). None at all is allowed: text a
    # tokenizer drops must not be able to turn ids off.
    if not isinstance(tokens, list) or len(tokens) > size + 1:
        return None
    if not all(type(t) is int and t >= 0 for t in tokens):
        return None
    return tuple(tokens)


def refused_tokens(failure: Failure, tokenizer: ServerTokenizer) -> str | None:
    """The quirk to learn when a server refused a prompt of token ids (a look-alike that takes only strings, or
    ids from another vocabulary): the prompt goes as a string from then on, its tokens defused by shape."""
    # Only a refusal of the prompt's form: a prompt too long for the context ("request (9000 tokens) exceeds
    # the available context size") must not turn ids off, or tool output could, by its size.
    if tokenizer.available and (failure.param == "prompt" or _PROMPT_FORM.search(failure.message)):
        _log.info("the server refused a prompt of token ids (%s): prompts go as text from now on, special "
                  "tokens in it defused by shape", failure.message)
        tokenizer.available = False
        return "no_token_prompt"
    return None


#: llama-server's own words: `"prompt" elements must be a string, a list of tokens, ...`, `Prompt contains invalid
#: tokens` (ids out of the model's range).
_PROMPT_FORM = re.compile(r"[\"'`]prompt[\"'`]|invalid token", re.IGNORECASE)
