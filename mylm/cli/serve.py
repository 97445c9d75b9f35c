"""`mylm serve`: native tool calling for any model, behind the OpenAI and Anthropic APIs."""

from __future__ import annotations

from typing import Any

import click

from .common import (
    EXIT_OK,
    configure_logging,
    endpoint_options,
    handles_errors,
    make_redactor,
    settings_from,
    verbose_option,
)
from .listening import listener, listening_options
from .tracing import otel_option

#: The variable the client key may come from (a flag's value is visible in `ps`).
KEY_ENV = "MYLM_SERVE_KEY"


@click.command()
@endpoint_options
@listening_options(8765, KEY_ENV)
@click.option("--max-corrections", type=click.IntRange(0, 10), default=2, show_default=True,
              help="Times an unusable reply (malformed call, unknown tool, invalid arguments) is corrected "
                   "upstream before its text is returned.")
@click.option("--tools", "tools_mode", type=click.Choice(["emulate", "native"]), default="emulate",
              show_default=True,
              help="emulate: the request's tools go into the prompt in mylm's protocol and calls are parsed "
                   "back (works with any model). native: tools, calls and results are forwarded to an upstream "
                   "with native tool calling (--provider openai: llama.cpp server, vLLM, Ollama's /v1, LM "
                   "Studio); calls it leaves in the text are rescued by mylm's parser.")
@click.option("--timeout", type=float, metavar="SECONDS",
              help="Wall-clock budget of one request upstream, corrections included [the timeout setting].")
@click.option("--max-body", type=click.IntRange(1024, None), default=16 * 1024 * 1024, metavar="BYTES",
              help="Largest request body accepted; larger ones get a 413 [16 MiB].")
@click.option("--max-concurrency", type=click.IntRange(1, 4096), default=128, show_default=True,
              help="Requests served upstream at once (and the upstream connections kept); more wait their turn.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="A Host name clients may use besides localhost and loopback addresses (repeatable; '*': any). "
                   "Requests naming another host are refused: a web page may have rebound its name to this "
                   "machine (DNS rebinding).")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="ORIGIN",
              help="A web origin (scheme://host[:port]) whose pages may call the server besides loopback ones "
                   "(repeatable; '*': any). Requests from other browser origins are refused.")
@click.option("--max-connections-per-client", type=click.IntRange(1, 65536), default=128, show_default=True,
              help="Connections one client address may hold open at once; more are refused (429).")
@otel_option
@verbose_option
@click.pass_context
@handles_errors
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Serve the configured model behind the OpenAI and Anthropic APIs, with native tool calling.

    Clients send tools as usual (OpenAI Chat Completions or Responses, Anthropic Messages); mylm puts them in
    the prompt in its own protocol, samples under a grammar of their schemas where the endpoint can, reads
    the reply with its tolerant parser, corrects unusable replies upstream, and answers with native tool
    calls. Requests without tools are passed through as plain chat. The server runs no tools itself.
    With --tools native (--provider openai) the tools are forwarded to an upstream that calls natively, and
    calls it leaves in the text are rescued as native calls.

    The upstream is chosen exactly as for `mylm ask` (profiles, --base-url, -m, --provider, ...).

    \b
    Examples:
      mylm serve --base-url http://localhost:8080/v1
      OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=unused python my_agent.py
      MYLM_SERVE_KEY=s3cret mylm serve --host 0.0.0.0
      mylm serve --tools native --provider openai --base-url http://localhost:8000/v1 -m Qwen/Qwen3-8B

    With --otel (or OTEL_EXPORTER_OTLP_ENDPOINT) each request is traced: a server span per request, continuing
    the client's traceparent, with a span per upstream model call.

    Routes: POST /v1/chat/completions, /v1/responses, /v1/messages; GET /v1/models, /health.
    Exit codes: 0 stopped (Ctrl-C drains the requests in flight), 1 error, 2 usage.
    """
    import dataclasses

    from .runner import known_model, make_llm, prompt_loader

    _host, key, sock = listener(options, KEY_ENV, "use the model")
    settings = settings_from(options)
    if options["timeout"] is not None:
        settings = dataclasses.replace(settings, timeout=options["timeout"])
    redactor = make_redactor(settings)
    if key:
        from ..core.redact import Redactor

        redactor = Redactor.from_environment(extra=[settings.api_key, key])
    configure_logging(options["verbose"], redactor)
    loader = prompt_loader(settings)
    llm = make_llm(ctx, settings, loader)
    tracing = serve_tracer(settings, redactor, options["otel_endpoint"])
    app = build_app(llm, loader, settings, key, options, redactor.redact,
                    stop_strings=getattr(known_model(settings), "stop_strings", True), tracing=tracing)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    from ..serve.server import run
    from .endpoint import endpoint_in_use

    # The model named as `mylm config` and the chat banner name it (never "the default model": which one?).
    serving = endpoint_in_use(settings).describe()
    banner = f"mylm serve: listening on http://{shown}:{bound_port}/v1, serving {serving} (Ctrl-C stops)"
    try:
        run(app, sock, ready=lambda: click.echo(banner, err=True))
    except KeyboardInterrupt:
        pass  # a Ctrl-C before the server's handler was in place: nothing was being served yet
    finally:
        if tracing is not None:
            tracing.shutdown()  # exports the last requests' spans
    click.echo("mylm serve: stopped", err=True)
    ctx.exit(EXIT_OK)


def serve_tracer(settings: Any, redactor: Any, endpoint: str | None) -> Any:
    """The tracer of each request, or None (nothing of OpenTelemetry imported) when no endpoint is set."""
    from .tracing import open_telemetry, system_of

    telemetry = open_telemetry(settings, redactor, endpoint)
    if telemetry is None:
        return None
    from ..telemetry.serving import ServeTracer

    return ServeTracer(telemetry, model=settings.model, system=system_of(settings))


def build_app(llm: Any, loader: Any, settings: Any, key: str | None, options: dict[str, Any], redact: Any,
              *, stop_strings: bool = True, tracing: Any = None) -> Any:
    """The ASGI application for these settings (the CLI's composition of core, config and routes)."""
    from ..core.errors import ConfigError
    from ..serve.app import ServeConfig, create_app
    from ..serve.core import Core, CoreSettings
    from ..serve.window import ContextWindow
    from .runner import context_budget, tool_dialect

    try:
        core = Core(llm, loader, CoreSettings(
            constrain=settings.constrain,
            tool_dialect=tool_dialect(settings),
            max_corrections=options["max_corrections"],
            max_tokens=settings.max_tokens,
            timeout=settings.timeout,
            stop_strings=stop_strings,
            tools=options.get("tools_mode", "emulate"),
        ), ContextWindow(llm, fallback=context_budget(settings)))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    hosts = tuple(options.get("allow_hosts") or ())
    bound = options.get("host") or ""
    if bound and bound not in ("0.0.0.0", "::", ""):
        hosts = (*hosts, bound)  # the address it was told to listen on is a name its clients use
    config = ServeConfig(model=settings.model or "mylm", client_key=key, max_body=options["max_body"],
                         max_concurrency=options["max_concurrency"], allowed_hosts=hosts,
                         allowed_origins=tuple(options.get("allow_origins") or ()),
                         max_connections_per_client=options.get("max_connections_per_client", 128))
    return create_app(core, config, redact, tracing)
