"""The streaming engine every provider shares: send, retry, adapt to rejected fields, decode, close early."""

from __future__ import annotations

import functools
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator
from contextlib import closing
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..core.errors import (
    ConfigError,
    ConnectionBroke,
    HTTPStatusError,
    LLMError,
    StreamError,
    UnsupportedConstraintError,
)
from ..llm import Constraint, FinishChunk, LLMChunk, LLMRequest, ReasoningChunk, TextChunk, native_refused
from ..protocol.reasoning import prompt_opens_reasoning
from ..protocol.stops import StopCutter
from .base import Endpoint, redact_url, strip_route
from .decoder import Decoder, _coalesced
from .failures import Failure, Place, RetryPolicy, parse_failure, to_error
from .formats import DEFAULT_CHAT_FORMAT, ChatFormat, chat_format, render_prompt
from .framing import LineSplitter, SSEReader, iter_ndjson
from .lean import LeanSession
from .transport import (
    MAX_ERROR_BYTES,
    MAX_RESPONSE_BYTES,
    CallGuard,
    HTTPCall,
    Session,
    iter_body,
    read_all,
    release,
    send,
)

if TYPE_CHECKING:
    import requests

    from ..core.types import Message
    from ..prompts import PromptLoader

_log = logging.getLogger("mylm.providers")
GrammarSupport = Literal["native", "compatible", "none"]
#: Time given to listing the server's models when a request named a model it does not have.
_LIST_BUDGET = 5.0


