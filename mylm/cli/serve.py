"""`mylm serve`: native tool calling for any model, behind the OpenAI, Anthropic and Ollama APIs."""

from __future__ import annotations

from typing import Any

import click

from .common import (
    EXIT_OK,
    EXIT_USAGE,
    configure_logging,
    endpoint_options,
    fail,
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
              help="Wall-clock budget of one request upstream, corrections included [the timeout setting when "
                   "the config sets it, else 1800].")
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
@click.option("--upstream", "upstreams", multiple=True, metavar="NAME=PROFILE|NAME=URL",
              help="Serve several upstreams, each chosen by the request's `model` (repeatable): NAME=PROFILE uses "
                   "a [profiles.PROFILE] table of the config file (PROFILE alone: the profile under its own name); "
                   "NAME=URL an OpenAI-compatible server at URL, asked for the model NAME. Without it the one "
                   "upstream serves every request, whatever model it names.")
@click.option("--max-connections-per-client", type=click.IntRange(1, 65536), default=128, show_default=True,
              help="Connections one client address may hold open at once; more are refused (429).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Server processes sharing the port. The kept responses (previous_response_id) and the "
                   "per-client connection limit are shared; --max-concurrency is divided among them. A worker "
                   "that dies is replaced.")
@otel_option
@verbose_option
@click.pass_context
@handles_errors
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Serve the configured model behind the OpenAI, Anthropic and Ollama APIs, with native tool calling.

    Clients send tools as usual (OpenAI Chat Completions or Responses, Anthropic Messages, Ollama's
    /api/chat); mylm puts them in the prompt in its own protocol, samples under a grammar of their schemas
    where the endpoint can, reads the reply with its tolerant parser, corrects unusable replies upstream, and
    answers with native tool calls. Requests without tools are passed through as plain chat. The server runs no tools itself.
    With --tools native (--provider openai) the tools are forwarded to an upstream that calls natively, and
    calls it leaves in the text are rescued as native calls.

    The upstream is chosen exactly as for `mylm ask` (profiles, --base-url, -m, --provider, ...).

    \b
    Examples:
      mylm serve --base-url http://localhost:8080/v1
      OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=unused python my_agent.py
      MYLM_SERVE_KEY=s3cret mylm serve --host 0.0.0.0
      mylm serve --tools native --provider openai --base-url http://localhost:8000/v1 -m Qwen/Qwen3-8B
      mylm serve --upstream coder=qwen15 --upstream small=http://localhost:8081/v1

    With --otel (or OTEL_EXPORTER_OTLP_ENDPOINT) each request is traced: a server span per request, continuing
    the client's traceparent, with a span per upstream model call.

    With --upstream (repeatable) one server fronts several upstreams, chosen by the request's `model`; an
    unknown model gets a 404 naming the served ones.

    Routes: POST /v1/chat/completions, /v1/responses, /v1/messages; Ollama's POST /api/chat, /api/show,
    GET /api/tags, /api/version; GET /v1/models, /health.

    With --workers N, N processes serve the one port: a follow-up's previous_response_id is found whichever
    answers it, and the limits stay the server's (docs/serve.md, "Workers").

    Exit codes: 0 stopped (Ctrl-C drains the requests in flight), 1 error, 2 usage.
    """
    import dataclasses

    from .endpoint import endpoint_in_use
    from .runner import make_llm, prompt_loader

    workers = options.get("workers", 1)
    if workers > options["max_concurrency"]:
        fail(f"--workers {workers} needs --max-concurrency of at least {workers} (each worker serves its share "
             "of it)", EXIT_USAGE)
    _host, key, sock = listener(options, KEY_ENV, "use the model")
    settings = settings_from(options)
    if options["timeout"] is not None:
        settings = dataclasses.replace(settings, timeout=options["timeout"])
    # With --upstream, each upstream's settings are resolved as for `mylm ask` from its profile or URL; the first
    # is the default (the one `/health` names first).
    chosen = {name: upstream_settings(options, name, target) for name, target in named(options["upstreams"])}
    redactor = make_redactor(settings)
    if key or chosen:
        from ..core.redact import Redactor, url_secrets

        every = [settings, *chosen.values()]
        redactor = Redactor.from_environment(extra=[key, *(s.api_key for s in every),
                                                    *(v for s in every for v in url_secrets(s.base_url))])
    configure_logging(options["verbose"], redactor)
    loader = prompt_loader(settings)
    if chosen:
        upstreams = {name: make_core(make_llm(ctx, each, loader), loader, each, options)
                     for name, each in chosen.items()}
        settings = next(iter(chosen.values()))
        core = next(iter(upstreams.values()))
        serving = "; ".join(f"{name}: {endpoint_in_use(each).describe()}" for name, each in chosen.items())
    else:
        upstreams = None
        core = make_core(make_llm(ctx, settings, loader), loader, settings, options)
        # The model named as `mylm config` and the chat banner name it (never "the default model": which one?).
        serving = endpoint_in_use(settings).describe()
    # Behind --workers each worker traces its own requests (an exporter's thread does not survive a fork).
    tracing = serve_tracer(settings, redactor, options["otel_endpoint"]) if workers == 1 else None
    app = build_app(core, settings, key, options, redactor.redact, tracing=tracing, upstreams=upstreams)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    processes = f", {workers} workers" if workers > 1 else ""
    banner = f"mylm serve: listening on http://{shown}:{bound_port}/v1, serving {serving}{processes} (Ctrl-C stops)"
    try:
        if workers == 1:
            from ..serve.server import run

            run(app, sock, ready=lambda: click.echo(banner, err=True))
        else:
            from ..serve.workers import run_workers

            def started(number: int) -> Any:
                server = app.app.state.server
                server.tracing = serve_tracer(settings, redactor, options["otel_endpoint"])
                return server.tracing.shutdown if server.tracing is not None else None

            run_workers(app, sock, workers, ready=lambda: click.echo(banner, err=True),
                        say=lambda line: click.echo(line, err=True), started=started)
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


def named(entries: tuple[str, ...]) -> list[tuple[str, str]]:
    """`--upstream` values as (model name, profile or URL); a usage error names a malformed or repeated one."""
    found: dict[str, str] = {}
    for entry in entries:
        name, sep, target = entry.partition("=")
        name, target = name.strip(), (target if sep else name).strip()
        if not name or not target:
            fail(f"--upstream {entry!r}: expected NAME=PROFILE, NAME=URL or PROFILE", EXIT_USAGE)
        if name in found:
            fail(f"--upstream: the model name {name!r} is given twice", EXIT_USAGE)
        found[name] = target
    return list(found.items())


def upstream_settings(options: dict[str, Any], name: str, target: str) -> Any:
    """The settings of the upstream served as `name`: a profile's (`target` names one), or the command's own
    with `target` as the server's URL and `name` as the model asked for."""
    import dataclasses

    if "://" in target:
        settings = settings_from({**options, "base_url": target, "model": name})
    else:
        settings = settings_from({**options, "base_url": None, "model": target})
        if settings.profile != target:
            fail(f"--upstream {name}={target}: the config file has no [profiles.{target}] table (a URL needs its "
                 "scheme, as in http://localhost:8080/v1)", EXIT_USAGE)
    if options["timeout"] is not None:
        settings = dataclasses.replace(settings, timeout=options["timeout"])
    return settings


