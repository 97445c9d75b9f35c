"""The ASGI application: routes, the client key, limits, and every failure in the API's own error shape.

A request is checked before anything is sent upstream; a malformed one gets a 4xx in its API's shape. Upstream
failures get a 5xx (429 for a rate limit) in that shape, with the message redacted: the upstream's key never
reaches a client or a log. A bug gets a 500 in that shape too, never a traceback on the wire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.errors import (
    CancelledError,
    ContextOverflowError,
    HTTPStatusError,
    LLMError,
    LLMTimeoutError,
    MylmError,
    RateLimitError,
    RequestError,
)
from ..telemetry.observer import RequestObserver, RequestTracing
from . import chat, messages, models, ollama, responses
from .bridge import Backlog, produced
from .core import Core, prompt_tokens
from .guard import Guard, Guarding, client_key, key_matches
from .http import (
    EventStream,
    json_response,
    read_body,
    settled_unless_disconnected,
    unless_disconnected,
    watching,
)
from .stored import ResponseStore, StoredResponses
from .wire import CallOut, ChatMessage, Finished, Out, load_json, said, text

logger = logging.getLogger("mylm.serve")

#: Bodies beyond this many bytes get a 413 (a long agent conversation with its tool list is a few MB).
DEFAULT_MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class ServeConfig:
    """The server's own settings (the upstream's are in the core)."""

    #: The upstream model's name, as `/v1/models` lists it.
    model: str
    #: The key clients must send (`Authorization: Bearer`, or `x-api-key`); None: no key is asked for.
    client_key: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    #: Seconds a client has to send its whole body.
    body_timeout: float = 30.0
    #: Requests served upstream at once; more wait their turn.
    max_concurrency: int = 128
    #: Host names accepted besides loopback ones (`*`: any), and web origins (see `guard.py`).
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    #: Seconds a client has to send a request's head.
    head_timeout: float = 10.0
    #: Connections one client address may hold open at once.
    max_connections_per_client: int = 128
    #: Seconds a stream's headers wait for the first output (an upstream refusal within it is an HTTP status).
    status_wait: float = 0.5
    #: Seconds of silence after which a stream sends a keep-alive (an SSE comment, or Anthropic's `ping`).
    keepalive: float = 10.0

    def guarding(self) -> Guarding:
        """The desktop-safety rules these settings ask for (`guard.py`)."""
        # The protocol's body deadline is a floor a little beyond the application's own, which answers first
        # with a 408 in the API's shape.
        return Guarding(hosts=self.allowed_hosts, origins=self.allowed_origins, head_timeout=self.head_timeout,
                        body_timeout=self.body_timeout + 5, max_connections=self.max_connections_per_client)


class Server:
    """The application's state: the core, the settings, the requests in flight."""

    def __init__(self, core: Core, config: ServeConfig, redact: Callable[[str], str] = lambda s: s,
                 tracing: RequestTracing | None = None, upstreams: Mapping[str, Core] | None = None,
                 stored: ResponseStore | None = None) -> None:
        self.core = core
        #: The upstreams by the model name a request chooses them with (`--upstream`); empty: `core` serves every
        #: request, whatever model it names.
        self.upstreams = dict(upstreams or {})
        self.config = config
        self.redact = redact
        #: Traces each generation request (None: tracing is off, and nothing of OpenTelemetry is loaded).
        self.tracing = tracing
        self.active = 0
        #: The last Responses answers, for `previous_response_id` (this process's memory, unless the workers of
        #: `mylm serve --workers N` share a store).
        self.stored: ResponseStore = stored if stored is not None else StoredResponses()
        #: Which of `workers` processes this is (`as_worker`); None: the server is one process.
        self.worker: int | None = None
        self.workers: int | None = None
        self._slots = asyncio.Semaphore(config.max_concurrency)

    def as_worker(self, index: int, workers: int, slots: int) -> None:
        """Make this process worker `index` (from 1) of `workers`, serving `slots` requests upstream at once (its
        share of `max_concurrency`). Called in the worker, before it serves anything."""
        self.worker, self.workers = index, workers
        self._slots = asyncio.Semaphore(slots)

    # ---------------------------------------------------------------------------------------- handlers

    @property
    def names(self) -> list[str]:
        """The model names served, as the model lists show them."""
        return list(self.upstreams) or [self.config.model]

    def core_for(self, model: str) -> Core:
        """The core serving requests for `model`: the one upstream, or the one of that name (a 404 in the API's
        shape, naming the served models, for any other)."""
        if not self.upstreams:
            return self.core
        found = self.upstreams.get(model)
        if found is None:
            served = ", ".join(repr(n) for n in self.upstreams)
            raise RequestError(f"model {model!r} not found: this server serves {served}", status=404,
                               param="model", code="model_not_found")
        return found

    async def health(self, request: Request) -> Response:
        return json_response(models.health(self.names, self.active, self.worker, self.workers))

    async def list_models(self, request: Request) -> Response:
        api = messages if "anthropic-version" in request.headers else chat
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        names = self.names
        return json_response(models.anthropic_list(names) if api is messages else models.openai_list(names))

    async def one_model(self, request: Request) -> Response:
        api = messages if "anthropic-version" in request.headers else chat
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        name = request.path_params["name"]
        if name not in self.names:
            served = ", ".join(repr(n) for n in self.names)
            return self._error(api, RequestError(f"the model {name!r} does not exist here; this server serves "
                                                 f"{served}", status=404, kind="not_found_error"))
        return json_response(models.anthropic_model(name) if api is messages else models.openai_model(name))

    async def ollama_tags(self, request: Request) -> Response:
        refused = self._refused(request, ollama)
        return refused if refused is not None else json_response(ollama.tags(self.names))

    async def ollama_version(self, request: Request) -> Response:
        return json_response({"version": ollama.VERSION})

    async def ollama_show(self, request: Request) -> Response:
        refused = self._refused(request, ollama)
        if refused is not None:
            return refused
        try:
            body = load_json(await read_body(request, self.config.max_body, self.config.body_timeout))
            # `name` is what clients before Ollama 0.5 sent.
            name = text(body.get("model") or body.get("name"), "model", allow_empty=False)
            window = self.core_for(name).window
            # Measuring the window may ask the upstream (once): not on the event loop.
            size = await asyncio.to_thread(window.size) if window is not None else None
        except RequestError as error:
            return self._error(ollama, error)
        return json_response(ollama.show(name, size))

    def token_count(self, api: ModuleType) -> Callable[[Request], Any]:
        """The handler of a route that counts a request's prompt tokens as the upstream is sent them, without
        answering it: Anthropic's `POST /v1/messages/count_tokens`, OpenAI's `POST /v1/responses/input_tokens`."""

        async def handle(request: Request) -> Response:
            refused = self._refused(request, api)
            if refused is not None:
                return refused
            try:
                body = load_json(await read_body(request, self.config.max_body, self.config.body_timeout))
                parsed = (messages.parse_count(body) if api is messages
                          else responses.parse_count(body, self.stored, self.names[0]))
                core = self.core_for(parsed.model)
                # Rendering, and counting with the upstream's tokenizer, may ask the upstream: not on the loop.
                tokens, _ = await asyncio.to_thread(prompt_tokens, core, parsed)
            except RequestError as error:
                return self._error(api, error)
            if api is messages:
                return json_response({"input_tokens": tokens})
            return json_response({"object": "response.input_tokens", "input_tokens": tokens})

        return handle

    async def not_found(self, request: Request) -> Response:
        path = request.url.path
        # The router's own routes, so the hint never names one this server does not answer.
        known = [route.path for route in request.app.routes
                 if isinstance(route, Route) and request.method in (route.methods or ()) and "{" not in route.path]
        meant = meant_route(path, known)
        # A client's base URL with one `/v1` too many or too few is the usual cause (Codex's `base_url` ending in
        # `/v1` given as a server's root: `POST /v1/v1/responses`); the route it meant says how to fix it.
        hint = f"; this server answers {request.method} {meant} (check the client's base URL)" if meant else ""
        # In the shape of the API the client speaks: the route it meant says which (Anthropic's SDK at /v1/v1/...).
        return self._error(api_of(meant or path), RequestError(
            f"no route {request.method} {path}{hint}", status=404, kind="not_found_error", code="unknown_url"))

    def generation(self, api: ModuleType, route: str) -> Callable[[Request], Any]:
        """The handler of a generation route (`api` is its wire module)."""

        async def handle(request: Request) -> Response:
            observer = self._observer(request, route)
            kind = None
            try:
                response = await self._generate(api, request, observer)
            except RequestError as error:
                response, kind = self._error(api, error), error.kind
            except Exception as error:  # noqa: BLE001 - a bug must still answer in the API's shape
                logger.error("Internal error on %s: %s", request.url.path, self.redact(repr(error)))
                response, kind = self._error(api, RequestError("internal server error", status=500,
                                                               kind="server_error")), "server_error"
            except BaseException:
                if observer is not None:
                    observer.end(499, "cancelled")
                raise
            if observer is not None and not isinstance(response, EventStream):
                status = response.status_code
                observer.end(status, kind or (str(status) if status >= 400 else None))
            return response

        return handle

    def _observer(self, request: Request, route: str) -> RequestObserver | None:
        if self.tracing is None:
            return None
        server = request.scope.get("server")
        client = request.client
        return self.tracing.request(method=request.method, route=route, path=request.url.path,
                                    headers=request.headers, scheme=request.url.scheme,
                                    server=(str(server[0]), int(server[1])) if server else None,
                                    client=client.host if client else None)

    # ------------------------------------------------------------------------------------------ helpers

    async def _generate(self, api: ModuleType, request: Request, observer: RequestObserver | None = None) -> Response:
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        body = load_json(await read_body(request, self.config.max_body, self.config.body_timeout))
        preload = getattr(api, "preload", None)
        if preload is not None and (loaded := preload(body)) is not None:
            self.core_for(text(body.get("model"), "model", allow_empty=False))
            return json_response(loaded)  # Ollama's "load the model" request: the upstream loads its own
        parsed = api.parse(body, self.stored) if api in (responses, messages) else api.parse(body)
        core = self.core_for(parsed.model)
        if observer is not None:
            observer.request(api=api.__name__.rsplit(".", 1)[-1], model=parsed.model, stream=parsed.stream,
                             tools=len(parsed.tools), max_tokens=parsed.max_tokens,
                             messages=[_message(m) for m in parsed.messages])
        backlog = Backlog()
        items = self._items(core, parsed, backlog, observer)
        if not parsed.stream:
            try:
                found = await unless_disconnected(request, collected_from(items))
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001 - every failure is answered in the API's shape
                raise self._failure(error) from None
            if found is None:
                return Response(status_code=499)  # the client went away; nobody reads this
            return json_response(api.answer(parsed, found, body))
        # The headers wait a moment for the first item, so an upstream that is down or refuses the request (which
        # it does at once) is an HTTP error status, not a 200 with an error event. No longer: a client must not
        # wait for headers while the model reads a long prompt or thinks (clients give up after a few minutes of
        # silence); from then on keep-alives hold the stream open and a failure is the API's error event.
        head = asyncio.ensure_future(items.__anext__())
        # The task that watches for the client going away while the headers wait goes on watching the stream.
        watcher = watching(request)
        try:
            return await self._stream(api, request, parsed, body, items, head, watcher, backlog, observer)
        except BaseException:
            watcher.cancel()
            raise

    async def _stream(self, api: ModuleType, request: Request, parsed: Any, body: dict[str, Any],
                      items: AsyncGenerator[Out, None], head: asyncio.Future[Out], watcher: asyncio.Future[None],
                      backlog: Backlog, observer: RequestObserver | None) -> Response:
        """The streamed answer, once its first item has come (or `status_wait` has passed); `watcher` is handed
        to the stream, and cancelled by the caller if this fails."""
        settled = await settled_unless_disconnected(request, head, self.config.status_wait, watcher)
        if settled is None:  # the client went away
            watcher.cancel()
            head.cancel()
            await asyncio.gather(head, return_exceptions=True)
            await items.aclose()
            return Response(status_code=499)
        first: Out | None = None
        if head.done():
            try:
                first = head.result()
            except StopAsyncIteration:
                watcher.cancel()
                await items.aclose()
                return Response(status_code=499)
            except asyncio.CancelledError:
                await items.aclose()
                raise
            except BaseException as error:  # noqa: BLE001 - every failure is answered in the API's shape
                await items.aclose()
                raise self._failure(error) from None
        streamed, keepalive = _streamed(api, parsed, _prepend(first, head, items), body)
        events = self._guarded(api, streamed, observer)
        # A client gone before the stream ended: the trace ends too (a no-op once the stream has ended it).
        closed = (lambda: observer.end(200, "cancelled")) if observer is not None else None
        # Ollama's stream has no opening event, so its keep-alive (an empty chunk) may come first.
        eager = api is ollama
        headers = {"Content-Type": ollama.MEDIA_TYPE} if eager else None
        return EventStream(events, headers, more=backlog, closed=closed, keepalive=keepalive,
                           interval=self.config.keepalive, eager=eager, watcher=watcher)

    async def _items(self, core: Core, parsed: Any, backlog: Backlog | None = None,
                     observer: RequestObserver | None = None) -> AsyncGenerator[Out, None]:
        async with self._slots:
            self.active += 1
            seen: list[Out] = []
            keep = bool(getattr(parsed, "keep", False) and getattr(parsed, "response_id", None))
            try:
                async for item in produced(lambda cancel: core.run(parsed, cancel, observer),
                                           backlog=backlog):
                    if observer is not None or keep:
                        seen.append(item)
                    yield item
                if keep and parsed.thread:
                    self.stored.keep_thread(parsed.response_id, parsed.messages, messages.as_sent(seen),
                                            parsed.tools)
                elif keep:
                    self.stored.put(parsed.response_id, parsed.messages, seen)
            finally:
                self.active -= 1
            if observer is not None:
                observer.answered([_answer(seen)])

    async def _guarded(self, api: ModuleType, events: AsyncIterator[bytes],
                       observer: RequestObserver | None = None) -> AsyncIterator[bytes]:
        """The stream's events; a failure once it has begun becomes the API's error event."""
        failed = None
        try:
            async for event in events:
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as error:  # noqa: BLE001 - every failure is answered in the API's shape
            failure = self._failure(error)
            failed = failure.kind
            yield api.stream_error(failure)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        if observer is not None:
            observer.end(200, failed)

    def _failure(self, error: BaseException) -> RequestError:
        """What the client is told about `error` (from the upstream, or a bug)."""
        if isinstance(error, RequestError):
            return error
        if isinstance(error, (asyncio.CancelledError, CancelledError, KeyboardInterrupt)):
            return RequestError("the request was cancelled", status=499, kind="cancelled")
        message = self.redact(str(error))
        if isinstance(error, RateLimitError):
            return RequestError(f"upstream: {message}", status=429, kind="rate_limit_error")
        if isinstance(error, ContextOverflowError):
            return RequestError(f"upstream: {message}", status=400, code="context_length_exceeded")
        if isinstance(error, HTTPStatusError) and error.status in (400, 413, 422):
            # The upstream refused what the client asked for (a limit, a field): the client's to fix.
            return RequestError(f"upstream: {message}", status=400)
        if isinstance(error, LLMTimeoutError):
            return RequestError(f"upstream: {message}", status=504, kind="timeout")
        if isinstance(error, (LLMError, MylmError)):
            return RequestError(f"upstream: {message}", status=502, kind="upstream_error")
        logger.error("Internal error: %s", self.redact(repr(error)))
        return RequestError("internal server error", status=500, kind="server_error")

    def _refused(self, request: Request, api: ModuleType) -> Response | None:
        """A 401 unless the request carries the client key (when one is set)."""
        key = self.config.client_key
        if key is None:
            return None
        sent = client_key(request.headers)
        if key_matches(sent, key):
            return None
        why = "a wrong key was sent" if sent else "no key was sent"
        return self._error(api, RequestError(
            f"invalid client key ({why}): send the server's key as `Authorization: Bearer KEY` or `x-api-key`",
            status=401, kind="authentication_error", code="invalid_api_key"))

    def _error(self, api: ModuleType, error: RequestError) -> Response:
        return json_response(api.error_body(error), status=error.status)


