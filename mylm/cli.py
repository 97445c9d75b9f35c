"""The `mylm` command line: the composition root, and the only module that prints or exits."""

from __future__ import annotations

import functools
import os
import stat
import sys
from typing import IO, TYPE_CHECKING, Any, Callable, TypeVar

import click

if TYPE_CHECKING:
    from .config import Settings
    from .tools.base import Tool
    from .types import Permission, RunResult, ToolCall

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes (also in the README): 0 answer, 1 error, 2 usage, 3 iteration limit, 4 timeout, 130 interrupted.
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_ITERATIONS, EXIT_TIMEOUT, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


def _fail(message: str, code: int) -> None:
    click.echo(f"mylm: error: {message}", err=True)
    sys.exit(code)


def handles_errors(command: F) -> F:
    """Turn mylm's errors and Ctrl-C into one readable line and a distinct exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .errors import MylmError

        try:
            return command(*args, **kwargs)
        except MylmError as error:
            _fail(str(error), error.exit_code)
        except KeyboardInterrupt:
            click.echo("mylm: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            # The reader went away (`mylm ask ... | head`): not an error worth a message.
            sys.stderr.close()
            sys.exit(EXIT_ERROR)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mylm", prog_name="mylm")
def cli() -> None:
    """mylm: turn any plain-text LLM endpoint into an agent that reasons, runs tools and answers.

    Configure the endpoint with --base-url/--model or MYLM_BASE_URL/MYLM_MODEL (OPENAI_BASE_URL and
    OPENAI_API_KEY also work); with nothing set, mylm talks to a local Ollama at http://localhost:11434.
    """


def _endpoint_options(command: F) -> F:
    options = [
        click.option("--base-url", metavar="URL", help="Endpoint URL [env: MYLM_BASE_URL, OPENAI_BASE_URL]."),
        click.option("-m", "--model", help="Model name [env: MYLM_MODEL]."),
        click.option("--api-key", metavar="KEY", help="API key [env: MYLM_API_KEY, OPENAI_API_KEY]."),
        click.option("--provider", metavar="NAME", help="Wire format, e.g. openai, ollama [env: MYLM_PROVIDER]."),
        click.option("--prompts", "prompts_dir", metavar="DIR", help="Directory of templates overriding the defaults."),
        click.option("-v", "--verbose", count=True, help="Log the loop's progress to stderr (-vv for debug)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command()
@click.argument("prompt", nargs=-1)
@_endpoint_options
@click.option("--max-iterations", type=int, metavar="N", help="Model calls allowed before a summary answer [10].")
@click.option("--timeout", type=float, metavar="SECONDS", help="Wall-clock budget for the whole run [120].")
@click.option("-y", "--yes", is_flag=True, default=None, help="Run every tool call without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per event per line on stdout.")
@click.pass_context
@handles_errors
def ask(
    ctx: click.Context,
    prompt: tuple[str, ...],
    base_url: str | None,
    model: str | None,
    api_key: str | None,
    provider: str | None,
    prompts_dir: str | None,
    verbose: int,
    max_iterations: int | None,
    timeout: float | None,
    yes: bool | None,
    as_json: bool,
) -> None:
    """Ask the agent to do PROMPT; piped stdin is added as context.

    The answer goes to stdout; thoughts, tool calls and their output go to stderr. Tools that change
    things ask first (from the terminal, even when stdin is piped); without a terminal they are refused
    unless --yes is given. Exit codes: 0 answer, 1 error, 2 usage, 3 iteration limit, 4 timeout,
    130 interrupted.
    """
    from .config import load_settings

    text = _prompt_text(prompt, _read_piped_stdin())
    if not text:
        raise click.UsageError("no prompt given: mylm ask \"what to do\"")
    flags = dict(base_url=base_url, model=model, api_key=api_key, provider=provider, prompts=prompts_dir,
                 max_iterations=max_iterations, timeout=timeout, yes=yes)
    settings = load_settings(flags)
    _configure_logging(verbose)
    result = _run_ask(ctx, settings, text, as_json=as_json, verbose=verbose > 0)
    ctx.exit(_exit_code(result))


def _run_ask(ctx: click.Context, settings: Settings, text: str, *, as_json: bool, verbose: bool) -> RunResult:
    from .agent import Agent
    from .display import EventPrinter, event_json
    from .prompts import PromptLoader

    loader = PromptLoader.default(settings.prompts)
    injected = ctx.obj or {}
    # Callers embedding the CLI (and its tests) may inject the model and the terminal through click's obj.
    llm = injected["llm"] if "llm" in injected else _make_llm(settings, loader)
    tools = _default_tools()
    out = sys.stdout
    err = sys.stderr
    color = _use_color(err)
    terminal_factory = injected.get("terminal", open_terminal)
    approver = Approver(yes=settings.yes, terminal_factory=terminal_factory, err=err, color=color)
    agent = Agent(
        llm,
        tools,
        max_iterations=settings.max_iterations,
        timeout=settings.timeout,
        prompts=loader,
        max_tokens=settings.max_tokens,
        permission=approver,
        instructions=settings.instructions,
    )
    printer = EventPrinter(out, err, out_is_tty=_isatty(out), color=color, verbose=verbose)
    stream = agent.stream(text)
    for event in stream:
        if as_json:
            out.write(event_json(event) + "\n")
            out.flush()
        else:
            printer.handle(event)
    printer.finish()
    result = stream.result
    assert result is not None
    if as_json:
        out.write(event_json(_summary(result)) + "\n")
    if result.error is not None and result.stop_reason.value in ("error", "timeout"):
        click.echo(f"mylm: error: {result.error}", err=True)
    elif result.stop_reason.value == "cancelled":
        click.echo("mylm: interrupted", err=True)
    elif result.stop_reason.value == "max_iterations":
        click.echo(f"mylm: stopped after {result.iterations_used} iterations (--max-iterations)", err=True)
    return result


def _summary(result: RunResult) -> dict[str, Any]:
    usage = result.usage
    return {
        "type": "run_end",
        "stop_reason": result.stop_reason.value,
        "iterations_used": result.iterations_used,
        "timed_out": result.timed_out,
        "final_text": result.final_text,
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
        "error": str(result.error) if result.error is not None else None,
    }


def _exit_code(result: RunResult) -> int:
    reason = result.stop_reason.value
    if reason in ("final_answer", "done_tool"):
        return EXIT_OK
    if reason == "max_iterations":
        return EXIT_ITERATIONS
    if reason == "timeout":
        return EXIT_TIMEOUT
    if reason == "cancelled":
        return EXIT_INTERRUPTED
    return result.error.exit_code if result.error is not None else EXIT_ERROR


def _make_llm(settings: Settings, loader: Any) -> Any:
    from .providers import Endpoint, create_llm

    endpoint = Endpoint(
        provider=settings.provider,
        base_url=settings.base_url,
        model=settings.model,
        api_key=settings.api_key,
        api_key_source=settings.api_key_source,
        chat_format=settings.chat_format,
        max_tokens=settings.max_tokens,
        options=dict(settings.extra.get("options", {}) or {}),
    )
    return create_llm(endpoint, prompts=loader)


def _default_tools() -> list[Tool]:
    from pathlib import Path

    from .tools.shell import shell_tool

    return [shell_tool(Path.cwd())]


# ------------------------------------------------------------------------------------------- approvals


class Terminal:
    """The user's terminal, opened directly so approvals work even when stdin is a pipe."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def ask(self, question: str) -> str:
        """Show `question` and return the line typed (EOF counts as an empty answer)."""
        self._stream.write(question)
        self._stream.flush()
        return self._stream.readline().strip()


