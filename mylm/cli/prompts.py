"""`mylm prompts list|show|edit|reset|path|trust|untrust`: the templates, where each comes from, editing (and
resetting) a copy, and whether this project's own templates may be used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .common import handles_errors, prompts_origin

if TYPE_CHECKING:
    from ..prompts import PromptLoader

_prompts_option = click.option(
    "--prompts", "prompts_dir", metavar="DIR", help="Also look in DIR first, as `mylm ask --prompts DIR` would."
)


@click.group()
def prompts() -> None:
    """The prompt templates: list them, show one, edit a copy, or see where they are looked up.

    Templates are looked up, first match wins, in --prompts DIR, $MYLM_PROMPTS, ./.mylm/prompts,
    the user config dir, then the defaults installed with mylm. `edit` copies the default into the
    user config dir first, so the installed files are never changed. A project's ./.mylm/prompts
    is used only after `mylm prompts trust` in that directory (or with MYLM_TRUST_PROJECT=1): its
    templates decide what the model is told, so review them first.
    """


def _loader(prompts_dir: str | None) -> PromptLoader:
    from ..config import load_settings
    from ..prompts import PromptLoader

    settings = load_settings({"prompts": prompts_dir})
    return PromptLoader.default(settings.prompts, trusted=settings.project_trust is not None,
                                origin=prompts_origin(settings))


def _complete_template(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    try:
        names = _loader(None).names()
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
        return []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def _template_name(name: str) -> str:
    name = name.strip()
    if name.startswith("/") or ".." in name.split("/") or "\\" in name:
        raise click.BadParameter(f"{name!r}: give a template name such as system.j2", param_hint="NAME")
    return name if name.endswith(".j2") else name + ".j2"


@prompts.command("list")
@_prompts_option
@handles_errors
def list_prompts(prompts_dir: str | None) -> None:
    """Every template, where the one in use comes from, and its file."""
    from ..core.errors import TemplateError
    from ..prompts import PromptLoader
    from .display import for_terminal

    loader = _loader(prompts_dir)
    ignored = [(name, directory) for _, directory in loader.ignored for name in PromptLoader([directory]).names()]
    names = loader.names()
    width = max((len(n) for n in [*names, *(n for n, _ in ignored)]), default=10)
    for name in names:
        try:
            found = loader.find(name)
        except TemplateError as error:
            click.echo(for_terminal(f"{name:<{width}}  {'refused':<13} {error}"))
            continue
        if found is not None:
            origin, path = found
            note = "  (from the trusted project: review it like code)" if origin == "project" else ""
            click.echo(for_terminal(f"{name:<{width}}  {origin:<13} {path}{note}"))
    for name, directory in ignored:
        line = f"{name:<{width}}  {'project':<13} {directory / name}  untrusted (ignored; see `mylm prompts trust`)"
        click.echo(for_terminal(line))


@prompts.command("show")
@click.argument("name", shell_complete=_complete_template)
@_prompts_option
@handles_errors
def show(name: str, prompts_dir: str | None) -> None:
    """Print template NAME as mylm will use it (where it comes from goes to stderr)."""
    from .display import for_terminal

    loader = _loader(prompts_dir)
    template = _template_name(name)
    found = loader.find(template)
    if found is None:
        raise click.UsageError(f"no template {template!r}; `mylm prompts list` shows them")
    origin, path = found
    click.echo(f"# {template}: {origin}, {path}", err=True)
    click.echo(for_terminal(path.read_text(encoding="utf-8")), nl=False)


@prompts.command("edit")
@click.argument("name", shell_complete=_complete_template)
@click.option("--no-editor", is_flag=True, help="Only make the copy and print its path.")
@handles_errors
def edit(name: str, no_editor: bool) -> None:
    """Copy default template NAME to the user config dir (once), then open the copy in $EDITOR."""
    from ..core.paths import config_dir
    from ..prompts import packaged_prompts_dir

    template = _template_name(name)
    source = packaged_prompts_dir() / template
    if not source.is_file():
        raise click.UsageError(f"no default template {template!r}; `mylm prompts list` shows them")
    target = config_dir() / "prompts" / template
    if target.exists():
        click.echo(f"Editing your copy {target}", err=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        import shutil

        shutil.copyfile(source, target)
        click.echo(f"Copied the default to {target}; mylm now uses this copy.", err=True)
    if no_editor:
        click.echo(str(target))
        return
    import sys

    from .common import isatty

    if not (isatty(sys.stdin) and isatty(sys.stdout)):
        from ..core.errors import MylmError

        # An editor such as vim would draw its screen into the pipe and wait for keys that never come.
        raise MylmError(
            f"no terminal to run the editor in; edit {target} yourself (--no-editor only prints the path)"
        )
    try:
        click.edit(filename=str(target))
    except click.ClickException as error:
        from ..core.errors import MylmError

        raise MylmError(f"{error.message}; set $EDITOR, or edit {target} yourself") from None
    _check_copy(target, template)
    click.echo(f"Checked {target}: it renders.", err=True)


def _check_copy(target: Path, template: str) -> None:
    """Render the edited copy with sample values, so a mistake is found now rather than mid-run."""
    from ..core.errors import TemplateError
    from ..prompts import PromptLoader, packaged_prompts_dir

    # The copy's own directory first, the defaults behind it for anything it includes.
    directory = target.parents[len(Path(template).parts) - 1]
    loader = PromptLoader([("user", directory), ("default", packaged_prompts_dir())])
    try:
        loader.check([template])
    except TemplateError as error:
        raise TemplateError(
            f"{error}; your copy is kept: fix it with `mylm prompts edit {template}`, or go back to the "
            f"default with `mylm prompts reset {template}`"
        ) from None


@prompts.command("reset")
@click.argument("name", shell_complete=_complete_template)
@handles_errors
def reset(name: str) -> None:
    """Delete your copy of template NAME in the user config dir, so the packaged default is used again."""
    from ..core.paths import config_dir
    from ..prompts import packaged_prompts_dir

    template = _template_name(name)
    if not (packaged_prompts_dir() / template).is_file():
        raise click.UsageError(f"no default template {template!r}; `mylm prompts list` shows them")
    target = config_dir() / "prompts" / template
    if not target.is_file():
        click.echo(f"You have no copy of {template}; the default is in use.", err=True)
        return
    target.unlink()
    click.echo(f"Removed {target}; mylm uses the default {template} again.", err=True)


@prompts.command("path")
@_prompts_option
@handles_errors
def path(prompts_dir: str | None) -> None:
    """The lookup order: each directory, why it is searched, and whether it exists."""
    from .display import for_terminal

    loader = _loader(prompts_dir)
    for origin, directory in loader.search_path:
        if origin == "user":  # an ignored project directory is shown where it would be searched
            for ignored, skipped in loader.ignored:
                click.echo(for_terminal(f"{ignored:<13} {skipped}  (untrusted: ignored; see `mylm prompts trust`)"))
        state = "" if directory.is_dir() else "  (does not exist)"
        click.echo(for_terminal(f"{origin:<13} {directory}{state}"))


@prompts.command("trust")
@handles_errors
def trust() -> None:
    """Use this directory's ./.mylm/prompts from now on (read them first: they decide what the model is told).

    The directory, resolved, is added to `trusted_projects` in your config file; every run that
    uses its templates still says so. `mylm prompts untrust` takes it back.
    """
    _set_trust(True)


@prompts.command("untrust")
@handles_errors
def untrust() -> None:
    """Stop using this directory's ./.mylm/prompts (remove it from `trusted_projects`)."""
    _set_trust(False)


def _set_trust(trusted: bool) -> None:
    import os
    from pathlib import Path

    from ..config import config_path, set_project_trust
    from ..prompts import project_prompts_dir
    from .display import for_terminal

    here = Path(os.path.realpath(os.getcwd()))
    changed = set_project_trust(here, trusted, path=config_path())
    if trusted:
        state = "Trusted" if changed else "Already trusted:"
        note = "" if project_prompts_dir(here).is_dir() else " (it has no .mylm/prompts yet)"
        message = f"{state} {here}{note}; mylm now uses its .mylm/prompts ({config_path()})"
    else:
        state = "No longer trusted:" if changed else "Was not trusted:"
        message = f"{state} {here}; mylm ignores its .mylm/prompts"
    click.echo(for_terminal(message), err=True)
