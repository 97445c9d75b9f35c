"""`mylm tools`, `mylm config` and `mylm completion`: what mylm would use, and shell set-up."""

from __future__ import annotations

import os
from typing import Any

import click

from .common import endpoint_options, handles_errors, settings_from


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the tools as one JSON array.")
@handles_errors
def tools(as_json: bool) -> None:
    """List the tools the model can call, with their parameters' JSON Schema.

    Each says what the approval policy does with it by default: `read` tools run freely, commands
    ask unless the policy finds them read-only, other tools ask first (--yes runs them all).
    """
    from ..config import load_settings
    from .display import for_terminal, json_text
    from .runner import model_tools, session_tools

    with session_tools(load_settings()) as tools:
        listed = model_tools(tools)
    if as_json:
        data = [{"name": t.name, "description": t.description, "risk": t.risk, "parameters": dict(t.parameters)}
                for t in listed]
        click.echo(json_text(data, indent=2))
        return
    for tool in listed:
        click.echo(click.style(tool.name, bold=True) + f"  [{tool.risk}: {_approval(tool.name, tool.risk)}]")
        click.echo(f"  {for_terminal(tool.description)}")
        schema = json_text(dict(tool.parameters), indent=2)
        click.echo("\n".join("    " + line for line in for_terminal(schema).splitlines()) + "\n")


def _approval(name: str, risk: str) -> str:
    """What the default approval policy does with a tool's calls, in a few words (see mylm.approval)."""
    from ..approval import PATH_TOOLS, SHELL_TOOL

    if name == SHELL_TOOL:
        return "asks first unless the approval policy finds the command read-only"
    if risk == "read":
        return "asks for files that look like secrets, else runs freely" if name in PATH_TOOLS else "runs freely"
    return "asks first"


@click.command()
@endpoint_options
@click.option("--json", "as_json", is_flag=True, help="Print the settings and their sources as JSON.")
@handles_errors
def config(as_json: bool, **options: Any) -> None:
    """Show the effective settings and where each came from (flag, env, profile, file, default).

    Takes the same endpoint options as `ask`, so `mylm config -m NAME` shows what profile NAME
    resolves to. The API key itself is never shown, only where it comes from.
    """
    from ..config import PROJECT_CONFIG, SETTING_NAMES, config_path, read_config_file
    from ..core.redact import public_url
    from .display import for_terminal, json_text
    from .endpoint import endpoint_in_use
    from .runner import approval_policy, command_sandbox, tool_settings

    settings = settings_from(options)
    # What `ask` would reject, `config` rejects too (it is where a user checks the file).
    tool_settings(settings)
    approval_policy(settings)
    user_file = config_path()
    profiles = sorted(read_config_file(user_file).get("profiles", {}))
    sandbox = command_sandbox(settings).describe()
    in_use = endpoint_in_use(settings)
    rows = []
    for name in SETTING_NAMES:
        value: Any = getattr(settings, name)
        source = settings.sources.get(name, "unset")
        if name == "api_key":
            value = "(set)" if value else None
        elif name == "base_url" and in_use.provider == "local":
            value, source = None, "not used: the model runs in-process"
        elif name == "base_url" and value:
            value = public_url(value)  # a user, password or `?key=` in the URL is a credential too
        elif name == "provider" and value != in_use.provider:
            value, source = in_use.provider, _inferred(in_use.provider, settings.sources.get("base_url"))
        elif name == "model" and in_use.provider == "local" and not value and in_use.model:
            value, source = in_use.model, "default: the model pulled last"
        rows.append((name, value, source))
    if as_json:
        data = {
            "config_file": str(user_file),
            "project_file": str(PROJECT_CONFIG.resolve()),
            "profile": settings.profile,
            "profiles": profiles,
            "endpoint_in_use": {**in_use.header(), "path": in_use.path},
            "sandbox_in_force": sandbox,
            "settings": {name: {"value": value, "source": source} for name, value, source in rows},
        }
        click.echo(json_text(data, indent=2))
        return
    exists = "" if user_file.exists() else "  (not found)"
    project = PROJECT_CONFIG.resolve()
    shown = [(name, "-" if value in (None, "") else _short(value), source) for name, value, source in rows]
    width = max(len(name) for name in [*SETTING_NAMES, "config file", "project file", "endpoint", "commands"])
    values = max(len(value) for _, value, _ in shown)
    click.echo(for_terminal(f"{'config file':<{width}}  {user_file}{exists}"))
    click.echo(for_terminal(f"{'project file':<{width}}  {project}{'' if project.exists() else '  (not found)'}"))
    listed = ", ".join(profiles) or "none"
    click.echo(for_terminal(f"{'profile':<{width}}  {settings.profile or '-'}  (profiles: {listed})"))
    click.echo(for_terminal(f"{'endpoint':<{width}}  {in_use.describe()}\n"))
    for name, value, source in shown:
        click.echo(for_terminal(f"{name:<{width}}  {value:<{values}}  {source}"))
    click.echo(for_terminal(f"{'commands':<{width}}  {sandbox}"))


def _inferred(provider: str, url_source: str | None) -> str:
    """Where the provider in use comes from when no setting names it."""
    if provider == "local":
        return "default: no endpoint is configured and the local engine is installed"
    return "default: no endpoint is configured" if url_source == "default" else "inferred from the URL"


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:39] + "…"


_SHELLS = ("bash", "zsh", "fish")


@click.command()
@click.argument("shell", required=False, type=click.Choice(_SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str | None) -> None:
    """Print the shell completion script for SHELL (default: your $SHELL).

    \b
    Enable it once, e.g. in ~/.bashrc:   eval "$(mylm completion bash)"
    zsh (~/.zshrc):                     eval "$(mylm completion zsh)"
    fish:                               mylm completion fish > ~/.config/fish/completions/mylm.fish
    """
    from click.shell_completion import get_completion_class

    chosen = shell or os.path.basename(os.environ.get("SHELL", ""))
    if chosen not in _SHELLS:
        raise click.UsageError(f"say which shell: mylm completion {{{','.join(_SHELLS)}}}")
    completer = get_completion_class(chosen)
    assert completer is not None and ctx.parent is not None
    click.echo(completer(ctx.parent.command, {}, "mylm", "_MYLM_COMPLETE").source())
