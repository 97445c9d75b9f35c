"""The `mylm` command line: the composition root, and the only package that prints or exits.

Each command lives in its own module and imports the agent, jinja2 and requests only when it runs, so
`mylm --help` stays about as fast as importing click.
"""

from __future__ import annotations

import click

from .approve import Approver, Terminal, open_terminal
from .ask import ask
from .chat import chat
from .common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_ITERATIONS, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE
from .info import completion, config, models, tools
from .prompts import prompts
from .sessions import sessions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mylm", prog_name="mylm")
def cli() -> None:
    """mylm: turn any plain-text LLM endpoint into an agent that reasons, runs tools and answers.

    \b
    Start here:
      mylm ask "how many Python files are here?"     one task; the answer on stdout
      mylm chat                                      a conversation (Ctrl-C stops a reply)
      mylm ask --continue "and the tests?"           carry on from the last session

    Configure the endpoint with --base-url/-m or MYLM_BASE_URL/MYLM_MODEL (OPENAI_BASE_URL and
    OPENAI_API_KEY also work), or with named profiles in the config file (`mylm config` shows it and
    where each setting comes from). With nothing set, mylm talks to a local Ollama at
    http://localhost:11434. Shell completion: eval "$(mylm completion bash)".
    """


for _command in (ask, chat, sessions, prompts, tools, config, models, completion):
    cli.add_command(_command)


def main() -> None:
    """Entry point of the `mylm` console script."""
    cli(prog_name="mylm")


__all__ = [
    "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_ITERATIONS", "EXIT_OK", "EXIT_TIMEOUT", "EXIT_USAGE",
    "Approver", "Terminal", "cli", "main", "open_terminal",
]
