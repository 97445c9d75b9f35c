"""`mylm eval`: BFCL questions and mylm's agent tasks against the configured endpoint, in any mode; one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import click

from .common import (
    configure_logging,
    endpoint_options,
    handles_errors,
    make_redactor,
    settings_from,
    verbose_option,
    warn,
)

#: What `--mode all` runs (the dialect modes are asked for by name: each doubles a run's time).
MODE_NAMES = ("protocol", "protocol-nogrammar", "native", "serve")


def _listed(values: tuple[str, ...]) -> list[str]:
    """Repeated options that may also hold comma lists, in order, without repeats."""
    return list(dict.fromkeys(v.strip() for value in values for v in value.split(",") if v.strip()))


@click.command(name="eval")
@endpoint_options
@click.option("--category", "categories", multiple=True, metavar="NAME",
              help="What to run (repeatable, or a comma list): tasks (mylm's agent tasks, the default), bfcl (the "
                   "eight core BFCL categories), or a BFCL category: simple_python, multiple, parallel, "
                   "parallel_multiple, irrelevance, live_simple, live_multiple, live_parallel, "
                   "live_parallel_multiple, live_irrelevance.")
@click.option("--mode", "modes", multiple=True, metavar="MODE",
              help="How to ask (repeatable, or a comma list; all for the first four): protocol (mylm's text "
                   "protocol, the grammar where the endpoint can), protocol-nogrammar, native (the endpoint's own "
                   "tool calling), serve (an in-process mylm serve in front of the endpoint, asked as an OpenAI "
                   "client asks), protocol-hermes and protocol-hermes-nogrammar (the protocol in the hermes tool "
                   "dialect; protocol and protocol-nogrammar speak --tool-dialect's). Default: protocol "
                   "(protocol-nogrammar with --constrain off).")
@click.option("--limit", type=click.IntRange(1, None), metavar="N", help="At most N questions (or tasks) per category.")
@click.option("--offset", type=click.IntRange(0, None), default=0, show_default=True, metavar="N",
              help="Skip the first N questions (or tasks) of each category.")
@click.option("--bfcl-data", type=click.Path(path_type=Path), metavar="PATH",
              help="BFCL's data: a directory of BFCL_v*_*.json files, one holding bfcl_eval/data or a bfcl_eval "
                   "wheel, or the wheel [default: an installed bfcl_eval, else the wheel --fetch-bfcl saved].")
@click.option("--fetch-bfcl", is_flag=True,
              help="Download the bfcl-eval wheel (pip download --no-deps) into mylm's cache first.")
@click.option("--max-iterations", type=int, metavar="N", default=6, show_default=True,
              help="Model calls allowed per agent task.")
@click.option("--timeout", type=float, metavar="SECONDS", default=900.0, show_default=True,
              help="Wall-clock budget per question or task, the same in every mode (a 1.5B model on a laptop CPU "
                   "takes 20-60 s a turn, so a six-turn task needs minutes).")
@click.option("--max-tokens", type=int, metavar="N", default=None,
              help="Output cap per model call [config, 4096].")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True, help="Runs per agent task.")
@click.option("--task", "only", multiple=True, metavar="NAME", help="Run only this agent task (repeatable).")
@click.option("--suite", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="A task suite file instead of <config dir>/mylm/evals/suite.toml or the built-in one.")
@click.option("--json", "as_json", is_flag=True,
              help="JSON lines on stdout instead of the table: an object per item, per table row, then the run's.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write the JSON lines to FILE (the table still goes to stdout).")
@click.option("--save", is_flag=True,
              help="Write the best mode's `constrain` setting into the profile in effect (or a new profile named "
                   "after the model), so ask, chat, batch and serve use it.")
@verbose_option
@click.pass_context
@handles_errors
def eval_(ctx: click.Context, /, **options: Any) -> None:
    """Measure how the endpoint's model calls tools, and which way of asking works best for it: BFCL's
    questions scored like BFCL's AST checker, and small agent tasks (each in a fresh temporary workspace, with
    the builtin tools approved inside it, checked automatically), in each mode. Prints one table: accuracy per
    category and mode, calls left in the text, wrong call counts, errors, and the median seconds per item.

    \b
    Examples:
      mylm eval -m local                                   # the agent tasks, mylm's protocol
      mylm eval --fetch-bfcl --category simple_python --limit 20 --mode protocol,native,serve
      mylm eval --category bfcl --limit 50 --mode all --output run.jsonl --save
      mylm eval --category tasks --mode protocol,native --json > tasks.jsonl
    """
    from ..core.errors import ConfigError
    from ..evaluation.bfcl import CATEGORIES, CORE_CATEGORIES
    from ..evaluation.modes import MODES
    from .runner import known_model, make_llm, prompt_loader

    settings = settings_from({**options, "yes": True})
    redactor = make_redactor(settings)
    configure_logging(options["verbose"], redactor)
    categories = _listed(options["categories"]) or ["tasks"]
    categories = list(dict.fromkeys(c for name in categories for c in (CORE_CATEGORIES if name == "bfcl" else (name,))))
    unknown = [c for c in categories if c != "tasks" and c not in CATEGORIES]
    if unknown:
        raise ConfigError(f"unknown --category {unknown[0]!r} (choose tasks, bfcl or one of: {', '.join(CATEGORIES)})")
    modes = _listed(options["modes"]) or ["protocol-nogrammar" if settings.constrain == "off" else "protocol"]
    modes = list(dict.fromkeys(m for name in modes for m in (MODE_NAMES if name == "all" else (name,))))
    if any(m not in MODES for m in modes):
        bad = next(m for m in modes if m not in MODES)
        raise ConfigError(f"unknown --mode {bad!r} (choose {', '.join(MODES)} or all)")
    questions, tasks = _load(categories, options)
    loader = prompt_loader(settings)
    llm = make_llm(ctx, settings, loader)
    out = _open_output(options["output"])
    try:
        _run(ctx, settings, llm, loader, modes, questions, tasks, options, out, redactor,
                     stop_strings=getattr(known_model(settings), "stop_strings", True))
    finally:
        if out is not None:
            out.close()


def _load(categories: list[str], options: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The BFCL questions and the agent tasks to run, sliced by --offset and --limit."""
    from ..core.errors import ConfigError
    from ..evaluation import bfcl
    from ..evaluation.suite import default_suite_path, load_suite

    questions: list[Any] = []
    wanted = [c for c in categories if c != "tasks"]
    if options["fetch_bfcl"]:
        click.echo(f"mylm eval: downloading {bfcl.PACKAGE} into {bfcl.cache_dir()}", err=True)
        click.echo(f"mylm eval: saved {bfcl.fetch()}", err=True)
    if wanted:
        source = bfcl.locate(options["bfcl_data"])
        for category in wanted:
            questions += bfcl.load(source, category, offset=options["offset"], limit=options["limit"])
    tasks: list[Any] = []
    if "tasks" in categories:
        tasks = load_suite(options["suite"] or default_suite_path())
        if options["only"]:
            missing = sorted(set(options["only"]) - {t.name for t in tasks})
            if missing:
                raise ConfigError(f"no task named {missing[0]!r}; the suite has: {', '.join(t.name for t in tasks)}")
            tasks = [t for t in tasks if t.name in options["only"]]
        tasks = tasks[options["offset"]:]
        if options["limit"] is not None:
            tasks = tasks[: options["limit"]]
    return questions, tasks


