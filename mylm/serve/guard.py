"""Who may talk to a server mylm runs on this machine: the client key, and the Host and Origin rules that keep a
web page (DNS rebinding, a cross-site POST) from reaching a loopback server through the user's browser.

One implementation for every HTTP face of mylm: `client_key` is what `mylm serve` compares its key with, and
`Guard` wraps an ASGI app (`mylm a2a`) with all three rules. (`mylm mcp --port` has the same rules from the MCP
SDK's own transport security.)"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

#: The names a loopback server answers to (with any port): nothing else can be the Host of a request that
#: really came from this machine, unless the user says so.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def client_key(headers: Mapping[str, str]) -> str:
    """The key a request sent: `x-api-key`, else `Authorization: Bearer KEY` ("" when none)."""
    sent = headers.get("x-api-key") or ""
    authorization = headers.get("authorization") or ""
    if not sent and authorization[:7].lower() == "bearer ":
        sent = authorization[7:].strip()
    return sent


def key_matches(sent: str, key: str) -> bool:
    """Whether `sent` is `key` (compared in constant time)."""
    return bool(sent) and hmac.compare_digest(sent.encode("utf-8", "replace"), key.encode("utf-8"))


def host_name(host: str) -> str:
    """A Host header's name without its port (`[::1]:80` -> `[::1]`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware: a request must name an allowed Host, come from no Origin or an allowed one, and carry
    the key (when one is set) unless its path is public (an agent card). Refusals are JSON with one line."""

    def __init__(self, app: Any, *, hosts: Iterable[str] = LOOPBACK_NAMES, key: str | None = None,
                 public: Iterable[str] = ()) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)
        self.key = key
        self.public = frozenset(public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self.refusal(headers, scope.get("path", "/"))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        body = json.dumps({"error": {"message": message, "status": status}}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, headers: Mapping[str, str], path: str) -> tuple[int, str] | None:
        """(status, why) when the request is refused, else None."""
        host = host_name(headers.get("host", ""))
        if host not in self.hosts:
            return 421, (f"the Host {host or '(none)'!r} is not one this server answers to (a web page may be "
                         "trying to reach it through your browser)")
        origin = headers.get("origin")
        if origin is not None and host_name(origin.split("://", 1)[-1].split("/", 1)[0]) not in self.hosts:
            return 403, f"requests from the web origin {origin!r} are refused"
        if self.key is not None and path not in self.public and not key_matches(client_key(headers), self.key):
            why = "a wrong key was sent" if client_key(headers) else "no key was sent"
            return 401, f"invalid client key ({why}): send the server's key as `Authorization: Bearer KEY` or `x-api-key`"
        return None
