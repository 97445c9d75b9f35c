"""The `mylm` command line: the composition root, and the only package that prints or exits.

Each command lives in its own module, imported only when that command runs (or its help is shown), and imports
the agent, jinja2 and requests only inside the command, so `mylm --help` stays about as fast as importing click.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import click

from .._version import __version__
from .common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_ITERATIONS, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE

if TYPE_CHECKING:
    from .approve import Approver, Terminal, open_terminal

#: Each command: the module and name defining it, and the one-line summary `mylm --help` shows without importing it.
COMMANDS: dict[str, tuple[str, str]] = {
    "ask": ("ask:ask", "Ask the agent to do one task; the answer goes to stdout."),
    "chat": ("chat:chat", "Talk with the agent over several turns (Ctrl-C stops a reply)."),
    "batch": ("batch:batch", "Run every task of a JSONL file, several at once; resumable."),
    "sessions": ("sessions:sessions", "List and show saved conversations."),
    "prompts": ("prompts:prompts", "List, show, edit and locate templates; trust a project's."),
    "memory": ("memory:memory", "List and forget the notes the model saved."),
    "tools": ("info:tools", "List the tools the model can call, with their schemas."),
    "config": ("info:config", "Show the effective settings and where each came from."),
    "models": ("models:models", "List the endpoint's models; pull and list GGUF models to run locally."),
    "mcp": ("mcp:mcp", "Serve the agent to other agents over MCP (stdio, or HTTP on loopback)."),
    "a2a": ("a2a:a2a", "Serve the agent to other agents over A2A (JSON-RPC on loopback; 1.0 and 0.3 clients)."),
    "acp": ("acp:acp", "Serve the agent to editors over the Agent Client Protocol (Zed, JetBrains; stdio)."),
    "serve": ("serve:serve", "Serve the model behind the OpenAI, Anthropic and Ollama APIs, with native tool calling."),
    "eval": ("eval:eval_", "Score the endpoint's model on small tool tasks (does it work with mylm?)."),
    "sandbox": ("sandbox:sandbox", "Show what confines commands here; --check probes it by running one."),
    "completion": ("info:completion", "Print the shell completion script for bash, zsh or fish."),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, _, name = COMMANDS[cmd_name][0].partition(":")
        command: click.Command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        return command

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run as click does, but end as mylm does: one line and an exit code per failure (see root.py)."""
        if not kwargs.get("standalone_mode", True) or len(args) > 3:
            return super().main(*args, **kwargs)
        from .root import run_command

        run_command(lambda: super(LazyGroup, self).main(*args, **{**kwargs, "standalone_mode": False}))

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        from .root import output_errors

        with output_errors():  # `mylm --help > /dev/full` writes the help here
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        from .root import output_errors

        with output_errors():
            return super().invoke(ctx)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
# The version from the package itself: package metadata is missing when run from a checkout (`python -m mylm`).
@click.version_option(version=__version__, prog_name="mylm")
def cli() -> None:
    """mylm: turn any plain-text LLM endpoint into an agent that reasons, runs tools and answers.

    \b
    Start here:
      mylm ask "how many Python files are here?"     one task; the answer on stdout
      mylm chat                                      a conversation (Ctrl-C stops a reply)
      mylm ask --continue "and the tests?"           carry on from the last session

    Configure the endpoint with --base-url/-m or MYLM_BASE_URL/MYLM_MODEL (OPENAI_BASE_URL and
    OPENAI_API_KEY also work), or with named profiles in the config file (`mylm config` shows it and
    where each setting comes from). With nothing set, mylm runs the latest model fetched with
    `mylm models pull` inside itself when the local extra is installed (pip install '.[local]' in
    mylm's checkout), and otherwise talks to a local Ollama at http://localhost:11434. Shell
    completion: eval "$(mylm completion bash)".
    """


def main() -> None:
    """Entry point of the `mylm` console script."""
    cli(prog_name="mylm")


def __getattr__(name: str) -> Any:
    # The approval classes stay importable from here (`from mylm.cli import Terminal`) without slowing --help.
    if name in ("Approver", "Terminal", "open_terminal"):
        from . import approve

        return getattr(approve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COMMANDS", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_ITERATIONS", "EXIT_OK", "EXIT_TIMEOUT", "EXIT_USAGE",
    "Approver", "Terminal", "cli", "main", "open_terminal",
]