def _open_output(path: Path | None) -> IO[str] | None:
    from ..core.errors import ConfigError

    if path is None:
        return None
    try:
        return path.open("w", encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"--output {path}: {error.strerror or error}") from None


def _run(ctx: click.Context, settings: Any, llm: Any, loader: Any, modes: list[str], questions: list[Any],
         tasks: list[Any], options: dict[str, Any], out: IO[str] | None, redactor: Any, *,
         stop_strings: bool) -> list[Any]:
    from ..evaluation.modes import Limits
    from ..evaluation.score import Session, ask_question, best_mode, run_agent_task, summarise, table
    from ..sandbox import protect_process
    from ..tools.procs import become_subreaper
    from .runner import command_sandbox, tool_dialect, warn_about

    def emit(record: dict[str, Any]) -> None:
        line = redactor.redact(json.dumps(record, ensure_ascii=False))
        if options["as_json"]:
            click.echo(line)
        if out is not None:
            out.write(line + "\n")
            out.flush()

    sandbox = None
    if tasks:
        become_subreaper()  # a task's commands leave no orphan behind (as in `mylm ask`)
        protect_process()
        sandbox = command_sandbox(settings)
        warn_about(sandbox)
    limits = Limits(max_tokens=options["max_tokens"] or settings.max_tokens, timeout=options["timeout"],
                    stop_strings=stop_strings)
    constrain = settings.constrain if settings.constrain != "off" else "auto"
    items: list[Any] = []
    total = len(modes) * (len(questions) + len(tasks) * options["repeat"])
    with Session(llm, loader, limits, model=settings.model, constrain=constrain, sandbox=sandbox,
                 tool_dialect=tool_dialect(settings)) as session:
        for mode in modes:
            why = session.unavailable(mode)
            if why is not None:
                warn(f"skipping mode {mode}: {why}")
                total -= len(questions) + len(tasks) * options["repeat"]
                continue
            for question in questions:
                items.append(ask_question(session, question, mode))
                _progress(len(items), total, items[-1], redactor)
                emit(items[-1].to_dict())
            for task in tasks:
                for repeat in range(1, options["repeat"] + 1):
                    items.append(run_agent_task(session, task, mode, max_iterations=options["max_iterations"],
                                                repeat=repeat))
                    _progress(len(items), total, items[-1], redactor)
                    emit(items[-1].to_dict())
    rows = summarise(items)
    for row in rows:
        emit(row.to_dict())
    best = best_mode(rows)
    saved = _save(settings, rows, best) if options["save"] and best is not None else None
    if options["save"] and best is None:
        warn("--save: no mode the agent can use (protocol, protocol-nogrammar, serve) ran, so nothing was saved")
    emit({"type": "run", "model": settings.model, "provider": settings.provider,
          "base_url": settings.base_url, "modes": sorted({i.mode for i in items}, key=modes.index),
          "categories": list(dict.fromkeys(i.category for i in items)),
          "best_mode": best[0] if best else None, "saved": saved})
    if not options["as_json"]:
        click.echo(table(rows) if rows else "nothing was run")
        if best is not None:
            click.echo(f"\nbest mode for the agent: {best[0]} ({best[1].accuracy:.2f})")
    if saved is not None:
        click.echo(f"mylm eval: saved {saved['key']} = \"{saved['value']}\" in profile {saved['profile']} "
                   f"({saved['file']}); use it with -m {saved['profile']}", err=True)
    return items


