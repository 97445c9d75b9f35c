"""`mylm eval`: run the built-in tool tasks against the configured endpoint and print a scorecard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .common import (
    configure_logging,
    endpoint_options,
    handles_errors,
    make_redactor,
    settings_from,
    verbose_option,
)


@click.command(name="eval")
@endpoint_options
@click.option("--max-iterations", type=int, metavar="N", default=4, show_default=True,
              help="Model calls allowed per task.")
@click.option("--timeout", type=float, metavar="SECONDS", default=300.0, show_default=True,
              help="Wall-clock budget per task.")
@click.option("--max-tokens", type=int, metavar="N", default=None,
              help="Output cap per model call [config, 4096].")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True, help="Runs per task.")
@click.option("--task", "only", multiple=True, metavar="NAME", help="Run only this task (repeatable).")
@click.option("--suite", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="A suite file instead of <config dir>/mylm/evals/suite.toml or the built-in one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per task run, then a summary object.")
@verbose_option
@click.pass_context
@handles_errors
def eval_(ctx: click.Context, /, **options: Any) -> None:
    """Check how well the endpoint's model works with mylm: small tool tasks, each in a fresh temporary
    workspace, scored for tasks solved, protocol-valid turns, runs that called a tool, format errors, tokens,
    tokens per second and wall time. Compare --constrain auto, grammar and off on the same model.

    \b
    Examples:
      mylm eval -m local
      mylm eval --constrain off --repeat 3 --json > off.jsonl
    """
    from ..display import for_terminal, json_text
    from ..errors import ConfigError
    from ..evaluation import default_suite_path, load_suite, run_task, totals
    from .runner import make_llm, prompt_loader

    settings = settings_from({**options, "yes": True})
    redactor = make_redactor(settings)
    configure_logging(options["verbose"], redactor)
    tasks = load_suite(options["suite"] or default_suite_path())
    if options["only"]:
        unknown = sorted(set(options["only"]) - {t.name for t in tasks})
        if unknown:
            names = ", ".join(t.name for t in tasks)
            raise ConfigError(f"no task named {unknown[0]!r}; the suite has: {names}")
        tasks = [t for t in tasks if t.name in options["only"]]
    loader = prompt_loader(settings)
    llm = make_llm(ctx, settings, loader)
    max_tokens = options["max_tokens"] or settings.max_tokens
    results = []
    if not options["as_json"]:
        click.echo(f"{'task':<18} {'run':>3} {'solved':>6} {'valid':>7} {'tool':>4} {'fmt':>3} "
                   f"{'tokens':>7} {'tok/s':>6} {'time':>7}  stop")
    for task in tasks:
        for repeat in range(1, options["repeat"] + 1):
            result = run_task(
                llm, task, constrain=settings.constrain,  # type: ignore[arg-type]
                max_iterations=options["max_iterations"], timeout=options["timeout"], max_tokens=max_tokens,
                prompts=loader, repeat=repeat,
            )
            results.append(result)
            if options["as_json"]:
                click.echo(json_text(redactor.redact_value({"type": "task", **result.to_dict()})))
            else:
                est = "~" if result.tokens_estimated else ""
                click.echo(
                    f"{task.name[:18]:<18} {repeat:>3} {'yes' if result.solved else 'no':>6} "
                    f"{result.valid_turns:>3}/{result.turns:<3} {'yes' if result.called_tool else 'no':>4} "
                    f"{result.format_errors:>3} {est + str(result.completion_tokens):>7} "
                    f"{result.tokens_per_second:>6.1f} {result.seconds:>6.1f}s  {result.stop_reason}"
                    + (f" ({for_terminal(redactor.redact(result.error))[:60]})" if result.error else "")
                )
    total = totals(results)
    if options["as_json"]:
        summary = {"type": "summary", "constrain": settings.constrain, "model": settings.model,
                   "base_url": redactor.redact(settings.base_url), **total.to_dict()}
        click.echo(json_text(redactor.redact_value(summary)))
        return
    est = " (estimated: the server sent no token counts)" if total.tokens_estimated else ""
    click.echo(
        f"\ntotal: {total.solved}/{total.runs} tasks solved, {total.valid_turns}/{total.turns} turns "
        f"protocol-valid, {total.runs_with_tool}/{total.runs} runs called a tool, "
        f"{total.format_errors} format errors, {total.completion_tokens} output tokens{est}, "
        f"{total.tokens_per_second:.1f} tokens/s, "
        f"{total.seconds:.1f}s (constrain {settings.constrain})"
    )
