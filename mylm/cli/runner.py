"""Running the agent for `ask` and `chat`: the model, the tools, the agent, and one exchange Ctrl-C can stop."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from .common import before_log_lines, isatty, prompts_origin, same_file, same_terminal, use_color, warn
from .signals import handling

if TYPE_CHECKING:
    from ..agent.loop import Agent, PermissionHook
    from ..approval import ApprovalPolicy
    from ..config import Settings
    from ..core.redact import Redactor
    from ..core.types import Event, Message, RunResult
    from ..llm import LLM
    from ..models.registry import ModelInfo
    from ..prompts import PromptLoader
    from ..sandbox import Sandbox
    from ..tools import ToolSettings
    from ..tools.base import Tool
    from .approve import Approver
    from .display import EventPrinter, JsonPrinter

#: Names a JSON script file that replaces the model endpoint (a testing aid: see the README, "Testing your own scripts against the CLI").
SCRIPTED_LLM_ENV = "MYLM_SCRIPTED_LLM"


@contextmanager
def session_tools(settings: Settings) -> Iterator[list[Tool]]:
    """The tools `ask`, `chat` and `mylm tools` give the model: the one place to change them.

    The builtin tools are confined to the current directory; tools from the MCP servers in `[mcp]` are added,
    and those servers live until the block ends.
    """
    from ..sandbox import protect_process
    from ..tools import builtin_tools
    from ..tools.procs import become_subreaper

    # Adopt orphaned descendants, so a command's double-forked daemon is still found and stopped (T4).
    become_subreaper()
    # Commands must not read this process's environment (API keys, DATABASE_URL) from /proc (issue 10).
    protect_process()
    configured = tool_settings(settings)
    tools = builtin_tools(
        workspace=Path.cwd(),
        memory_path=configured.memory_path,
        memory=configured.memory,
        command_timeout=configured.command_timeout,
        env_passthrough=configured.env,
        sandbox=command_sandbox(settings, configured.memory_path),
    )
    servers = settings.extra.get("mcp")
    if not servers:
        yield tools
        return
    import time

    from ..tools import open_mcp_servers

    # A server that never answers `initialize` must not hold a `--timeout 8` run for its startup_timeout.
    with open_mcp_servers(servers, deadline=time.monotonic() + settings.timeout) as mcp:
        yield [*tools, *mcp.tools]


def tool_settings(settings: Settings) -> ToolSettings:
    """The `[tools]` table of the config file, checked (a malformed one is a ConfigError naming its line)."""
    from ..config import config_path, section_error
    from ..core.errors import ConfigError
    from ..tools import ToolSettings

    try:
        return ToolSettings.from_config(dict(settings.extra.get("tools", {}) or {}))
    except ConfigError as error:
        raise section_error(config_path(), "tools", error) from None


def approval_policy(settings: Settings) -> ApprovalPolicy:
    """The approval policy from `--yes` and the `[tools.approval]` table (a malformed one is a ConfigError)."""
    from ..approval import ApprovalPolicy
    from ..config import config_path, section_error
    from ..core.errors import ConfigError
    from ..core.paths import config_dir

    section = (settings.extra.get("tools", {}) or {}).get("approval", {}) or {}
    try:
        return ApprovalPolicy.from_config(
            section, workspace=Path.cwd(), yes=settings.yes, config_dir=config_dir()
        )
    except ConfigError as error:
        raise section_error(config_path(), "tools.approval", error) from None


def command_sandbox(settings: Settings, memory_path: Path | None = None) -> Sandbox:
    """The sandbox for this run's commands, from the `sandbox`, `sandbox_network` and `sandbox_unix_sockets`
    settings; mylm's own config and data directories are never readable from it."""
    return sandbox_for(settings.sandbox, settings.sandbox_network, memory_path,
                       unix_sockets=settings.sandbox_unix_sockets)


def sandbox_for(setting: str, network: bool, memory_path: Path | None = None, *,
                unix_sockets: bool = False) -> Sandbox:
    """The sandbox for a `sandbox` setting ("auto" or "off"), `sandbox_network` and `sandbox_unix_sockets`;
    mylm's own config and data directories are never readable from it."""
    from ..config import config_path
    from ..core.paths import config_dir, data_dir
    from ..sandbox import Mode, detect

    private = [config_dir(), data_dir(), config_path(), *([memory_path] if memory_path else [])]
    mode: Mode = "off" if setting == "off" else "auto"
    return detect(mode, network=network, private=private, unix_sockets=unix_sockets)


