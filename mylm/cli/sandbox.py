"""`mylm sandbox --check`: what confines a command on this machine, found by running one."""

from __future__ import annotations

import click

from .common import EXIT_ERROR, EXIT_OK, handles_errors

_MARK = {"kernel": "ok  ", "fallback": "weak", "none": "NO  "}


@click.command()
@click.option("--check", is_flag=True, help="Run probe commands and report what confines them here.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as one JSON array.")
@handles_errors
def sandbox(check: bool, as_json: bool) -> None:
    """Show the sandbox in force; with --check, start two probe commands (read-only and approved) and report
    what the kernel holds here (Landlock ABI, namespaces, seccomp, masked secrets, keyring, descriptors)
    and what falls back. Exits 1 when no sandbox confines commands."""
    from ..config import load_settings
    from .display import json_text
    from .runner import command_sandbox

    found = command_sandbox(load_settings())
    if not check:
        click.echo(found.describe())
        raise SystemExit(EXIT_OK if found.confines else EXIT_ERROR)
    from ..sandbox.check import report

    facts = report(found)
    if as_json:
        click.echo(json_text([{"what": f.what, "status": f.status, "detail": f.detail} for f in facts], indent=2))
    else:
        width = max(len(f.what) for f in facts)
        for fact in facts:
            click.echo(f"{_MARK[fact.status]}  {fact.what.ljust(width)}  {fact.detail}")
        click.echo("(ok: held by the kernel; weak: a fallback holds it; NO: nothing holds it here)")
    raise SystemExit(EXIT_OK if found.confines else EXIT_ERROR)
