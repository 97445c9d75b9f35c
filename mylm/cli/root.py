"""How every `mylm` command ends: one line on stderr and a distinct exit code for every failure, never a traceback.

The one place that catches what escapes a command: click's usage errors (shown in mylm's own `mylm: error:` style),
Ctrl-C, and output that cannot be written (a closed stdout, a reader that went away, a full disk), which can
happen in any command, `--help` included.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from .common import EXIT_INTERRUPTED, EXIT_USAGE

#: Exit codes for output that cannot be written: a broken pipe is what a shell reports for a program SIGPIPE
#: killed (128 + 13, as git's is), any other write failure is sysexits' EX_IOERR.
EXIT_BROKEN_PIPE, EXIT_OUTPUT = 141, 74

#: The errors a write to an output stream fails with: the reader went away, the stream is closed (or open only
#: for reading), the disk or quota is full, the file is too big, the device failed.
_OUTPUT_ERRNOS = frozenset(
    {errno.EPIPE, errno.EBADF, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.ECONNRESET}
)


class OutputError(Exception):
    """Showing a run's events failed; raised by a command once its conversation is saved, to say so."""

    def __init__(self, error: OSError, *, saved: str = "") -> None:
        super().__init__(str(error))
        self.error = error
        #: What the user can do with what was saved ("`mylm ask --continue` resumes it"), or "".
        self.saved = saved


def run_command(main: Callable[[], Any]) -> NoReturn:
    """Run click's `main` in non-standalone mode and exit the way a command-line tool should."""
    guard_standard_streams()
    try:
        returned = main()
        code = returned if isinstance(returned, int) and not isinstance(returned, bool) else 0
    except SystemExit as done:
        code = _code(done.code)
    except click.exceptions.NoArgsIsHelpError as usage:
        usage.show()  # `mylm prompts` alone: the help it asked for, not an error line
        code = usage.exit_code
    except click.ClickException as error:
        _say(f"mylm: error: {_click_message(error)}")
        code = error.exit_code
    except (click.Abort, KeyboardInterrupt, EOFError):
        _say("mylm: interrupted")
        code = EXIT_INTERRUPTED
    except OutputError as failure:
        code = _output_failed(failure.error, failure.saved)
    except OSError as error:
        if error.filename is not None or error.errno not in _OUTPUT_ERRNOS:
            raise
        code = _output_failed(error)
    # What is still buffered is written now, not by the interpreter at exit (where a failure is a traceback-like
    # "Exception ignored" message and exit status 120).
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError) as error:
        failed = _output_failed(error) if isinstance(error, OSError) else EXIT_OUTPUT
        code = code or failed
    sys.exit(code)


@contextmanager
def output_errors() -> Iterator[None]:
    """Let a failed write to stdout or stderr through as an OutputError: click's own `main` would turn a broken
    pipe into a silent exit 1 before `run_command` could say what happened."""
    try:
        yield
    except OSError as error:
        if error.filename is not None or error.errno not in _OUTPUT_ERRNOS:
            raise
        raise OutputError(error) from error


def guard_standard_streams() -> None:
    """Give a closed stdin, stdout or stderr (`mylm ask ... >&-`) a descriptor that refuses writes (/dev/null
    opened read-only), so that writing fails with EBADF as it would in C, and no file mylm opens later (a
    transcript, a command's pipe) lands on descriptor 0, 1 or 2 and is written to by mistake."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            opened = os.open(os.devnull, os.O_RDONLY)
        except OSError:
            return
        if opened != fd:
            os.dup2(opened, fd)
            os.close(opened)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))  # noqa: SIM115


def _output_failed(error: OSError, saved: str = "") -> int:
    """Say, in one line, that the output could not be written; return the exit code for it."""
    broken = error.errno in (errno.EPIPE, errno.ECONNRESET)
    if broken:
        reason = "stdout was closed by the program reading it (broken pipe)"
    elif error.errno == errno.EBADF:
        reason = "stdout is closed"
    else:
        reason = f"cannot write the output: {error.strerror or error}"
    # Nothing more can reach that stream; what is still buffered goes to /dev/null instead of failing again.
    _silence(1)
    _say(f"mylm: error: {reason}{'; ' + saved if saved else ''}")
    return EXIT_BROKEN_PIPE if broken else EXIT_OUTPUT


def _silence(fd: int) -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def _say(line: str) -> None:
    """Write one line on stderr; if stderr cannot be written either, the exit code alone tells."""
    from .display import for_terminal

    try:
        click.echo(for_terminal(line), err=True)
    except (OSError, ValueError):
        _silence(2)


def _click_message(error: click.ClickException) -> str:
    """A click error as mylm words its own: the message, and for a usage error where to read the usage."""
    message = error.format_message().strip().rstrip(".")
    message = message[:1].lower() + message[1:] if message[1:2].islower() else message
    if isinstance(error, click.UsageError) and error.ctx is not None and "`" not in message:
        return f"{message} (see `{error.ctx.command_path} --help`)"
    return message


def _code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    _say(str(code))  # sys.exit("message"): Python would print it and exit 1
    return 1


__all__ = [
    "EXIT_BROKEN_PIPE", "EXIT_OUTPUT", "EXIT_USAGE", "OutputError", "guard_standard_streams", "output_errors",
    "run_command",
]
