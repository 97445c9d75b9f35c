"""`mylm prompts list|show|edit|path`: the templates mylm renders, where each comes from, and editing a copy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .common import handles_errors

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
    user config dir first, so the installed files are never changed.
    """


def _loader(prompts_dir: str | None) -> PromptLoader:
    from ..config import load_settings
    from ..prompts import PromptLoader

    return PromptLoader.default(prompts_dir or load_settings().prompts)


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
    from ..display import for_terminal

    loader = _loader(prompts_dir)
    names = loader.names()
    width = max((len(n) for n in names), default=10)
    for name in names:
        found = loader.find(name)
        if found is not None:
            origin, path = found
            note = "  (from the project: review it like code)" if origin == "project" else ""
            click.echo(for_terminal(f"{name:<{width}}  {origin:<13} {path}{note}"))


@prompts.command("show")
@click.argument("name", shell_complete=_complete_template)
@_prompts_option
@handles_errors
def show(name: str, prompts_dir: str | None) -> None:
    """Print template NAME as mylm will use it (where it comes from goes to stderr)."""
    from ..display import for_terminal

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
    from ..prompts import packaged_prompts_dir, user_config_dir

    template = _template_name(name)
    source = packaged_prompts_dir() / template
    if not source.is_file():
        raise click.UsageError(f"no default template {template!r}; `mylm prompts list` shows them")
    target = user_config_dir() / "prompts" / template
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
    try:
        click.edit(filename=str(target))
    except click.ClickException as error:
        from ..errors import MylmError

        raise MylmError(f"{error.message}; set $EDITOR, or edit {target} yourself") from None


@prompts.command("path")
@_prompts_option
@handles_errors
def path(prompts_dir: str | None) -> None:
    """The lookup order: each directory, why it is searched, and whether it exists."""
    for origin, directory in _loader(prompts_dir).search_path:
        state = "" if directory.is_dir() else "  (does not exist)"
        click.echo(f"{origin:<13} {directory}{state}")
