"""`mylm acp`: serve mylm's agent to an editor over the Agent Client Protocol (newline-delimited JSON-RPC on
stdio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .common import endpoint_options, handles_errors, verbose_option
from .delegating import compose, require, run_options
from .tracing import otel_option


@click.command()
@endpoint_options
@run_options("Run what the approval policy would ask about without asking the editor.")
@otel_option
@click.option("--no-save", is_flag=True, help="Do not save sessions (the editor cannot load them back).")
@verbose_option
@click.pass_context
@handles_errors
def acp(ctx: click.Context, /, **options: Any) -> None:
    """Serve mylm's agent to an editor over ACP (Zed, JetBrains, Neovim and Emacs plugins).

    \b
    The editor starts `mylm acp` and speaks JSON-RPC on its stdin and stdout. Each session works
    in the directory the editor names (inside --allow-root, when given); the model's text, its
    reasoning and every tool call stream to the editor; calls the approval policy would ask about
    are put to you there (allow once, allow always, reject); file tools and commands go through
    the editor when it offers them. Sessions are saved and can be loaded back.
    The model is chosen exactly as for `mylm ask` (-m, --base-url, profiles).

    \b
    Zed (settings.json):
      "agent_servers": {"mylm": {"type": "custom", "command": "mylm",
                                 "args": ["acp", "-m", "local"]}}
    """
    require("acp", "acp", "acp")
    if not options["allow_roots"]:
        # The editor is the user's own: its project directory is where they want the agent to work.
        options["allow_roots"] = (Path("/"),)
    composed = compose(ctx, options, "acp")
    import asyncio

    from ..delegate.acp import serve

    try:
        asyncio.run(serve(composed.service))
    finally:
        if composed.telemetry is not None:
            composed.telemetry.shutdown()