def warn_about(sandbox: Sandbox) -> None:
    """Say, once per run, when commands run unconfined (off) or every command will ask (none available)."""
    if sandbox.backend == "off":
        warn("the sandbox is off (sandbox = off or --sandbox off): commands run unconfined, with your access")
    elif not sandbox.confines:
        warn("no sandbox is available here (no Landlock, no bubblewrap): commands would run unconfined, so "
             "every command asks")


def make_llm(ctx: click.Context, settings: Settings, loader: PromptLoader) -> LLM:
    """The model: injected through click's obj (embedding, tests), a `$MYLM_SCRIPTED_LLM` script, or the endpoint."""
    injected = ctx.obj or {}
    if "llm" in injected:
        return injected["llm"]  # type: ignore[no-any-return]
    script = os.environ.get(SCRIPTED_LLM_ENV)
    if script:
        from .scripted import load_script

        return load_script(Path(script))
    try:
        endpoint = make_endpoint(settings)
    except ImportError as error:
        from ..core.errors import MylmError

        raise MylmError(f"this installation of mylm has no HTTP providers ({error})") from None
    return endpoint_llm(endpoint, loader, suggest_local=nothing_configured(settings))


def endpoint_llm(endpoint: Any, loader: PromptLoader, *, suggest_local: bool) -> LLM:
    """The model for an endpoint from `make_endpoint`: the one path from settings to a model, for `ask`, `chat`,
    `serve` and each `batch` task (which rebuilds it from plain data, possibly on a cluster worker).

    `suggest_local` (the user named no endpoint) adds the in-process model to a local Ollama's "cannot reach"."""
    from ..providers import create_llm

    llm = create_llm(endpoint, prompts=loader)
    if suggest_local and endpoint.provider != "local":
        return _SuggestLocal(llm)
    return llm


def nothing_configured(settings: Settings) -> bool:
    """Whether the user named no endpoint at all (no provider, URL or model from any source)."""
    return settings.provider is None and settings.model is None and settings.sources.get("base_url") == "default"


def make_endpoint(settings: Settings) -> Any:
    """The `mylm.providers.Endpoint` the settings describe (ImportError if the providers are not installed).

    With nothing configured, a model running in-process is the default when the `local` extra is installed (the
    cached model, or one line saying how to fetch one); without the extra, a local Ollama is.
    """
    from ..providers import Endpoint
    from ..providers.local_engine import engine_available

    provider = settings.provider
    if provider is None and nothing_configured(settings) and engine_available():
        provider = "local"
    options = dict(settings.options or {})
    if provider == "local" and settings.context_tokens is not None:
        options.setdefault("n_ctx", settings.context_tokens)
    return Endpoint(
        provider=provider,
        base_url=settings.base_url,
        model=settings.model,
        api_key=settings.api_key,
        api_key_source=settings.api_key_source,
        chat_format=settings.chat_format or _preferred_format(settings),
        max_tokens=settings.max_tokens,
        options=options,
        max_response_chars=settings.max_response_chars,
    )


def _preferred_format(settings: Settings) -> str | None:
    """For the raw-completion route, the registry's chat format for the model (else the route's default)."""
    if settings.provider != "openai-completions":
        return None
    info = known_model(settings)
    return info.chat_format if info is not None else None