def _progress(done: int, total: int, item: Any, redactor: Any) -> None:
    state = "error" if item.error else ("pass" if item.passed else "fail")
    note = item.error or item.reason
    note = f"  ({redactor.redact(note)[:100]})" if note else ""
    click.echo(f"[{done}/{total}] {item.mode} {item.id}: {state} {item.seconds:.1f}s{note}", err=True)


def _save(settings: Any, rows: list[Any], best: tuple[str, Any]) -> dict[str, Any]:
    """Write the best mode's setting into the profile; what was saved, for the run's JSON."""
    from ..evaluation.profile import SAVED_KEY, save_setting
    from ..evaluation.score import CONSTRAIN_FOR

    mode, row = best
    value = CONSTRAIN_FOR[mode]
    endpoint = {"provider": settings.provider, "model": settings.model}
    if settings.provider != "local" and settings.sources.get("base_url") != "default":
        endpoint = {"base_url": settings.base_url, **endpoint}
    totals = {r.mode: r for r in rows if r.category == "all"} or {r.mode: r for r in rows}
    scores = ", ".join(f"{m} {r.accuracy:.2f}" for m, r in totals.items())
    comment = f"{mode} scored best ({scores}; {row.items} items)"
    native = totals.get("native")
    if native is not None and native.accuracy > row.accuracy:
        warn(f"native tool calling scored higher ({native.accuracy:.2f}) than {mode} ({row.accuracy:.2f}), but "
             f"mylm's agent asks in its own protocol: saving the best mode it can use")
    profile, path, created = save_setting(settings.profile, value, endpoint=endpoint, comment=comment)
    return {"key": SAVED_KEY, "value": value, "mode": mode, "profile": profile, "file": str(path),
            "created": created}
