"""What every command shares: exit codes, turning errors into one line, the endpoint options, settings, streams."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ..config import Settings
    from ..core.redact import Redactor

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes (all of them in EXIT_CODES).
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_ITERATIONS, EXIT_TIMEOUT, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
#: Every exit code of `mylm ask`: the code, its word in `--help`, and its meaning in docs/cli.md's table (which a
#: test checks against this, so the help and the docs cannot drift apart).
EXIT_CODES: tuple[tuple[int, str, str], ...] = (
    (0, "answer", "the model answered (or a done tool finished the task)"),
    (1, "error", "error: endpoint unreachable, HTTP error, broken stream, the model kept replying unusably"),
    (2, "usage", "usage: bad flags, bad config, bad template, unknown session"),
    (3, "iteration limit", "iteration limit reached (a summary answer is still printed)"),
    (4, "timeout", "timeout (the message says how to raise it)"),
    (5, "repeated call", ("stopped: the model kept making the same call and getting the same result "
                          "(`max_repeated_calls`, 3 in a row); the answer it then gave without tools is printed")),
    (74, "output not written", ("the output could not be written: stdout closed (`>&-`) or a full disk "
                                "(`> /dev/full`); any command")),
    (130, "interrupted", "interrupted (Ctrl-C)"),
    (141, "broken pipe", ("the program reading the output went away (a broken pipe: `mylm ask ... | head -1`), "
                          "as git exits; any command")),
)


def exit_codes_help() -> str:
    """`Exit codes: 0 answer, 1 error, ...`: the help's epilog, from EXIT_CODES."""
    return "Exit codes: " + ", ".join(f"{code} {word}" for code, word, _ in EXIT_CODES) + "."


def fail(message: str, code: int) -> None:
    """Print `mylm: error: MESSAGE` on stderr (sanitised: it may quote the model) and exit with `code`."""
    from .display import for_terminal

    redactor = _settings_redactor or make_redactor(None)
    click.echo(f"mylm: error: {for_terminal(redactor.redact(message))}", err=True)
    sys.exit(code)


def warn(message: str) -> None:
    """Print `mylm: warning: MESSAGE` on stderr (sanitised: it may quote a path or a config value)."""
    from .display import for_terminal

    click.echo(f"mylm: warning: {for_terminal(message)}", err=True)


_replaced_said = False


def from_outside(text: str, where: str) -> str:
    """`text` from argv, stdin or the environment, with undecodable bytes replaced by U+FFFD (said once)."""
    from ..core.decoding import clean_text

    cleaned, replaced = clean_text(text)
    if replaced:
        say_replaced(where)
    return cleaned


def say_replaced(where: str) -> None:
    """Warn, once per process, that foreign bytes were replaced."""
    global _replaced_said
    if not _replaced_said:
        _replaced_said = True
        warn(f"{where} is not valid UTF-8; the bytes that are not were replaced with U+FFFD")