#: Seconds one request may take upstream when neither --timeout nor the config says. Not the agent's 120: a small
#: model on a CPU reads a coding agent's 8-17k-token prompt for minutes (OpenCode's first request was cut at 120 s
#: with the 1.5B still reading), and the client, which keeps its own time, is the one to give up.
SERVE_TIMEOUT = 1800.0


def request_timeout(settings: Any, options: dict[str, Any]) -> float:
    """--timeout, else the `timeout` setting where the user set it, else `SERVE_TIMEOUT`."""
    if options["timeout"] is not None:
        return float(options["timeout"])
    return SERVE_TIMEOUT if settings.sources.get("timeout", "default") == "default" else float(settings.timeout)


def make_core(llm: Any, loader: Any, settings: Any, options: dict[str, Any]) -> Any:
    """The core serving `llm` under these settings."""
    from ..core.errors import ConfigError
    from ..serve.core import Core, CoreSettings
    from ..serve.window import ContextWindow
    from .runner import context_budget, known_model, tool_dialect

    try:
        return Core(llm, loader, CoreSettings(
            constrain=settings.constrain,
            tool_dialect=tool_dialect(settings),
            max_corrections=options["max_corrections"],
            max_tokens=settings.max_tokens,
            timeout=request_timeout(settings, options),
            stop_strings=getattr(known_model(settings), "stop_strings", True),
            tools=options.get("tools_mode", "emulate"),
        ), ContextWindow(llm, fallback=context_budget(settings)))
    except ValueError as error:
        raise ConfigError(str(error)) from None


def build_app(core: Any, settings: Any, key: str | None, options: dict[str, Any], redact: Any, *,
              tracing: Any = None, upstreams: dict[str, Any] | None = None) -> Any:
    """The ASGI application for these settings (the CLI's composition of core, config and routes): `core`
    serves every request, or `upstreams` by model name (`core` is the first)."""
    from ..serve.app import ServeConfig, create_app

    hosts = tuple(options.get("allow_hosts") or ())
    bound = options.get("host") or ""
    if bound and bound not in ("0.0.0.0", "::", ""):
        hosts = (*hosts, bound)  # the address it was told to listen on is a name its clients use
    config = ServeConfig(model=next(iter(upstreams)) if upstreams else settings.model or "mylm", client_key=key, max_body=options["max_body"],
                         max_concurrency=options["max_concurrency"], allowed_hosts=hosts,
                         allowed_origins=tuple(options.get("allow_origins") or ()),
                         max_connections_per_client=options.get("max_connections_per_client", 128))
    return create_app(core, config, redact, tracing, upstreams)