def open_terminal() -> Terminal | None:
    """The controlling terminal, or None when there is none (pipes, CI, a detached process)."""
    try:
        return Terminal(open("/dev/tty", "r+", encoding="utf-8", errors="replace"))  # noqa: SIM115
    except OSError:
        return None


class Approver:
    """The CLI's permission hook: reads run freely; anything else asks the user, or is refused without a terminal."""

    def __init__(
        self, *, yes: bool, terminal_factory: Callable[[], Terminal | None], err: IO[str], color: bool
    ) -> None:
        self.yes = yes
        self._terminal_factory = terminal_factory
        self._terminal: Terminal | None = None
        self._opened = False
        self._always: set[str] = set()
        self._err = err
        self._color = color

    def __call__(self, call: ToolCall, tool: Tool) -> Permission:
        from .types import Permission

        if tool.risk == "read" or self.yes or tool.name in self._always:
            return Permission.allow()
        terminal = self._open()
        if terminal is None:
            click.echo(
                f"mylm: refused {call.name}: there is no terminal to ask for approval (use --yes to allow tools)",
                err=True,
            )
            return Permission.deny(
                "the user cannot be asked for approval in this session, so the call was refused. "
                "Answer with what you know, or say which command you would need to run."
            )
        return self._ask(terminal, call)

    def _open(self) -> Terminal | None:
        if not self._opened:
            self._terminal, self._opened = self._terminal_factory(), True
        return self._terminal

    def _ask(self, terminal: Terminal, call: ToolCall) -> Permission:
        from .display import for_terminal
        from .types import Permission

        lines = [f"mylm wants to run {call.name}:"]
        lines += [f"  {key} = {for_terminal(repr(value))}" for key, value in call.arguments.items()]
        self._err.flush()
        answer = terminal.ask("\n".join(lines) + f"\nAllow? [y]es / [n]o / [a]lways {call.name} this run: ")
        choice = answer.lower()[:1]
        if choice == "y":
            return Permission.allow()
        if choice == "a":
            self._always.add(call.name)
            return Permission.allow()
        reason = terminal.ask("Reason to give the model (optional): ")
        return Permission.deny(f"the user declined it{': ' + reason if reason else ''}")


# -------------------------------------------------------------------------------------------- helpers


def _read_piped_stdin() -> str:
    """Piped or redirected stdin, to add as context; never blocks on a terminal."""
    stream = sys.stdin
    if stream is None:
        return ""
    try:
        if stream.isatty():
            return ""
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
            return ""
    except (OSError, ValueError, AttributeError):
        # Not a real file (a test runner's buffer): read it if it is there.
        pass
    return stream.read()


def _prompt_text(words: tuple[str, ...], piped: str) -> str:
    prompt = " ".join(words).strip()
    piped = piped.strip("\n")
    if piped and prompt:
        return f"{piped}\n\n{prompt}"
    return piped or prompt


def _configure_logging(verbose: int) -> None:
    if not verbose:
        return
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    root = logging.getLogger("mylm")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _use_color(stream: IO[str]) -> bool:
    return _isatty(stream) and not os.environ.get("NO_COLOR")


def main() -> None:
    """Entry point of the `mylm` console script."""
    cli(prog_name="mylm")