def _message(message: ChatMessage) -> dict[str, Any]:
    """A client's message as a trace records it (with content capture)."""
    entry: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.calls:
        entry["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in message.calls]
    if message.call_id:
        entry["tool_call_id"] = message.call_id
    return entry


def _answer(items: list[Out]) -> dict[str, Any]:
    """The answer a client got, as a trace records it (with content capture)."""
    entry: dict[str, Any] = {"role": "assistant", "content": said(items)}
    calls = [{"id": i.id, "name": i.name, "arguments": i.arguments} for i in items if isinstance(i, CallOut)]
    if calls:
        entry["tool_calls"] = calls
    finish = next((i for i in items if isinstance(i, Finished)), None)
    if finish is not None:
        entry["finish_reason"] = finish.reason
    return entry


async def collected_from(items: AsyncGenerator[Out, None]) -> list[Out]:
    """Every item of `items` (closed even when cancelled, so its upstream call is cancelled too)."""
    try:
        return [item async for item in items]
    finally:
        await items.aclose()


def _streamed(api: ModuleType, parsed: Any, items: AsyncIterator[Out],
              body: dict[str, Any]) -> tuple[AsyncIterator[bytes], bytes | Callable[[], bytes]]:
    """The API's events for `items`, and what keeps the stream alive while they are silent. Where a client times
    out on the events its SDK yields, the keep-alive is an event of the stream itself, made when it is written:
    numbered with the others on Responses (Codex), an empty delta of a content block on Messages (Claude Code)."""
    if api is responses:
        numbering = responses.Numbering(parsed, body)
        return responses.events(parsed, items, body, numbering), numbering.keepalive
    if api is messages:
        blocks = messages.Blocks()
        return messages.events(parsed, items, body, blocks), blocks.keepalive
    return api.events(parsed, items, body), (ollama.keepalive(parsed) if api is ollama else api.KEEPALIVE)


async def _prepend(first: Out | None, head: asyncio.Future[Out], rest: AsyncGenerator[Out, None]
                   ) -> AsyncGenerator[Out, None]:
    """The items: `first` if it had arrived before the headers went out, else what `head` brings, then `rest`."""
    try:
        yield first if first is not None else await head
        async for item in rest:
            yield item
    except StopAsyncIteration:
        return
    finally:
        if not head.done():
            head.cancel()
            await asyncio.gather(head, return_exceptions=True)
        await rest.aclose()


def api_of(path: str) -> ModuleType:
    """The API whose error shape a request for `path` gets when no route of it answers."""
    if path.startswith("/v1/messages"):
        return messages
    return ollama if path.startswith("/api/") else chat


def refused(path: str, status: int, message: str, kind: str) -> dict[str, Any]:
    """A request refused before routing (`guard.py`), in the error shape of the API its path belongs to."""
    body: dict[str, Any] = api_of(path).error_body(RequestError(message, status=status, kind=kind))
    return body


def meant_route(path: str, known: Sequence[str]) -> str | None:
    """The route of `known` that `path` most likely meant: one it ends with after a prefix too many
    (`/v1/v1/responses`, `/openai/v1/chat/completions`), or the same under `/v1` (`/chat/completions`); None
    where none fits."""
    trimmed = path.rstrip("/") or "/"
    if trimmed != path and trimmed in known:
        return trimmed
    longest = [route for route in known if trimmed.endswith(route) and trimmed != route]
    if longest:
        return max(longest, key=len)
    return f"/v1{trimmed}" if f"/v1{trimmed}" in known else None


class _Routed(Starlette):
    """Starlette, with the generation routes' POSTs handed straight to their handlers.

    Starlette's router and its two middlewares (errors, HTTP exceptions) wrap every `send` of a stream's events
    in two more coroutines: about a twentieth of the server's CPU per request (py-spy under
    scripts/bench_serve.py). The handlers answer every failure in the API's shape themselves and raise no
    HTTPException, so for these routes that machinery did nothing; any other request (another method, a path
    with a trailing slash, a mounted root path) goes through Starlette as before."""

    def __init__(self, routes: list[Route], direct: Mapping[str, Callable[[Request], Any]]) -> None:
        super().__init__(routes=routes)
        self.direct = dict(direct)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        handler = self.direct.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if handler is None or scope.get("root_path"):
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)


