"""The ASGI application: routes, the client key, limits, and every failure in the API's own error shape.

A request is checked before anything is sent upstream; a malformed one gets a 4xx in its API's shape. Upstream
failures get a 5xx (429 for a rate limit) in that shape, with the message redacted: the upstream's key never
reaches a client or a log. A bug gets a 500 in that shape too, never a traceback on the wire.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import (
    CancelledError,
    ContextOverflowError,
    HTTPStatusError,
    LLMError,
    LLMTimeoutError,
    MylmError,
    RateLimitError,
)
from . import chat, messages, models, responses
from .bridge import Backlog, produced
from .core import Core
from .http import EventStream, json_response, read_body, unless_disconnected
from .wire import Out, RequestError, load_json

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


class Server:
    """The application's state: the core, the settings, the requests in flight."""

    def __init__(self, core: Core, config: ServeConfig, redact: Callable[[str], str] = lambda s: s) -> None:
        self.core = core
        self.config = config
        self.redact = redact
        self.active = 0
        self._slots = asyncio.Semaphore(config.max_concurrency)

    # ---------------------------------------------------------------------------------------- handlers

    async def health(self, request: Request) -> Response:
        return json_response(models.health(self.config.model, self.active))

    async def list_models(self, request: Request) -> Response:
        api = messages if "anthropic-version" in request.headers else chat
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        name = self.config.model
        return json_response(models.anthropic_list(name) if api is messages else models.openai_list(name))

    async def one_model(self, request: Request) -> Response:
        api = messages if "anthropic-version" in request.headers else chat
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        name = request.path_params["name"]
        if name != self.config.model:
            return self._error(api, RequestError(f"the model {name!r} does not exist here; this server fronts "
                                                 f"{self.config.model!r}", status=404, kind="not_found_error"))
        return json_response(models.anthropic_model(name) if api is messages else models.openai_model(name))

    async def not_found(self, request: Request) -> Response:
        api = messages if request.url.path.startswith("/v1/messages") else chat
        return self._error(api, RequestError(f"no route {request.method} {request.url.path}", status=404,
                                             kind="not_found_error", code="unknown_url"))

    def generation(self, api: ModuleType) -> Callable[[Request], Any]:
        """The handler of a generation route (`api` is its wire module)."""

        async def handle(request: Request) -> Response:
            try:
                return await self._generate(api, request)
            except RequestError as error:
                return self._error(api, error)
            except Exception as error:  # noqa: BLE001 - a bug must still answer in the API's shape
                logger.error("Internal error on %s: %s", request.url.path, self.redact(repr(error)))
                return self._error(api, RequestError("internal server error", status=500, kind="server_error"))

        return handle

    # ------------------------------------------------------------------------------------------ helpers

    async def _generate(self, api: ModuleType, request: Request) -> Response:
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        body = load_json(await read_body(request, self.config.max_body, self.config.body_timeout))
        parsed = api.parse(body)
        backlog = Backlog()
        items = self._items(parsed, backlog)
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
        # The first item is awaited before the headers go out, so an upstream that is down or refuses the
        # request is an HTTP error status, not a 200 with an error event.
        try:
            first = await unless_disconnected(request, items.__anext__())
        except StopAsyncIteration:
            first = None
        except asyncio.CancelledError:
            await items.aclose()
            raise
        except BaseException as error:  # noqa: BLE001 - every failure is answered in the API's shape
            await items.aclose()
            raise self._failure(error) from None
        if first is None:
            await items.aclose()
            return Response(status_code=499)
        return EventStream(self._guarded(api, api.events(parsed, _prepend(first, items), body)), more=backlog)

    async def _items(self, parsed: Any, backlog: Backlog | None = None) -> AsyncGenerator[Out, None]:
        async with self._slots:
            self.active += 1
            try:
                async for item in produced(lambda cancel: self.core.run(parsed, cancel), backlog=backlog):
                    yield item
            finally:
                self.active -= 1

    async def _guarded(self, api: ModuleType, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream's events; a failure once it has begun becomes the API's error event."""
        try:
            async for event in events:
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as error:  # noqa: BLE001 - every failure is answered in the API's shape
            yield api.stream_error(self._failure(error))
        finally:
            await events.aclose()  # type: ignore[attr-defined]

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
        sent = request.headers.get("x-api-key") or ""
        authorization = request.headers.get("authorization") or ""
        if authorization[:7].lower() == "bearer ":
            sent = sent or authorization[7:].strip()
        if sent and hmac.compare_digest(sent.encode("utf-8", "replace"), key.encode("utf-8")):
            return None
        why = "a wrong key was sent" if sent else "no key was sent"
        return self._error(api, RequestError(
            f"invalid client key ({why}): send the server's key as `Authorization: Bearer KEY` or `x-api-key`",
            status=401, kind="authentication_error", code="invalid_api_key"))

    def _error(self, api: ModuleType, error: RequestError) -> Response:
        return json_response(api.error_body(error), status=error.status)


async def collected_from(items: AsyncGenerator[Out, None]) -> list[Out]:
    """Every item of `items` (closed even when cancelled, so its upstream call is cancelled too)."""
    try:
        return [item async for item in items]
    finally:
        await items.aclose()


async def _prepend(first: Out, rest: AsyncGenerator[Out, None]) -> AsyncGenerator[Out, None]:
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()


def create_app(core: Core, config: ServeConfig, redact: Callable[[str], str] = lambda s: s) -> Starlette:
    """The ASGI application serving `core`."""
    server = Server(core, config, redact)
    pool = getattr(core.llm, "pool", None)
    if callable(pool):
        pool(config.max_concurrency)  # one upstream connection pool, as large as the requests served at once
    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.list_models, methods=["GET"]),
        Route("/v1/models/{name:path}", server.one_model, methods=["GET"]),
        Route("/v1/chat/completions", server.generation(chat), methods=["POST"]),
        Route("/v1/responses", server.generation(responses), methods=["POST"]),
        Route("/v1/messages", server.generation(messages), methods=["POST"]),
        Route("/{rest:path}", server.not_found,
              methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
    ]
    app = Starlette(routes=routes)
    app.state.server = server
    return app


__all__ = ["DEFAULT_MAX_BODY", "ServeConfig", "Server", "create_app"]