def handles_errors(command: F) -> F:
    """Turn mylm's errors and Ctrl-C into one readable line and a distinct exit code, never a traceback (output
    that cannot be written is the CLI root's to report: root.py)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..core.errors import MylmError

        try:
            return command(*args, **kwargs)
        except MylmError as error:
            fail(str(error), error.exit_code)
        except KeyboardInterrupt:
            click.echo("mylm: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]


def _complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    try:
        from ..config import config_path, read_config_file

        profiles = read_config_file(config_path()).get("profiles", {})
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
        return []
    return [CompletionItem(name, help="profile") for name in profiles if name.startswith(incomplete)]


def _provider_names() -> str:
    from ..providers.registry import PROVIDERS

    return ", ".join(PROVIDERS[:-1]) + " or " + PROVIDERS[-1]


def endpoint_options(command: F) -> F:
    """The options naming the endpoint and templates, shared by every command that talks to a model."""
    options = [
        click.option("--base-url", metavar="URL", help="Endpoint URL [env: MYLM_BASE_URL, OPENAI_BASE_URL]."),
        click.option(
            "-m", "--model", metavar="NAME", shell_complete=_complete_profile,
            help="A profile from the config file, or a model name [env: MYLM_MODEL].",
        ),
        click.option("--api-key", metavar="KEY", help="API key [env: MYLM_API_KEY, OPENAI_API_KEY]."),
        click.option(
            "--provider", metavar="NAME",
            help=f"Wire format: {_provider_names()} (default: inferred from the URL; local runs a GGUF inside "
                 "mylm: -m PATH or a pulled model's name) [env: MYLM_PROVIDER].",
        ),
        click.option(
            "--chat-format", metavar="NAME",
            help="Prompt format for raw-completion endpoints: chatml, llama3, mistral, gemma, plain, or a "
                 "template of yours in chat/ [env: MYLM_CHAT_FORMAT].",
        ),
        click.option(
            "--constrain", type=click.Choice(["auto", "grammar", "off"]), default=None,
            help="Sample under a grammar of the tool protocol: where the endpoint can (auto, the default), "
                 "always (grammar: an error where it cannot), or never [env: MYLM_CONSTRAIN].",
        ),
        click.option(
            "--tool-dialect", type=click.Choice(["mylm", "hermes", "auto"]), default=None,
            help="The form of tool call the prompt teaches and the grammar allows: mylm's <tool_code> block "
                 "(mylm, the default), the <tool_call> JSON of Qwen2.5/Hermes chat templates (hermes), or the "
                 "model's own where the registry knows it (auto) [env: MYLM_TOOL_DIALECT].",
        ),
        click.option("--prompts", "prompts_dir", metavar="DIR", help="Directory of templates overriding the defaults."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def run_options(command: F) -> F:
    """The per-run limits, approval and tool-choice flags: `ask`, `chat` and `batch` (for each task) take the same."""
    options = [
        click.option("--max-iterations", type=int, metavar="N",
                     help="Model calls allowed before a summary answer [10] [env: MYLM_MAX_ITERATIONS]."),
        click.option("--timeout", type=float, metavar="SECONDS",
                     help="Wall-clock budget for each run [120] [env: MYLM_TIMEOUT]."),
        click.option("--max-tokens", type=int, metavar="N",
                     help="Output cap for each model call [4096] [env: MYLM_MAX_TOKENS]."),
        click.option("-y", "--yes", is_flag=True, default=None,
                     help="Run every tool call the approval policy does not forbid, without asking."),
        click.option(
            "--sandbox", type=click.Choice(["auto", "off"]), default=None,
            help="auto: confine commands with the kernel's sandbox (Landlock, else bubblewrap); off: run them "
                 "unconfined (warns every run) [auto].",
        ),
        click.option(
            "--tool-choice", metavar="auto|none|required|TOOL",
            help="auto: the model decides [default]; none: no tools; required: every reply must call a tool; "
                 "TOOL: every reply must call that tool.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def timeout_hint(settings: Settings) -> str:
    """The ways to raise the runs' time limit (the flag first), added where the CLI prints a timeout (the agent's own message names no
    flag: a library user sets `Agent(timeout=...)`)."""
    source = settings.sources.get("timeout", "default")
    origin = "" if source in ("default", "flag") else f"; this one is from {source}"
    return f"--timeout SECONDS (or timeout = SECONDS in config.toml, or MYLM_TIMEOUT){origin}"


def verbose_option(command: F) -> F:
    """`-v`: full tool output and the loop's log on stderr (`-vv` for debug)."""
    return click.option(
        "-v", "--verbose", count=True, help="Show tool output in full and log the loop to stderr (-vv: debug)."
    )(command)


def settings_from(options: dict[str, Any]) -> Settings:
    """Resolve the settings from a command's options; warnings about them go to stderr."""
    from ..config import load_settings

    names = (
        "base_url", "model", "api_key", "provider", "chat_format", "constrain", "tool_dialect", "max_iterations",
        "timeout", "max_tokens", "yes", "sandbox",
    )
    flags = {name: options.get(name) for name in names}
    flags["prompts"] = options.get("prompts_dir")
    settings = load_settings(flags)
    for message in settings.warnings:
        warn(message)
    # Text settings end up in request bodies and headers, which cannot carry undecodable bytes.
    import dataclasses

    texts = ("base_url", "model", "api_key", "provider", "chat_format", "instructions")
    cleaned: dict[str, Any] = {
        name: from_outside(getattr(settings, name), f"the {name.replace('_', ' ')} setting")
        for name in texts if isinstance(getattr(settings, name), str)
    }
    return dataclasses.replace(settings, **cleaned)


def prompts_origin(settings: Settings) -> str:
    """How the template lists label the `prompts` setting's directory: by where it was set."""
    source = settings.sources.get("prompts", "flag")
    if source.startswith("env"):
        return "$MYLM_PROMPTS"
    return "--prompts" if source == "flag" else "config"


