"""`mylm batch`: run every task of a JSONL file, N at once, each in a fresh workspace; resumable."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.words import counted
from .common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    configure_logging,
    endpoint_options,
    handles_errors,
    isatty,
    make_redactor,
    run_options,
    settings_from,
    timeout_hint,
    verbose_option,
    warn,
)
from .signals import handling
from .tracing import otel_option

if TYPE_CHECKING:
    from ..agent.loop import Agent
    from ..batch import BatchSummary, Task
    from ..config import Settings
    from ..core.cancel import CancelToken
    from ..telemetry.observer import RunObserver


@click.command()
@click.argument("tasks_file", metavar="TASKS.jsonl", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, metavar="RESULTS.jsonl",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Where result lines go; ids already there are skipped (resume).")
@endpoint_options
@run_options
@click.option("-j", "--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Tasks running at once.")
@click.option("--retries", type=click.IntRange(0, 100), default=1, show_default=True,
              help="Runs again a task that ended in an endpoint error, this many times.")
@click.option("--keep-workspaces", is_flag=True, help="Keep each task's workspace; its result says where.")
@click.option("--workspaces-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Where task workspaces are made [the system's temporary folder].")
@click.option("--save-sessions", is_flag=True, help="Save each task's conversation as a session.")
@click.option("--fsync", type=click.Choice(["line", "close", "never"]), default="line", show_default=True,
              help="When result lines are forced to disk.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Threads on this machine, or tasks on a Ray cluster (the ray extra).")
@click.option("--ray-address", metavar="auto|HOST:PORT", help="The Ray cluster to join [auto].")
@click.option("--json", "as_json", is_flag=True, help="Progress events as JSON lines on stdout.")
@otel_option
@verbose_option
@click.pass_context
@handles_errors
def batch(ctx: click.Context, /, tasks_file: Path, output: Path, **options: Any) -> None:
    """Run every task in TASKS.jsonl and write one result line per task to RESULTS.jsonl.

    \b
    A task line: {"id": "t1", "prompt": "...", "workspace": "dir", "max_iterations": 5, "timeout": 60}
    Each task runs in a fresh workspace: a copy of "workspace" (relative to the task file), or an empty
    temporary directory. Nothing asks: a call that would need approval is refused and the model is told
    why, unless --yes. A 429 slows the whole batch down instead of failing tasks.

    Ctrl-C stops starting tasks and cancels the running ones; finished results stay in RESULTS.jsonl, and
    the same command run again resumes (ids already there are skipped).

    \b
    Examples:
      mylm batch tasks.jsonl -o results.jsonl -m local-qwen --concurrency 8
      mylm batch tasks.jsonl -o results.jsonl --executor ray --ray-address auto -j 64

    Exit codes: 0 every task ended with an answer, 1 some task failed (error or timeout), 2 usage,
    130 interrupted.
    """
    from ..batch import Progress, ResultsFile, load_tasks, run_batch
    from ..core.cancel import CancelToken
    from ..sandbox import protect_process
    from ..tools.procs import become_subreaper
    from .batch_agent import BatchAgentFactory, SessionWriter
    from .display import for_terminal
    from .runner import SCRIPTED_LLM_ENV, sandbox_for, warn_about
    from .tracing import batch_trace, open_telemetry, trace_run

    settings = settings_from(options)
    # Adopt orphaned descendants, as `ask` does: a command's double-forked daemon is still found and stopped.
    become_subreaper()
    # Commands must not read this process's environment (API keys) from /proc, as for `ask`.
    protect_process()
    warn_about(sandbox_for(settings.sandbox, settings.sandbox_network))  # the backend; the rest is per task
    redactor = make_redactor(settings)
    configure_logging(options["verbose"], redactor)
    tasks = load_tasks(tasks_file)
    factory = BatchAgentFactory.from_settings(settings, scripted=os.environ.get(SCRIPTED_LLM_ENV) or None,
                                              tool_choice=options["tool_choice"])
    _check_templates(factory)
    _check_tool_choice(options["tool_choice"])
    sessions = SessionWriter(settings.model, settings.base_url, settings.provider, settings.api_key) \
        if options["save_sessions"] else None
    executor = None
    if options["executor"] == "ray":
        from ..batch.cluster import RayExecutor, import_ray

        import_ray()  # before anything is written: say at once that the extra is missing
        executor = RayExecutor(options["concurrency"], address=options["ray_address"] or "auto")
        executor.connect()  # what Ray prints while it starts comes before the progress line, not inside it
    elif options["ray_address"]:
        raise click.UsageError("--ray-address needs --executor ray")

    def clean(text: str) -> str:
        return for_terminal(redactor.redact(text))

    results = ResultsFile(output, fsync=options["fsync"], redactor=redactor)
    if results.dropped_bytes:
        warn(f"{output} ended in a torn line ({results.dropped_bytes} bytes, from an interrupted write); "
             "it was cut off and that task runs again")
    progress = Progress(len(tasks))
    from .batch_view import make_view

    live = isatty(sys.stderr) and os.environ.get("TERM") != "dumb"
    view = make_view(progress, as_json=options["as_json"], live=live, clean=clean)
    cancel = CancelToken()
    again = _command_line(output)
    telemetry = open_telemetry(settings, redactor, options["otel_endpoint"])
    if telemetry is not None and executor is not None:
        warn("tasks on a Ray cluster are not traced (only the batch's own span is exported)")
    try:
        with results, _stop_on_signals(cancel), batch_trace(telemetry, len(tasks)) as traced:
            observe = None
            if telemetry is not None and traced is not None:
                sandbox = sandbox_for(settings.sandbox, settings.sandbox_network).backend

                def observe(task: Task, agent: Agent) -> RunObserver:
                    assert telemetry is not None and traced is not None
                    return trace_run(telemetry, settings, command="batch", prompt=task.prompt,
                                     workspace=str(agent.workspace), sandbox=sandbox, links=[traced.link(task.id)])

            summary = run_batch(
                tasks, factory, concurrency=options["concurrency"], results=results,
                retries=options["retries"],
                keep_workspaces=options["keep_workspaces"], workspace_root=options["workspaces_dir"],
                cancel=cancel, on_event=view.handle, executor=executor, sessions=sessions, progress=progress,
                observe=observe,
            )
    except KeyboardInterrupt:
        view.abort()
        click.echo(
            f"mylm: interrupted at once; every finished result is in {output}; run `{again}` to resume",
            err=True,
        )
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)  # running tasks' threads are abandoned, not waited for
    except BaseException:
        view.abort()
        raise
    finally:
        if telemetry is not None:
            telemetry.shutdown()
    view.close(summary)
    _report_failures(summary, settings)
    if summary.interrupted:
        click.echo(
            f"mylm: interrupted: {counted(summary.done, 'result')} written to {output} this run, "
            f"{counted(summary.remaining, 'task')} not finished; run `{again}` to resume",
            err=True,
        )
        ctx.exit(EXIT_INTERRUPTED)
    ctx.exit(EXIT_ERROR if summary.failed else EXIT_OK)


def _report_failures(summary: BatchSummary, settings: Settings) -> None:
    """One line for the tasks that failed: how, that the same command runs them again, and how to give them more
    time when they timed out."""
    from collections import Counter

    from ..batch.runner import failure
    from .batch_view import tally

    kinds = Counter(how for record in summary.records if (how := failure(record)) is not None)
    if not kinds:
        return
    line = f"mylm: {counted(sum(kinds.values()), 'task')} failed ({tally(kinds)}): the same command runs them again"
    if kinds["timed out"]:
        line += f"; more time for each: {timeout_hint(settings)}, or the task's \"timeout\""
    click.echo(line, err=True)


def _command_line(output: Path) -> str:
    """The command as typed, to resume with; a generic form when not run from the console script."""
    argv = sys.argv[1:]
    if argv and argv[0] == "batch":
        return shlex.join(["mylm", *argv])
    return f"mylm batch TASKS.jsonl -o {shlex.quote(str(output))} (same options)"


def _check_templates(factory: Any) -> None:
    """Say once (not once per task) whether a project's templates are used or ignored."""
    from ..prompts import PromptLoader

    loader = PromptLoader.default(factory.prompts, trusted=factory.trusted)
    for _, directory in loader.ignored:
        warn(f"ignoring the templates in {directory}: this project is not trusted")
    if loader.project is not None:
        warn(f"using the project's templates in {loader.project}")


def _check_tool_choice(choice: str | None) -> None:
    """A tool choice no task's agent could take is a usage error now, not a failure of every task."""
    from ..constrain.select import TOOL_CHOICES

    if choice is None or choice in TOOL_CHOICES:
        return
    from ..tools import builtin_tools

    names = [tool.name for tool in builtin_tools(workspace=Path.cwd(), memory=False)]
    if choice not in names:
        raise click.BadParameter(
            f"{choice!r} is not auto, none, required or a task's tool ({', '.join(names)})", param_hint="--tool-choice"
        )


@contextmanager
def _stop_on_signals(cancel: CancelToken) -> Iterator[None]:
    """The first Ctrl-C (or SIGTERM) stops the batch cleanly; a second quits at once (results stay whole)."""

    def handler(signum: int, frame: Any) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt
        cancel.cancel()

    with handling(("SIGINT", "SIGTERM"), handler):
        yield