def create_app(core: Core, config: ServeConfig, redact: Callable[[str], str] = lambda s: s,
               tracing: RequestTracing | None = None, upstreams: Mapping[str, Core] | None = None,
               stored: ResponseStore | None = None) -> Guard:
    """The ASGI application serving `core` behind the desktop-safety rules (`Guard`: `server.server_for` reads
    its rules for the protocol's deadlines and limits too); `tracing` traces each generation request.
    `upstreams`, if given, are the cores by model name: a request is served by the one its `model` names (and
    `core` is one of them, the first). `stored` keeps the Responses answers (default: in this process's memory)."""
    server = Server(core, config, redact, tracing, upstreams, stored)
    for served in {id(c): c for c in (core, *(upstreams or {}).values())}.values():
        pool = getattr(served.llm, "pool", None)
        if callable(pool):
            pool(config.max_concurrency)  # one upstream connection pool, as large as the requests served at once
    generation = {path: server.generation(api, path) for path, api in (
        ("/v1/chat/completions", chat), ("/v1/responses", responses), ("/v1/messages", messages), ("/api/chat", ollama))}
    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.list_models, methods=["GET"]),
        Route("/v1/models/{name:path}", server.one_model, methods=["GET"]),
        *(Route(path, handler, methods=["POST"]) for path, handler in generation.items()),
        Route("/v1/messages/count_tokens", server.token_count(messages), methods=["POST"]),
        Route("/v1/responses/input_tokens", server.token_count(responses), methods=["POST"]),
        Route("/api/tags", server.ollama_tags, methods=["GET"]),
        Route("/api/version", server.ollama_version, methods=["GET"]),
        Route("/api/show", server.ollama_show, methods=["POST"]),
        Route("/{rest:path}", server.not_found,
              methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
    ]
    app = _Routed(routes, generation)
    app.state.server = server
    return Guard(app, config.guarding(), refused)


__all__ = ["DEFAULT_MAX_BODY", "ServeConfig", "Server", "create_app"]
