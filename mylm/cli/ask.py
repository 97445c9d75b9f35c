"""`mylm ask`: one task, answered on stdout; everything else on stderr; the conversation saved as a session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..core.words import counted
from .common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_ITERATIONS,
    EXIT_OK,
    EXIT_TIMEOUT,
    configure_logging,
    endpoint_options,
    exit_codes_help,
    from_outside,
    handles_errors,
    make_redactor,
    read_piped_stdin,
    run_options,
    settings_from,
    timeout_hint,
    verbose_option,
)
from .record import Recorder, inherit_model, resume_option, session_to_resume
from .tracing import otel_option

if TYPE_CHECKING:
    from ..config import Settings
    from ..core.redact import Redactor
    from ..core.types import RunResult


@click.command(epilog=exit_codes_help())
@click.argument("prompt", nargs=-1)
@endpoint_options
@run_options
@resume_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per event per line on stdout.")
@click.option("--no-stream", is_flag=True, help="Show each reply once it is complete instead of as it arrives.")
@otel_option
@verbose_option
@click.pass_context
@handles_errors
def ask(ctx: click.Context, /, prompt: tuple[str, ...], **options: Any) -> None:
    """Ask the agent to do PROMPT; piped stdin is added as context.

    The answer goes to stdout; thoughts, tool calls and their output go to stderr. Tools that change
    things ask first (from the terminal, even when stdin is piped); without a terminal they are refused
    unless --yes is given. Every run is saved as a session: --continue (or --session ID) carries on from
    it with the whole conversation.

    \b
    Examples:
      mylm ask "how many Python files are here?"
      git diff | mylm ask "review this"
      mylm ask -m work --json "list the TODOs" | jq .
      mylm ask --continue "and now fix the first one"
    """
    from .runner import build_agent, make_approver, make_printer, session_tools
    from .tracing import make_tracer, run_traced

    words = tuple(from_outside(word, "the prompt") for word in prompt)
    piped = read_piped_stdin()
    text = _prompt_text(words, piped)
    if not text:
        raise click.UsageError('no prompt given: mylm ask "what to do"')
    resume = session_to_resume(options["continue_last"], options["session_id"])
    settings = settings_from(inherit_model(options, resume))
    redactor = make_redactor(settings)
    configure_logging(options["verbose"], redactor)
    history = resume.history if resume is not None else ()
    tracer = make_tracer(settings, redactor, options["otel_endpoint"], "ask")
    with session_tools(settings) as tools:
        agent = build_agent(ctx, settings, make_approver(ctx, settings, redactor), tools)
        printer = make_printer(
            redactor, as_json=options["as_json"], verbose=options["verbose"] > 0, stream=not options["no_stream"]
        )
        # Titled with what was asked, not with the piped context that precedes it in the prompt.
        title = " ".join(words).strip() or piped.strip()
        recorder = Recorder.start(command="ask", settings=settings, redactor=redactor, resume=resume,
                                  save=not options["no_save"], title=title)
        recorder.prompt(text)
        try:
            exchange = run_traced(tracer, agent, text, history, printer.handle, finish=printer.finish)
        finally:
            if tracer is not None:
                tracer.close()
    recorder.exchange(exchange)
    recorder.close()
    if exchange.output_error is not None:
        from .root import OutputError

        saved = "the conversation is saved: `mylm ask --continue` resumes it" if recorder.id else ""
        raise OutputError(exchange.output_error, saved=saved)
    result = exchange.result
    if options["as_json"]:
        printer.emit(_summary(result, recorder.id))  # type: ignore[union-attr]
    _report_ending(result, recorder.id, redactor, settings)
    ctx.exit(exit_code(result))


def _prompt_text(words: tuple[str, ...], piped: str) -> str:
    prompt = " ".join(words).strip()
    piped = piped.strip("\n")
    if piped and prompt:
        return f"{piped}\n\n{prompt}"
    return piped or prompt


def _report_ending(result: RunResult, session: str | None, redactor: Redactor, settings: Settings) -> None:
    from .display import for_terminal

    reason = result.stop_reason.value
    if result.error is not None and reason == "timeout":
        message = for_terminal(redactor.redact(str(result.error)))
        click.echo(f"mylm: error: {message}; raise it with {timeout_hint(settings)}", err=True)
    elif result.error is not None and reason == "error":
        click.echo(f"mylm: error: {for_terminal(redactor.redact(str(result.error)))}", err=True)
    elif reason == "cancelled":
        resume = " (the conversation is saved: `mylm ask --continue` resumes it)" if session else ""
        click.echo(f"mylm: interrupted{resume}", err=True)
    elif reason == "max_iterations":
        used = counted(result.iterations_used, "iteration")
        click.echo(f"mylm: stopped after {used} (--max-iterations)", err=True)
    elif reason == "repeated_call":
        click.echo(f"mylm: stopped: {for_terminal(redactor.redact(str(result.error)))}", err=True)
    elif reason == "max_tokens":
        click.echo(
            f"mylm: warning: the answer was cut off at the output limit of {settings.max_tokens} tokens; raise it "
            "with --max-tokens (or max_tokens in the config file, or MYLM_MAX_TOKENS)",
            err=True,
        )


def _summary(result: RunResult, session: str | None) -> dict[str, Any]:
    return {
        "type": "run_end",
        "stop_reason": result.stop_reason.value,
        "iterations_used": result.iterations_used,
        "timed_out": result.timed_out,
        "final_text": result.final_text,
        "model_calls": result.model_calls,
        "usage": result.reported_usage(),
        "error": str(result.error) if result.error is not None else None,
        "session": session,
    }


def exit_code(result: RunResult) -> int:
    """The exit code for how a run ended (a cut-off answer is still an answer: 0, with a warning)."""
    reason = result.stop_reason.value
    if reason in ("final_answer", "done_tool", "max_tokens"):
        return EXIT_OK
    if reason == "max_iterations":
        return EXIT_ITERATIONS
    if reason == "timeout":
        return EXIT_TIMEOUT
    if reason == "cancelled":
        return EXIT_INTERRUPTED
    return result.error.exit_code if result.error is not None else EXIT_ERROR

