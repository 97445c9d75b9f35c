"""`mylm mcp`: serve mylm's agent to other agents over the Model Context Protocol (stdio, or HTTP on loopback)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .common import (
    configure_logging,
    endpoint_options,
    handles_errors,
    make_redactor,
    settings_from,
    verbose_option,
)
from .tracing import otel_option

if TYPE_CHECKING:
    from ..agent import Agent
    from ..config import Settings
    from ..delegate import RunRequest
    from ..llm import LLM
    from ..prompts import PromptLoader
    from ..sandbox import Sandbox
    from ..telemetry.observer import RunObserver

#: Where `--port` listens: loopback only, so nothing off this machine can hand mylm a task.
HOST = "127.0.0.1"


@click.command()
@endpoint_options
@click.option("--max-iterations", type=int, metavar="N", help="Model calls allowed per run (a client may ask for fewer) [10].")
@click.option("--timeout", type=float, metavar="SECONDS", help="Wall-clock budget per run (a client may ask for less) [120].")
@click.option("-y", "--yes", is_flag=True, default=None,
              help="Run what the approval policy would ask about (else it is refused, and the model told why).")
@click.option("--sandbox", type=click.Choice(["auto", "off"]), default=None,
              help="auto: confine commands with the kernel's sandbox; off: run them unconfined [auto].")
@click.option("--allow-root", "allow_roots", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A directory runs may work in (repeatable) [default: the current directory only].")
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
    try:
        import mcp as _  # noqa: F401 - only to say clearly that the extra is missing
    except ImportError:
        from .._version import install_command
        from ..errors import ConfigError

        raise ConfigError(f"mylm mcp needs the MCP SDK: {install_command('mcp')}") from None
    from ..delegate import Bounds, DelegateService, RunSessions
    from ..delegate.server import build_server
    from .runner import command_sandbox, make_llm, prompt_loader, warn_about

    settings = settings_from(options)
    redactor = make_redactor(settings)
    configure_logging(options["verbose"], redactor)
    _protect_this_process()
    loader = prompt_loader(settings)
    sandbox = command_sandbox(settings)
    warn_about(sandbox)
    agents = ServerAgents(ctx, settings, make_llm(ctx, settings, loader), loader, sandbox)
    agents.check(Path.cwd())
    from ..redact import public_url
    from .tracing import open_telemetry, trace_run

    header = {"model": settings.model, "profile": settings.profile, "base_url": public_url(settings.base_url),
              "provider": settings.provider}
    telemetry = open_telemetry(settings, redactor, options["otel_endpoint"])
    if telemetry is not None:
        # The SDK traces each request (continuing the client's trace from `_meta.traceparent`); a run nests
        # under its request.
        telemetry.install_global()

    def observe(request: RunRequest, tool: str) -> RunObserver:
        assert telemetry is not None
        return trace_run(telemetry, settings, command=f"mcp {tool}", prompt=request.prompt,
                         workspace=str(request.workspace) if request.tools else None, sandbox=sandbox.backend,
                         inherit=True)

    service = DelegateService(
        agents=agents, bounds=Bounds.create(list(options["allow_roots"]), Path.cwd()), redactor=redactor,
        max_iterations=settings.max_iterations, timeout=settings.timeout,
        sessions=None if options["no_save"] else RunSessions(redactor, header), yes=settings.yes,
        observe=observe if telemetry is not None else None,
    )
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


@dataclass(frozen=True)
class ServerAgents:
    """Builds each run's agent as `mylm ask` builds its own (same model, templates, limits, sandbox), with the
    builtin tools confined to the run's workspace and a permission hook that never asks."""

    ctx: click.Context
    settings: Settings
    llm: LLM
    loader: PromptLoader
    sandbox: Sandbox

    def __call__(self, request: RunRequest) -> Agent:
        from ..tools import ToolSettings, builtin_tools
        from .batch_agent import unattended
        from .runner import build_agent

        settings = dataclasses.replace(
            self.settings,
            max_iterations=request.max_iterations or self.settings.max_iterations,
            timeout=request.timeout or self.settings.timeout,
        )
        if not request.tools:
            return build_agent(self.ctx, settings, None, [], llm=self.llm, loader=self.loader,
                               workspace=request.workspace)
        section = self.settings.extra.get("tools", {}) or {}
        configured = ToolSettings.from_config(dict(section))
        # No memory tools and no [mcp] servers: a delegated run gets the workspace and nothing of the user's.
        tools = builtin_tools(
            workspace=request.workspace, memory=False, command_timeout=configured.command_timeout,
            env_passthrough=configured.env, sandbox=self.sandbox,
        )
        permission = unattended(section, workspace=request.workspace, yes=settings.yes,
                                confined=self.sandbox.confines)
        return build_agent(self.ctx, settings, permission, tools, llm=self.llm, loader=self.loader,
                           workspace=request.workspace)

    def check(self, workspace: Path) -> None:
        """Build one agent now, so a bad `[tools]` section or template is one line at start, not an error in
        every run."""
        from ..config import config_path, section_error
        from ..delegate import RunRequest
        from ..errors import ConfigError

        try:
            self(RunRequest("check", workspace))
        except ConfigError as error:
            raise section_error(config_path(), "tools", error) from None


def _protect_this_process() -> None:
    from ..sandbox import protect_process
    from ..tools.procs import become_subreaper

    # As for `ask`: orphaned descendants of a command are adopted, so they are found and stopped, and commands
    # cannot read this process's environment (API keys) from /proc.
    become_subreaper()
    protect_process()


async def _serve_http(server: Any, port: int) -> None:
    """Streamable HTTP on loopback; the address (with the port chosen, for 0) is said on stderr."""
    import socket

    import uvicorn

    app = server.streamable_http_app(host=HOST)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as error:
        sock.close()
        from ..errors import ConfigError

        raise ConfigError(f"--port {port}: cannot listen on {HOST}:{port}: {error.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    bound = sock.getsockname()[1]
    click.echo(f"mylm: MCP server on http://{HOST}:{bound}/mcp", err=True)
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