class StatusFailure(Exception):
    """An HTTP error answer, before it becomes a typed error (it may first teach the provider a quirk)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class RawJSON(str):
    """JSON text already encoded as `compact_json` would encode its value, put into a body as it is."""


def compact_json(body: dict[str, Any]) -> str:
    """`body` as compact JSON (`ensure_ascii=False`), the very text `json.dumps` makes of it, but each `RawJSON`
    value put in as it is, not encoded again (a request's conversation, most of its body, is kept encoded)."""
    if not any(type(value) is RawJSON for value in body.values()):
        return dumps_compact(body)
    parts: list[str] = []
    plain: dict[str, Any] = {}
    for key, value in body.items():
        if type(value) is RawJSON:
            if plain:
                parts.append(dumps_compact(plain)[1:-1])
                plain = {}
            parts.append(f"{dumps_compact(key)}:{value}")
        else:
            plain[key] = value
    if plain:
        parts.append(dumps_compact(plain)[1:-1])
    return "{" + ",".join(parts) + "}"


#: `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`'s encoder, made once: `json.dumps` makes one
#: per call when given arguments (~3 µs, more than encoding a short message).
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps_compact(value: Any) -> str:
    """`value` as compact JSON text, non-ASCII characters as they are (what `json_call` sends)."""
    return _COMPACT.encode(value)


@functools.lru_cache(maxsize=64)
def encoded_grammar(grammar: str) -> RawJSON:
    """`grammar` as the JSON string a body carries, encoded once per grammar: a step's grammar is the same text for
    every call with the same tools, and encoding its kilobytes of escapes cost ~9 µs each time it went into a body
    (twice in the OpenAI body: `grammar` and `structured_outputs`), a sixtieth of `mylm serve`'s CPU per reply."""
    return RawJSON(dumps_compact(grammar))


class HTTPProvider(ABC):
    """A model endpoint over HTTP. Subclasses build the request and decode the stream; the rest is shared."""

    #: The provider name, its key in `registry.REGISTRY`.
    name: ClassVar[str]
    #: The provider's own server, used when the provider is named but no base URL is given.
    default_base_url: ClassVar[str]
    #: The variables the provider's own SDK reads the key from (named in configuration and error messages).
    key_vars: ClassVar[tuple[str, ...]] = ()
    #: Routes a user may paste at the end of the base URL; they are stripped (`.../v1/chat/completions`).
    route_suffixes: ClassVar[tuple[str, ...]] = ()
    #: How many stop strings the API accepts (None: no documented limit).
    max_stops: ClassVar[int | None] = None
    #: Whether the API accepts a whitespace-only stop string (Anthropic rejects them).
    blank_stops: ClassVar[bool] = True
    #: Whether a GBNF grammar can be sent: `native` (the wire format has the field: llama.cpp), `compatible`
    #: (OpenAI-compatible servers: llama.cpp's, llama-cpp-python's and vLLM accept one; hosted APIs refuse it,
    #: which is learned like any rejected field), or `none` (Ollama, Anthropic, Gemini).
    grammar_support: ClassVar[GrammarSupport] = "none"
    #: How the stream is framed: server-sent events or newline-delimited JSON.
    framing: ClassVar[str] = "sse"
    #: Whether the wire format cannot work without a model name.
    requires_model: ClassVar[bool] = False
    #: Whether `LLMRequest.native` tools are forwarded (the OpenAI chat API); others refuse such requests.
    native_tools: ClassVar[bool] = False
    #: Whether the conversation is sent as one rendered prompt (a chat format applies); may be set per
    #: instance before `__init__` runs (Ollama switches to `/api/generate` when a chat format is configured).
    raw_prompt: bool = False

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        prompts: PromptLoader | None = None,
        retry: RetryPolicy | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.endpoint = endpoint.resolved()
        self.retry = retry or RetryPolicy()
        self._prompts = prompts
        # The lean client sends to plain-HTTP servers no proxy covers (a local llama.cpp, vLLM, Ollama) at about
        # half the CPU of requests; anything else it hands to a requests session (`lean.LeanSession`).
        self._session: Session = session or LeanSession()
        #: Request fields the server turned out to reject (learned from a 400, kept for later calls).
        self.quirks: set[str] = set()
        self.place = Place(
            provider=self.name,
            url=redact_url(self.endpoint.base_url),
            model=self.endpoint.model,
            key_hint=self.endpoint.key_hint,
            has_key=bool(self.endpoint.api_key),
        )
        self.chat_format: ChatFormat | None = None
        #: Whether the last prompt this provider rendered itself ended inside `<think>` (None: the server renders).
        self.opens_reasoning: bool | None = None
        if self.raw_prompt:
            self.chat_format = chat_format(self.endpoint.chat_format or DEFAULT_CHAT_FORMAT)

    def pool(self, size: int) -> None:
        """Keep up to `size` connections to the server for reuse (`mylm serve` relays many calls at once; the
        default suits one agent's calls in turn)."""
        self._session.close()
        self._session = LeanSession(pool_maxsize=size)

    @classmethod
    def claims(cls, base_url: str) -> bool:
        """Whether `base_url` unambiguously belongs to this provider (to infer the provider from a URL)."""
        return False

    @classmethod
    def normalise_base_url(cls, base_url: str) -> str:
        """The base URL without a pasted route or trailing slashes."""
        return strip_route(base_url, cls.route_suffixes)

    # ------------------------------------------------------------------------------------- for subclasses

    @abstractmethod
    def build_call(self, request: LLMRequest) -> HTTPCall:
        """The HTTP request for `request`, honouring the learned `quirks`."""

    @abstractmethod
    def new_decoder(self) -> Decoder:
        """A fresh decoder for one call."""

    @abstractmethod
    def models_call(self) -> HTTPCall:
        """The request that lists the server's models."""

    @abstractmethod
    def parse_models(self, document: Any) -> list[str]:
        """Model names from the answer to `models_call`."""

    def prepare(self, request: LLMRequest, guard: CallGuard) -> LLMRequest:
        """Work done once per call before sending, under its deadline (llama.cpp renders its prompt)."""
        return request

    def adapt(self, failure: Failure) -> str | None:
        """A quirk to learn from a 400 (then the call is sent again without the blamed field), or None."""
        if "no_stop" not in self.quirks and failure.blames("stop", "stop_sequences", "stopSequences"):
            return "no_stop"
        if "no_grammar" not in self.quirks and failure.blames("grammar", "grammar_lazy", "grammar_triggers"):
            return "no_grammar"
        return None

    def grammar_fields(self, request: LLMRequest) -> dict[str, Any]:
        """The body fields that make the server follow `request.constraint`; empty where it cannot, unless the
        user insisted, which is then an error."""
        constraint = request.constraint
        if constraint is None or not self._can_constrain(constraint):
            return {}
        return self.grammar_body(constraint)

    def _can_constrain(self, constraint: Constraint) -> bool:
        """Whether a grammar can be sent; raises if it cannot and the user insisted."""
        if self.grammar_support != "none" and "no_grammar" not in self.quirks:
            return True
        if constraint.required:
            refused = "no_grammar" in self.quirks
            why = "it refused one" if refused else f"the {self.name} API has no grammar field"
            raise UnsupportedConstraintError(
                f"--constrain grammar: {self.place.url} cannot sample under a grammar ({why}); "
                "use --constrain auto or off, or a llama.cpp or vLLM server"
            )
        return False

    def grammar_body(self, constraint: Constraint) -> dict[str, Any]:
        """The wire form of a grammar for this provider (llama.cpp's `grammar` field unless overridden)."""
        return {"grammar": encoded_grammar(constraint.grammar)}

    def stops(self, request: LLMRequest) -> list[str]:
        """Stop strings to send: the request's, then the chat format's end-of-turn markers, within the API's
        `max_stops` and `blank_stops` rules."""
        if "no_stop" in self.quirks:
            return []
        extra = self.chat_format.stops if self.chat_format is not None else ()
        chosen: list[str] = []
        for stop in (*request.stop, *extra):
            if stop and stop not in chosen and (stop.strip() or self.blank_stops):
                chosen.append(stop)
        return chosen[: self.max_stops]

    def prompt(self, messages: tuple[Message, ...]) -> str:
        """The conversation rendered through the chat format (raw-prompt providers)."""
        if self._prompts is None:
            from ..prompts import PromptLoader

            self._prompts = PromptLoader.default()
        rendered = render_prompt(self._prompts, self.chat_format or chat_format(DEFAULT_CHAT_FORMAT), messages)
        self.opens_reasoning = prompt_opens_reasoning(rendered)
        return rendered

    def max_tokens(self, request: LLMRequest) -> int:
        """The output cap for this call (always sent: some servers default to unlimited)."""
        return request.max_tokens or self.endpoint.max_tokens

    def json_call(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> HTTPCall:
        """A POST of `body` as compact UTF-8 JSON (a `RawJSON` value is put in as the JSON text it is)."""
        data = compact_json(body).encode("utf-8")
        return HTTPCall("POST", url, {"Content-Type": "application/json", **headers}, data)

    # ------------------------------------------------------------------------------------------ the engine

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Stream one completion (see `mylm.llm.LLM`)."""
        guard = CallGuard(request.deadline, request.cancel, self.place)
        try:
            if self.requires_model and not self.endpoint.model:
                raise self._missing_model(guard)
            if request.native is not None and not self.native_tools:
                raise native_refused(self.name)
            yield from self._attempts(request, guard)
        finally:
            guard.close()

    def _attempts(self, request: LLMRequest, guard: CallGuard) -> Iterator[LLMChunk]:
        attempt = 0
        while True:
            produced = False
            try:
                if request.constraint is not None:
                    self._can_constrain(request.constraint)  # fails before sending when it cannot be honoured
                # prepare() may itself ask the server (llama.cpp renders its template), so it is retried too.
                call = self.build_call(self.prepare(request, guard))
                with closing(self._attempt(call, guard)) as chunks:
                    for chunk in chunks:
                        produced = produced or not isinstance(chunk, FinishChunk)
                        yield chunk
                return
            except StatusFailure as status:
                quirk = self.adapt(status.failure) if status.failure.status in (400, 422) else None
                if quirk is not None and quirk not in self.quirks:
                    _log.info("%s rejected a field (%s); sending again without it", self.place.url, quirk)
                    self.quirks.add(quirk)
                    continue
                error: LLMError = self._status_error(status.failure, guard)
            except LLMError as failed:
                error = failed
            if produced:
                raise error  # the consumer has part of the answer already: never send it twice
            delay = self.retry.delay(error, attempt, guard.remaining())
            _log.info("retrying %s in %.2f s: %s", self.place.url, delay, error.message)
            attempt += 1
            guard.sleep(delay)

    def _attempt(self, call: HTTPCall, guard: CallGuard) -> Generator[LLMChunk, None, None]:
        idle = self.endpoint.read_timeout
        response = send(
            self._session, call, guard, connect_timeout=self.endpoint.connect_timeout, read_timeout=idle
        )
        reusable = False  # read to its end, or closed early by the consumer: the connection may be kept
        try:
            if response.status_code >= 300:
                body = read_all(response, guard, idle=idle, limit=MAX_ERROR_BYTES)
                raise StatusFailure(
                    parse_failure(response.status_code, body, response.headers, secret=self.endpoint.api_key)
                )
            decoder = self.new_decoder()
            kind = response.headers.get("content-type", "").lower()
            if "text/html" in kind:
                error = StreamError(
                    f"{self.place.url} answered with a web page, not a model stream; check the base URL "
                    "(--base-url / MYLM_BASE_URL) and the provider (--provider)"
                )
                error.retryable = False
                raise error
            if self.framing == "sse" and kind.startswith("application/json"):
                body = read_all(response, guard, idle=idle, limit=MAX_RESPONSE_BYTES)
                yield from decoder.whole(_json_document(body, self.place))
            else:
                # The cap is on the decoded text (in _decode); the bytes are bounded only against a runaway
                # stream.
                wire = max(MAX_RESPONSE_BYTES, _WIRE_BYTES_PER_CHAR * self.endpoint.max_response_chars)
                try:
                    yield from self._decode(iter_body(response, guard, idle=idle, limit=wire), decoder)
                except ConnectionBroke:
                    # A server that drops the connection right after its finish (no [DONE], no final chunk)
                    # has still given a whole answer.
                    if not decoder.complete_at_eof():
                        raise
                if not decoder.complete_at_eof():
                    raise StreamError(
                        f"the stream from {self.place.url} ended before the answer was complete: the server "
                        "closed it without saying why (its log may; a prompt too long for its context is a "
                        "common cause)"
                    )
            yield decoder.finish()
            reusable = True
        except GeneratorExit:
            reusable = True
            raise
        finally:
            if reusable:
                release(response, guard)
            else:
                response.close()
            guard.detach()

    def _decode(self, body: Iterator[bytes], decoder: Decoder) -> Iterator[LLMChunk]:
        """Chunks from the body, a read at a time: the text of all the events one read brought is one chunk.

        A fast server (a batching vLLM, a loopback one) puts hundreds of events in one read; passing them on
        one by one would cost the parser, the events, redaction and the terminal once per token. A slow server
        brings one event per read, so each token still shows the moment it arrives.
        """
        lines = LineSplitter()
        sse = SSEReader() if self.framing == "sse" else None
        # End-of-turn markers of the chat format are cut here: the agent knows only its own stops.
        cutter = StopCutter(self.chat_format.stops) if self.chat_format else None
        cap, size = self.endpoint.max_response_chars, 0
        # A decoder that reads a read's SSE text itself (the OpenAI decoder's runs of plain text events), else
        # lines, then events, then `feed_all`.
        text_fed = getattr(decoder, "feed_text", None) if sse is not None else None
        # A decoder that can stop after the text events a read begins with (`feed_text(..., lead=True)`, which
        # says how much of the text it read) passes them on before it reads the rest: a consumer that stops
        # there (the agent, once the call it reads is complete) spares the finish, usage and [DONE] events'
        # decoding, a third of a short reply's. Not with a chat format's stops: one cut there ends the stream
        # at once, and the events after it must have been read (their usage) as before.
        lead = text_fed is not None and cutter is None and getattr(decoder, "reads_lead", False)
        ended = False
        while not ended:
            data = next(body, None)
            ended = data is None
            rest: str | None = None  # the read's text not read yet (`lead`)
            while True:
                chunks: list[LLMChunk] = []
                try:
                    if text_fed is not None and sse is not None:
                        text = rest if rest is not None else lines.close_text() if data is None else \
                            lines.feed_text(data)
                        rest = None
                        if text is not None and lead and not ended:
                            used = text_fed(text, sse, chunks, lead=True)
                            rest = text[used:] or None
                        elif text is not None:
                            text_fed(text, sse, chunks)
                        if ended and not decoder.done:
                            decoder.feed_all(sse.close(), chunks)
                    else:
                        batch = lines.close() if data is None else lines.feed(data)
                        items: list[Any] = sse.feed(batch) if sse is not None else list(iter_ndjson(batch))
                        if ended and sse is not None:
                            items += sse.close()
                        decoder.feed_all(items, chunks)
                except BaseException:
                    yield from _coalesced(chunks)  # what came before a mid-stream error is still the answer's
                    raise
                if rest is None:
                    break
                for chunk in _coalesced(chunks):  # the text events: no cutter here (`lead`)
                    if isinstance(chunk, (TextChunk, ReasoningChunk)):
                        size += len(chunk.text)
                        if size > cap:
                            raise _too_long(self.place, cap)
                    yield chunk
            for chunk in _coalesced(chunks):
                if isinstance(chunk, (TextChunk, ReasoningChunk)):
                    size += len(chunk.text)
                    if size > cap:
                        raise _too_long(self.place, cap)
                if cutter is None or not isinstance(chunk, TextChunk):
                    yield chunk
                    continue
                text = cutter.feed(chunk.text)
                if text:
                    yield TextChunk(text)
                if cutter.hit is not None:
                    decoder.reason, decoder.stop_sequence, decoder.done = "stop", cutter.hit, True
                    return
            if decoder.done:
                break
            lines.check()
        if cutter is not None:
            rest = cutter.flush()
            if rest:
                yield TextChunk(rest)

    # ------------------------------------------------------------------------------------------- failures

    def _status_error(self, failure: Failure, guard: CallGuard | None) -> HTTPStatusError:
        models = None
        if (
            failure.status == 404
            and guard is not None
            and "model" in (failure.message + failure.code).lower()
        ):
            models = self._models_quietly(guard)
        return to_error(failure, self.place, models=models)

    def _models_quietly(self, guard: CallGuard) -> list[str] | None:
        try:
            return self.list_models(deadline=_budget(guard))
        except LLMError:
            return None

    def _missing_model(self, guard: CallGuard) -> ConfigError:
        models = self._models_quietly(guard)
        listed = f"; the server has: {', '.join(models[:20])}" if models else ""
        return ConfigError(f"{self.name} needs a model name: set --model or MYLM_MODEL{listed}")

    # --------------------------------------------------------------------------------------------- models

    def list_models(self, *, deadline: float | None = None) -> list[str]:
        """The model names the server offers."""
        guard = CallGuard(deadline, None, self.place)
        try:
            idle = self.endpoint.read_timeout
            response = send(
                self._session,
                self.models_call(),
                guard,
                connect_timeout=self.endpoint.connect_timeout,
                read_timeout=idle,
            )
            try:
                body = read_all(response, guard, idle=idle, limit=MAX_RESPONSE_BYTES)
            finally:
                response.close()
            if response.status_code >= 300:
                failure = parse_failure(
                    response.status_code, body, response.headers, secret=self.endpoint.api_key
                )
                raise to_error(failure, self.place)
            document = _json_document(body, self.place)
            try:
                return self.parse_models(document)
            except (TypeError, AttributeError, KeyError, ValueError):
                # `{"data": 5}`: JSON, but not a list of models; each parser assumes the documented shape.
                error = StreamError(
                    f"{self.place.url} answered the model list with JSON of another shape: {body[:80]!r}"
                )
                error.retryable = False
                raise error from None
        finally:
            guard.close()


#: SSE framing costs about 40 bytes a token (~10 a character); 32 leaves room for the most verbose servers.
_WIRE_BYTES_PER_CHAR = 32


def _too_long(place: Place, cap: int) -> StreamError:
    error = StreamError(
        f"the reply from {place.url} grew past {cap:,} characters of text; stopped reading (raise "
        "max_response_chars in the config file if a reply this long is expected)"
    )
    error.retryable = False
    return error


def _budget(guard: CallGuard) -> float:
    import time

    return time.monotonic() + max(0.0, min(_LIST_BUDGET, guard.remaining()))


def _json_document(body: bytes, place: Place) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested past json's depth limit (a hostile server)
        error = StreamError(f"{place.url} answered with something that is not JSON: {body[:80]!r}")
        error.retryable = False
        raise error from None


def bearer(endpoint: Endpoint) -> dict[str, str]:
    """The `Authorization: Bearer` header when a key is set."""
    return {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