class _SuggestLocal:
    """The default endpoint (a local Ollama) with the other way out added to its "cannot reach" error."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    def stream(self, request: Any) -> Iterator[Any]:
        from .._version import install_command
        from ..core.errors import EndpointUnreachableError
        from ..models.cache import SUGGESTED

        try:
            yield from self.llm.stream(request)
        except EndpointUnreachableError as error:
            hint = f"; or run a model inside mylm: {install_command('local')} && mylm models pull {SUGGESTED}"
            unreachable = EndpointUnreachableError(error.message + hint)
            unreachable.retryable = error.retryable
            raise unreachable from None


def model_tools(tools: list[Tool]) -> list[Tool]:
    """Every tool the model can call: `tools`, plus `read_output`, which the agent adds to page long output."""
    from ..tools.outputs import OutputCache

    listed = list(tools)
    if all(t.name != "read_output" for t in listed):
        listed.append(OutputCache().tool())
    return listed


def make_approver(
    ctx: click.Context, settings: Settings, redactor: Redactor, *, scope: str = "this run"
) -> Approver:
    """The permission hook: the approval policy from flags and user config, asking on the terminal (or on the
    terminal injected through click's obj) when the policy says to ask."""
    from .approve import Approver, open_terminal

    sandbox = command_sandbox(settings)
    warn_about(sandbox)
    policy = replace(approval_policy(settings), command_sandbox=sandbox.confines)
    terminal_factory = (ctx.obj or {}).get("terminal", open_terminal)
    return Approver(
        policy=policy,
        sandbox=sandbox,
        terminal_factory=terminal_factory,
        err=sys.stderr,
        color=use_color(sys.stderr),
        redactor=redactor,
        scope=scope,
    )


def build_agent(
    ctx: click.Context, settings: Settings, approver: PermissionHook | None, tools: list[Tool], *,
    llm: LLM | None = None, loader: PromptLoader | None = None, workspace: Path | None = None,
) -> Agent:
    """The agent for this command, from the settings; a server building one per run passes the model and
    templates it made once, and the run's workspace."""
    from ..agent.loop import Agent

    loader = loader or prompt_loader(settings)
    llm = llm or make_llm(ctx, settings, loader)
    options = agent_options(settings, ctx.params.get("tool_choice"))
    try:
        return Agent(llm, tools, prompts=loader, permission=approver, workspace=workspace,
                     **checked_for(llm, loader, options, explicit_context=settings.context_tokens is not None))
    except ValueError as error:
        from ..core.errors import ConfigError

        raise ConfigError(f"--tool-choice: {error}") from None


def agent_options(settings: Settings, tool_choice: str | None) -> dict[str, Any]:
    """The `Agent` options the settings give, as plain data: the one list for `ask`, `chat`, `serve` and each
    `batch` task (whose factory carries it to a cluster worker). The context budget is the configured one;
    `checked_for` lets an in-process model's own window replace it."""
    return {
        "max_iterations": settings.max_iterations,
        "timeout": settings.timeout,
        # A timeout nobody set follows the model's pace (a slow local model is not cut off at the default).
        "pace_timeout": settings.sources.get("timeout", "default") == "default",
        "max_tokens": settings.max_tokens,
        "constrain": settings.constrain,  # validated by the config reader
        "tool_dialect": tool_dialect(settings),
        "instructions": settings.instructions,
        "reasoning_markers": settings.reasoning_markers,
        "context_budget": context_budget(settings),
        "tool_choice": tool_choice or "auto",
        "stop_strings": getattr(known_model(settings), "stop_strings", True),
    }


def checked_for(llm: LLM, loader: PromptLoader, options: dict[str, Any], *, explicit_context: bool) -> dict[str, Any]:
    """`options` for this model: its raw-completion template checked now, and an in-process model's context."""
    chat = getattr(llm, "chat_format", None)
    if chat is not None and isinstance(getattr(chat, "template", None), str):
        loader.check([chat.template])  # a raw-completion route renders it on every call: check it now
    # An in-process model knows the context it really allocated (GGUF metadata, n_ctx): that beats the
    # registry's figure for the family, but not the user's own context_tokens.
    window = getattr(llm, "context_window", None)
    if not explicit_context and isinstance(window, int) and window > 0:
        return {**options, "context_budget": window}
    return options


def prompt_loader(settings: Settings) -> PromptLoader:
    """The templates for this run. Project templates are said out loud on every run: ignored when the project is
    not trusted, and in use when it is (they decide what the model is told, so the user should never forget)."""
    from ..prompts import PromptLoader

    loader = PromptLoader.default(settings.prompts, trusted=settings.project_trust is not None,
                                  origin=prompts_origin(settings))
    for _, directory in loader.ignored:
        warn(
            f"ignoring the templates in {directory}: this project is not trusted "
            "(review them, then `mylm prompts trust` to use them)"
        )
    if loader.project is not None:
        warn(f"using the project's templates in {loader.project} (trusted by {settings.project_trust})")
    return loader


def context_budget(settings: Settings) -> int | None:
    """The prompt tokens the model can take: `context_tokens`, else Ollama's `num_ctx` option if set, else the
    model registry's context window for the model."""
    if settings.context_tokens is not None:
        return settings.context_tokens
    num_ctx = (settings.options or {}).get("num_ctx")
    if isinstance(num_ctx, int) and num_ctx > 0:
        return num_ctx
    info = known_model(settings)
    return info.context_window if info is not None else None


def tool_dialect(settings: Settings) -> str:
    """The tool dialect the settings mean for the configured model (`auto` resolved by the model registry)."""
    from ..protocol.dialects import resolve

    info = known_model(settings) if settings.tool_dialect == "auto" else None
    return resolve(settings.tool_dialect, known=getattr(info, "tool_dialect", None))


def known_model(settings: Settings) -> ModelInfo | None:
    """What the model registry knows about the configured model."""
    from ..models.registry import lookup

    return lookup(settings.model)


def make_printer(
    redactor: Redactor, *, as_json: bool = False, verbose: bool = False, stream: bool = True
) -> EventPrinter | JsonPrinter:
    """The event printer for stdout/stderr as they are (terminal or not), with a spinner on a terminal."""
    from .display import EventPrinter, JsonPrinter, Screen

    out, err = sys.stdout, sys.stderr
    if as_json:
        return JsonPrinter(out, redactor=redactor)
    waiting = None
    if isatty(err) and os.environ.get("TERM") != "dumb":
        from .spinner import Spinner

        waiting = Spinner(err)
    screen = Screen(
        out_is_tty=isatty(out),
        same_terminal=same_terminal(out, err),
        shared_output=same_file(out, err),
        color=use_color(err),
        size=lambda: _terminal_size(err),
    )
    printer = EventPrinter(
        out, err, screen=screen, verbose=verbose, stream=stream, redactor=redactor, waiting=waiting
    )
    before_log_lines(printer.make_room)
    return printer


def _terminal_size(stream: IO[str]) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(stream.fileno())
        return size.columns, size.lines
    except (OSError, ValueError, AttributeError):
        return 80, 24


# ----------------------------------------------------------------------------------------- one exchange


@dataclass(frozen=True)
class Exchange:
    """What one prompt did to the conversation: the result, the messages it added, the conversation after it."""

    result: RunResult
    #: The messages to record (a run cut short ends with a marked assistant message).
    added: tuple[Message, ...]
    history: tuple[Message, ...]
    #: Showing an event failed (stdout closed: `mylm ask ... | head -1`); the run was stopped there.
    output_error: OSError | None = None


def run_exchange(
    agent: Agent, prompt: str, history: tuple[Message, ...], handle: Callable[[Event], None], *,
    finish: Callable[[], None] | None = None,
) -> Exchange:
    """Run one prompt, passing each event to `handle` (then calling `finish`, which ends the printer's open line);
    Ctrl-C or SIGTERM stops it and keeps the partial exchange.

    Ctrl-C usually lands inside the agent, which ends the run as cancelled. When it lands in our own code (while an
    event is printed), the run is cancelled through its stream and drained, so the partial exchange is kept either way.
    A third Ctrl-C while draining gives up on it.
    """
    from ..core.types import StopReason
    from ..sessions import INTERRUPTED, close_dangling

    stream = agent.stream(prompt, history=history)
    interrupts = 0
    output_error: OSError | None = None
    with _terminate_as_interrupt():
        try:
            while True:
                try:
                    for event in stream:
                        if output_error is None:
                            handle(event)
                    break
                except KeyboardInterrupt:
                    interrupts += 1
                    if interrupts >= 3:
                        raise
                    stream.cancel()
                except OSError as error:
                    # Nobody can see the rest: stop the run, but still return it so the caller can save it.
                    output_error = error
                    stream.cancel()
        finally:
            try:
                if finish is not None:
                    finish()
            except OSError as error:
                output_error = output_error or error
    result = stream.result
    assert result is not None
    added = list(result.history_delta)
    after = list(result.history) if result.compacted else [*history, *added]
    if result.stop_reason is StopReason.CANCELLED:
        # A reply the user cut short is marked, so the model knows its text stops there. How a failed or
        # timed-out run ended is metadata (the session's run_end record), never text: a model shown
        # "[timeout]" as its own last reply answers "[timeout]". Requests join the prompt left unanswered with
        # the next one.
        close_dangling(added, INTERRUPTED)
        close_dangling(after, INTERRUPTED)
    return Exchange(result, tuple(added), tuple(after), output_error)


_terminated = False


def terminated() -> bool:
    """Whether SIGTERM or SIGHUP arrived (the terminal closed): the conversation should end, saved."""
    return _terminated


def _raise_interrupt(signum: int, frame: Any) -> None:
    global _terminated
    _terminated = True
    raise KeyboardInterrupt


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While an exchange runs, SIGTERM and SIGHUP stop it like Ctrl-C does, so what it did is saved before exit."""
    with handling(("SIGTERM", "SIGHUP"), _raise_interrupt):
        yield
