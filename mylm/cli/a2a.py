"""`mylm a2a`: serve mylm's agent to other agents over the Agent2Agent protocol (JSON-RPC over HTTP)."""

from __future__ import annotations

from typing import Any

import click

from .common import EXIT_OK, endpoint_options, handles_errors, verbose_option
from .delegating import compose, require, run_options
from .listening import listener, listening_options, shown_address
from .tracing import otel_option

#: The variable the client key may come from (a flag's value is visible in `ps`).
KEY_ENV = "MYLM_A2A_KEY"


@click.command()
@endpoint_options
@listening_options(8766, KEY_ENV)
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another Host name clients may use (repeatable) [loopback names, and --host].")
@click.option("--url", "public_url", metavar="URL",
              help="The URL clients reach the server at, for the Agent Card [http://HOST:PORT/].")
@run_options("Run what the approval policy would ask about (else the task asks the client: input-required).")
@otel_option
@click.option("--no-save", is_flag=True, help="Do not save conversations as sessions.")
@verbose_option
@click.pass_context
@handles_errors
def a2a(ctx: click.Context, /, **options: Any) -> None:
    """Serve mylm's agent over A2A: other agents send it tasks (JSON-RPC, streaming, 1.0 and 0.3 clients).

    \b
    Agent Card at /.well-known/agent-card.json; JSON-RPC at /. A task runs the agent in the
    server's directory (or metadata `workspace`, inside --allow-root), commands sandboxed; each
    iteration and tool call is a status update, the answer an artifact. A call the approval policy
    would ask about puts the task in input-required: reply yes, always, or no. A contextId
    continues its conversation (saved as a session). CancelTask stops the run and its command.
    The model is chosen exactly as for `mylm ask` (-m, --base-url, profiles).

    \b
    Examples:
      mylm a2a                                   http://127.0.0.1:8766/
      MYLM_A2A_KEY=s3cret mylm a2a --host 0.0.0.0 --allow-host box.lan
    Exit codes: 0 stopped (Ctrl-C), 1 error, 2 usage.
    """
    require("a2a", "a2a", "a2a")
    from ..serve.server import run

    host, key, sock = listener(options, KEY_ENV, "run tasks here")
    composed = compose(ctx, options, "a2a", secrets=(key,) if key else ())
    url = options["public_url"] or f"http://{shown_address(sock)}/"
    hosts = (*((host,) if host not in ("0.0.0.0", "::") else ()), *options["allow_hosts"])
    from ..delegate.a2a import build_app

    app = build_app(composed.service, url=url, key=key, hosts=tuple(h.lower() for h in hosts))
    click.echo(f"mylm a2a: A2A server on {url} (Agent Card at {url.rstrip('/')}/.well-known/agent-card.json; "
               "Ctrl-C stops)", err=True)
    try:
        run(app, sock, drain=5.0)
    except KeyboardInterrupt:
        pass
    finally:
        if composed.telemetry is not None:
            composed.telemetry.shutdown()
    click.echo("mylm a2a: stopped", err=True)
    ctx.exit(EXIT_OK)
