"""Running the application on uvicorn: the listening socket, the loopback rule, and a draining shutdown.

uvicorn is the ASGI server llama-cpp-python's own server and FastAPI run on: HTTP/1.1 with keep-alive, the
httptools parser where it is installed (else h11), a bounded request head either way, and a graceful shutdown on SIGINT/SIGTERM (stop accepting, let the
requests in flight finish, then cancel what is left after `drain` seconds).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import ipaddress
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .guard import MAX_HEAD_BYTES

#: Seconds Ctrl-C lets the requests in flight finish before they are cancelled.
DRAIN_SECONDS = 30.0


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback address (so only this machine can connect)."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]) for info in found}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (port 0: the OS chooses); OSError if it cannot be bound."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def http_parser() -> str:
    """The HTTP/1.1 parser uvicorn runs on: httptools where it is installed (the `serve` extra), else h11."""
    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"


def server_for(app: Any, sock: socket.socket, *, drain: float = DRAIN_SECONDS, http: str | None = None) -> Any:
    """A uvicorn server for `app` on `sock`; an app behind a `guard.Guard` gets its deadlines, connection limits
    and the head bound (MAX_HEAD_BYTES) in the HTTP protocol too. `http`: "httptools" or "h11" (default: the
    best installed, `http_parser`)."""
    import uvicorn

    from .guard import Guard, guarded_protocol

    # httptools where installed: its C parser and its direct response writes cost the server about a tenth less
    # CPU per streamed reply than h11's pure-Python state machine (scripts/bench_serve.py, docs/serve.md). It
    # gathers a header of any length, so the guarded class bounds the head itself (`guard._head_bound`).
    http = http or http_parser()
    protocol: Any = (guarded_protocol(app.guarding, app.refused, app.connections, http=http)
                     if isinstance(app, Guard) else http)

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=max(1, round(drain)),
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        # uvicorn's own server header names uvicorn; a client needs neither.
        server_header=False,
        # The client address is the socket's: no X-Forwarded-For is believed (nothing here depends on it).
        proxy_headers=False,
        date_header=True,
        # The loop is uvloop where it is installed (the `serve` extra): about a tenth less CPU per request than
        # asyncio's (scripts/bench_serve.py, docs/serve.md).
        http=protocol,
        loop="auto",
    )
    return uvicorn.Server(config)


def run(app: Any, sock: socket.socket, *, drain: float = DRAIN_SECONDS, ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then drain (blocks; in the main thread it handles the signals). `ready` is
    called once a signal would stop the server (the CLI prints its banner then)."""
    server = server_for(app, sock, drain=drain)
    # Everything made so far (the modules, the application, the grammar) lives as long as the process: frozen out
    # of the collector's reach, a full collection no longer walks its ~50,000 objects again and again; those
    # walks were a tenth of the server's CPU under load (scripts/bench_serve.py, docs/serve.md).
    gc.freeze()
    with _stopped_by_signals(server):
        if ready is not None:
            ready()
        server.run(sockets=[sock])


@contextlib.contextmanager
def _stopped_by_signals(server: Any) -> Iterator[None]:
    """SIGINT and SIGTERM stop `server` from now on, not only once its event loop runs.

    uvicorn installs its handler inside the loop: a Ctrl-C in the tens of milliseconds before (right after the
    banner, the user's first) raised KeyboardInterrupt wherever it landed, inside asyncio's set-up (a "coroutine
    'Server.serve' was never awaited" warning on stderr) or inside uvloop's signal callback, which logs it and
    carries on. With the server's own handler installed first, that Ctrl-C asks the server to stop, as later ones
    do; uvicorn puts this handler back when it is done, so what it re-raises lands here too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, server.handle_exit) for number in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class Background:
    """The server in a thread of its own (tests, embedding): `with Background(app) as url: ...`."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, drain: float = 5.0,
                 http: str | None = None) -> None:
        self.sock = listen(host, port)
        self.server = server_for(app, self.sock, drain=drain, http=http)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="mylm-serve")

    @property
    def url(self) -> str:
        """The server's root URL."""
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop accepting, drain, and wait for the thread."""
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()