#: The redactor built from this command's settings, so that `fail` also knows the key and the URL's credentials.
_settings_redactor: Redactor | None = None


def make_redactor(settings: Settings | None) -> Redactor:
    """The redactor for this process: secret-named environment values, the API key in use, and the credentials
    in the endpoint URL (its user, password and query values). Without settings, the URL variables' credentials."""
    global _settings_redactor
    from ..core.redact import Redactor, url_secrets

    urls: list[str | None] = (
        [settings.base_url] if settings is not None
        else [os.environ.get(name) for name in ("MYLM_BASE_URL", "OPENAI_BASE_URL")]
    )
    secrets = [value for url in urls for value in url_secrets(url)]
    redactor = Redactor.from_environment(extra=[settings.api_key if settings else None, *secrets])
    if settings is not None:
        _settings_redactor = redactor
    return redactor


def configure_logging(verbose: int, redactor: Redactor) -> None:
    """Send mylm's log to stderr at `-v` (info) or `-vv` (debug), redacted."""
    if not verbose:
        return
    import logging

    class _Redacting(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg, record.args = redactor.redact(record.getMessage()), None
            return True

    class _OwnLine(logging.StreamHandler):  # type: ignore[type-arg]
        """Writes each record on a line of its own: streamed text may have left a line open."""

        before: Callable[[], None] | None = None

        def emit(self, record: logging.LogRecord) -> None:
            if self.before is not None:
                with contextlib.suppress(OSError, ValueError):
                    self.before()
            super().emit(record)

        def format(self, record: logging.LogRecord) -> str:
            # An upstream's error body at -v may carry OSC 52 (clipboard), OSC 8, CSI, C1 or bidi controls:
            # the record, its traceback included, goes out redacted and through the one terminal sanitiser.
            from .display import for_terminal

            return for_terminal(redactor.redact(super().format(record)))

    handler = _OwnLine(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    handler.addFilter(_Redacting())
    handler.set_name("mylm-cli")
    root = logging.getLogger("mylm")
    for old in [h for h in root.handlers if h.get_name() == "mylm-cli"]:
        root.removeHandler(old)  # an embedding program (or a test) running several commands in one process
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


def before_log_lines(action: Callable[[], None]) -> None:
    """Run `action` before each line of mylm's log (`-v`) is written: the printer ends its open line."""
    import logging

    for handler in logging.getLogger("mylm").handlers:
        if handler.get_name() == "mylm-cli":
            handler.before = action  # type: ignore[attr-defined]


def isatty(stream: IO[str] | None) -> bool:
    """Whether `stream` is a terminal (False for test buffers and closed streams)."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def same_terminal(a: IO[str], b: IO[str]) -> bool:
    """Whether two streams are the same terminal device (`mylm ask` run plainly, nothing redirected)."""
    if not (isatty(a) and isatty(b)):
        return False
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (sa.st_dev, sa.st_ino, sa.st_rdev) == (sb.st_dev, sb.st_ino, sb.st_rdev)


def same_file(a: IO[str], b: IO[str]) -> bool:
    """Whether two streams write to one file or pipe (`mylm ask ... > log 2>&1`)."""
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def use_color(stream: IO[str]) -> bool:
    """Colour decorations only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return isatty(stream) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def read_piped_stdin() -> str:
    """Piped or redirected stdin, to add as context; never blocks on a terminal. Bytes that are not UTF-8 (a
    Latin-1 file, gzip data) are replaced with U+FFFD, and that is said once on stderr."""
    import stat

    stream = sys.stdin
    if stream is None:
        return ""
    try:
        if stream.isatty():
            return ""
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
            return ""
    except (OSError, ValueError, AttributeError):
        # Not a real file (a test runner's buffer): read it if it is there.
        pass
    from ..protocol.defuse import defuse_special_tokens

    # Piped data is not the user's typing: a chat-template token in it (`<|im_start|>`) must not forge a turn.
    raw = getattr(stream, "buffer", None)
    if raw is None:
        return defuse_special_tokens(from_outside(stream.read(), "stdin"))
    from ..core.decoding import decode_bytes

    text, replaced = decode_bytes(raw.read())
    if replaced:
        say_replaced("stdin")
    return defuse_special_tokens(text)
