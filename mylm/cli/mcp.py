"""`mylm mcp`: serve mylm's agent to other agents over the Model Context Protocol (stdio, or HTTP on loopback)."""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import endpoint_options, handles_errors, verbose_option
from .delegating import compose, require, run_options
from .tracing import otel_option

#: Where `--port` listens: loopback only, so nothing off this machine can hand mylm a task.
HOST = "127.0.0.1"


@click.command()
@endpoint_options
@run_options("Run what the approval policy would ask about (else it is refused, and the model told why).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help=f"Serve streamable HTTP on {HOST}:PORT/mcp instead of stdio (0: any free port, printed).")
@otel_option
@click.option("--no-save", is_flag=True, help="Do not save runs as sessions.")
@verbose_option
@click.pass_context
@handles_errors
def mcp(ctx: click.Context, /, **options: Any) -> None:
    """Serve mylm's agent as an MCP server: other agents delegate tasks to the configured model.

    \b
    Tools: run_task(prompt, workspace?, max_iterations?, timeout?) runs the agent in a workspace
    inside --allow-root (and the client's declared roots), commands sandboxed; ask(question)
    answers without tools. Resource: mylm://sessions/{id}, a run's saved transcript.
    The model is chosen exactly as for `mylm ask` (-m, --base-url, profiles).

    \b
    Examples:
      mylm mcp                                  stdio, for an MCP client to launch
      claude mcp add mylm -- mylm mcp -m local  register it with Claude Code
      mylm mcp --port 8765 --allow-root ~/src   streamable HTTP on 127.0.0.1:8765/mcp
    """
    require("mcp", "mcp", "mcp")
    from ..delegate.server import build_server

    composed = compose(ctx, options, "mcp")
    service, telemetry = composed.service, composed.telemetry
    server = build_server(service)
    import anyio

    try:
        if options["port"] is None:
            anyio.run(server.run_stdio_async)
        else:
            anyio.run(_serve_http, server, options["port"])
    finally:
        if telemetry is not None:
            telemetry.shutdown()


async def _serve_http(server: Any, port: int) -> None:
    """Streamable HTTP on loopback; the address (with the port chosen, for 0) is said on stderr."""
    import socket

    import uvicorn

    from ..serve.guard import Guard, Guarding, guarded_protocol

    # The desktop-safety rules `mylm serve` applies (one implementation: `serve/guard.py`): loopback Host names
    # only, no foreign web origin, JSON bodies only, head and body deadlines, connections per client bounded.
    guarding = Guarding()
    app = Guard(server.streamable_http_app(host=HOST), guarding, _refused)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as error:
        sock.close()
        from ..core.errors import ConfigError

        raise ConfigError(f"--port {port}: cannot listen on {HOST}:{port}: {error.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    bound = sock.getsockname()[1]
    click.echo(f"mylm: MCP server on http://{HOST}:{bound}/mcp", err=True)
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", http=guarded_protocol(guarding, _refused))
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()


def _refused(path: str, status: int, message: str, kind: str) -> dict[str, Any]:
    """A request refused by the guard, as a JSON-RPC error (what an MCP client reads)."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message, "data": {"status": status,
                                                                                               "kind": kind}}}
