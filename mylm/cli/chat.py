"""`mylm chat`: a conversation at a prompt with line editing; Ctrl-C stops a reply, not the conversation."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..core.words import counted
from .common import (
    configure_logging,
    endpoint_options,
    handles_errors,
    isatty,
    make_redactor,
    run_options,
    settings_from,
    timeout_hint,
    verbose_option,
)
from .record import Recorder, inherit_model, resume_option, session_to_resume
from .tracing import otel_option


@click.command()
@endpoint_options
@run_options
@resume_option
@click.option("--no-stream", is_flag=True, help="Show each reply once it is complete instead of as it arrives.")
@otel_option
@verbose_option
@click.pass_context
@handles_errors
def chat(ctx: click.Context, /, **options: Any) -> None:
    """Talk with the agent over several turns; every turn can use tools.

    Line editing and history work as in a shell. Ctrl-C stops the current reply or tool and returns
    to the prompt (the partial turn is kept, marked as interrupted); Ctrl-C again or Ctrl-D leaves.
    Commands: /help, /reset, /tools, /save [FILE], /exit. The conversation is saved as a session
    (resume it with `mylm chat --continue` or `--session ID`).
    """
    from .display import for_terminal
    from .endpoint import endpoint_in_use
    from .repl import ChatState, enable_line_editing, repl
    from .runner import build_agent, make_approver, make_printer, session_tools
    from .tracing import make_tracer

    resume = session_to_resume(options["continue_last"], options["session_id"])
    settings = settings_from(inherit_model(options, resume))
    redactor = make_redactor(settings)
    configure_logging(options["verbose"], redactor)
    tracer = make_tracer(settings, redactor, options["otel_endpoint"], "chat")
    with session_tools(settings) as tools:
        agent = build_agent(ctx, settings, make_approver(ctx, settings, redactor, scope="this session"), tools)
        recorder = Recorder.start(command="chat", settings=settings, redactor=redactor, resume=resume,
                                  save=not options["no_save"])
        state = ChatState(
            agent=agent,
            recorder=recorder,
            redactor=redactor,
            history=resume.history if resume is not None else (),
            timeout_hint=f"raise it with {timeout_hint(settings)}",
            printer_factory=lambda: make_printer(
                redactor, verbose=options["verbose"] > 0, stream=not options["no_stream"]
            ),
            tracer=tracer,
        )
        interactive = isatty(sys.stdin)
        reconfigure = getattr(sys.stdin, "reconfigure", None)
        if reconfigure is not None:
            # Undecodable input bytes arrive as lone surrogates, replaced (and said once) line by line.
            reconfigure(errors="surrogateescape")
        if interactive:
            enable_line_editing(redactor)
        where = endpoint_in_use(settings).describe()
        if settings.profile:
            where = f"profile {settings.profile}: {where}"
        click.echo(for_terminal(f"mylm chat with {where}. /help for commands, Ctrl-D to leave."), err=True)
        if resume is not None:
            click.echo(f"Resumed session {resume.id} ({counted(len(resume.history), 'message')}).", err=True)
        try:
            code = repl(state, prompt="> " if interactive else "")
        finally:
            recorder.close()
            if tracer is not None:
                tracer.close()
    ctx.exit(code)
