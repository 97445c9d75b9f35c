"""What `mylm mcp`, `mylm a2a` and `mylm acp` compose alike: each run's agent (built as `mylm ask` builds its
own), the delegate service from the settings, and this process's protection."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .common import configure_logging, make_redactor, settings_from

if TYPE_CHECKING:
    from ..agent.loop import Agent
    from ..config import Settings
    from ..delegate import DelegateService, RunHooks, RunRequest
    from ..llm import LLM
    from ..prompts import PromptLoader
    from ..sandbox import Sandbox
    from ..telemetry.observer import RunObserver


F = TypeVar("F", bound=Callable[..., Any])


def run_options(yes_help: str) -> Callable[[F], F]:
    """The options every delegate front end takes: its ceilings, approvals, sandbox and allowed roots."""

    def decorate(function: F) -> F:
        for option in reversed((
            click.option("--max-iterations", type=int, metavar="N",
                         help="Model calls allowed per run (a client may ask for fewer) [10]."),
            click.option("--timeout", type=float, metavar="SECONDS",
                         help="Wall-clock budget per run, a wait for an approval included (a client may ask for "
                              "less) [120]."),
            click.option("-y", "--yes", is_flag=True, default=None, help=yes_help),
            click.option("--sandbox", type=click.Choice(["auto", "off"]), default=None,
                         help="auto: confine commands with the kernel's sandbox; off: run them unconfined [auto]."),
            click.option("--allow-root", "allow_roots", multiple=True, metavar="DIR",
                         type=click.Path(exists=True, file_okay=False, path_type=Path),
                         help="A directory runs may work in (repeatable) [default: the current directory only]."),
        )):
            function = option(function)
        return function

    return decorate


@dataclass(frozen=True)
class ServerAgents:
    """Builds each run's agent as `mylm ask` builds its own (same model, templates, limits, sandbox), with the
    builtin tools confined to the run's workspace and the permission hook the run's hooks make from the approval
    policy (asking whoever the front end names, or nobody)."""

    ctx: click.Context
    settings: Settings
    llm: LLM
    loader: PromptLoader
    sandbox: Sandbox

    def __call__(self, request: RunRequest, hooks: RunHooks | None = None) -> Agent:
        from ..approval import ApprovalPolicy
        from ..core.paths import config_dir
        from ..tools import ToolSettings, builtin_tools
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
        policy = ApprovalPolicy.from_config(
            dict(section.get("approval", {}) or {}), workspace=request.workspace, yes=settings.yes,
            config_dir=config_dir(),
        )
        # Without a sandbox nothing holds a "read" to reading, so no command is auto-approved.
        policy = dataclasses.replace(policy, command_sandbox=self.sandbox.confines)
        permission = hooks.permission(policy) if hooks is not None else None
        if hooks is not None:
            tools = hooks.tools(tools)
        return build_agent(self.ctx, settings, permission, tools, llm=self.llm, loader=self.loader,
                           workspace=request.workspace)

    def check(self, workspace: Path) -> None:
        """Build one agent now, so a bad `[tools]` section or template is one line at start, not an error in
        every run."""
        from ..config import config_path, section_error
        from ..core.errors import ConfigError
        from ..delegate import RunRequest

        try:
            self(RunRequest("check", workspace))
        except ConfigError as error:
            raise section_error(config_path(), "tools", error) from None


@dataclass(frozen=True)
class Composed:
    """A front end's service, and what it must shut down."""

    service: DelegateService
    telemetry: Any
    settings: Settings


def compose(ctx: click.Context, options: dict[str, Any], command: str, secrets: tuple[str, ...] = ()) -> Composed:
    """The delegate service for `mylm COMMAND` from the settings (the model chosen exactly as for `mylm ask`),
    runs saved as sessions with `command` in their header unless `--no-save`; `secrets` (a client key) are
    redacted like the API key."""
    from ..core.redact import public_url
    from ..delegate import Bounds, DelegateService, RunSessions
    from .runner import command_sandbox, make_llm, prompt_loader, warn_about
    from .tracing import open_telemetry, trace_run

    settings = settings_from(options)
    redactor = make_redactor(settings)
    if secrets:
        from ..core.redact import Redactor

        redactor = Redactor([*redactor.secrets, *secrets])
    configure_logging(options["verbose"], redactor)
    protect_this_process()
    loader = prompt_loader(settings)
    sandbox = command_sandbox(settings)
    warn_about(sandbox)
    agents = ServerAgents(ctx, settings, make_llm(ctx, settings, loader), loader, sandbox)
    agents.check(Path.cwd())
    header = {"model": settings.model, "profile": settings.profile, "base_url": public_url(settings.base_url),
              "provider": settings.provider}
    telemetry = open_telemetry(settings, redactor, options.get("otel_endpoint"))
    if telemetry is not None:
        # The SDK traces each request where it can (continuing the client's trace); a run nests under it.
        telemetry.install_global()

    def observe(request: RunRequest, tool: str) -> RunObserver:
        assert telemetry is not None
        return trace_run(telemetry, settings, command=f"{command} {tool}", prompt=request.prompt,
                         workspace=str(request.workspace) if request.tools else None, sandbox=sandbox.backend,
                         inherit=True)

    service = DelegateService(
        agents=agents, bounds=Bounds.create(list(options.get("allow_roots", ())), Path.cwd()), redactor=redactor,
        max_iterations=settings.max_iterations, timeout=settings.timeout,
        sessions=None if options.get("no_save") else RunSessions(redactor, header, command=command),
        yes=settings.yes, observe=observe if telemetry is not None else None,
    )
    return Composed(service, telemetry, settings)


def protect_this_process() -> None:
    """As for `ask`: orphaned descendants of a command are adopted, so they are found and stopped, and commands
    cannot read this process's environment (API keys) from /proc."""
    from ..sandbox import protect_process
    from ..tools.procs import become_subreaper

    become_subreaper()
    protect_process()


def require(module: str, extra: str, command: str) -> None:
    """Say clearly, in one line, that an optional SDK is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        from ..core.errors import ConfigError

        raise ConfigError(f"mylm {command} needs its SDK: pip install 'mylm[{extra}]'")
