"""The listening side of mylm's HTTP servers (`mylm serve`, `mylm a2a`): where they listen, and the rule that off
loopback a client key is required."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .common import EXIT_ERROR, EXIT_USAGE, fail, from_outside

F = TypeVar("F", bound=Callable[..., Any])


def listening_options(default_port: int, key_env: str) -> Callable[[F], F]:
    """`--host` (loopback by default), `--port` and `--client-key` (also from `key_env`)."""

    def decorate(function: F) -> F:
        for option in reversed((
            click.option("--host", default="127.0.0.1", show_default=True,
                         help="Address to listen on; anything but a loopback address requires --client-key."),
            click.option("--port", type=click.IntRange(0, 65535), default=default_port, show_default=True,
                         help="Port to listen on (0: any free port)."),
            click.option("--client-key", envvar=key_env, metavar="KEY",
                         help=f"The key clients must send (Authorization: Bearer, or x-api-key) [env: {key_env}]."),
        )):
            function = option(function)
        return function

    return decorate


def listener(options: dict[str, Any], key_env: str, what: str) -> tuple[str, str | None, socket.socket]:
    """The host, the client key and a socket listening on `--host:--port`; a usage error off loopback without a
    key (anyone who can reach the address could `what`), one line when the address cannot be bound."""
    from ..serve.server import is_loopback, listen

    host = from_outside(options["host"], "--host")
    key = options["client_key"]
    key = from_outside(key, "--client-key") if key else None
    if not is_loopback(host) and not key:
        fail(f"--host {host} is not a loopback address: anyone who can reach it could {what}, so set "
             f"a key clients must send with --client-key or {key_env}", EXIT_USAGE)
    try:
        sock = listen(host, options["port"])
    except OSError as error:
        fail(f"cannot listen on {host}:{options['port']}: {error.strerror or error}", EXIT_ERROR)
    return host, key, sock


def shown_address(sock: socket.socket) -> str:
    """`host:port` of a listening socket, an IPv6 host in brackets."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
