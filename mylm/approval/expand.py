"""What a command's globs expand to, answered by bash itself, bounded in time, size and memory.

A glob is judged by the words bash will pass, not by its text: a file planted as `-v`, `-Ocat` or `a[$(id)]`
turns `test -? x*` or `git grep *` into options the text never showed, and `d*` may name a link out of the
workspace. Which names match, in which order (the locale's collation), with which quoting, is bash's logic, so
bash answers it: the words of each simple command, exactly as tree-sitter-bash cut them from the line, are
handed to `set -- WORDS; printf '%s\\0' "$#" "$@"` in the directory the command will run in, with the
environment the shell tool gives commands (the locale decides collation and what `?` matches).

Why running bash on those words cannot run anything: only a line that passed the plain-syntax check
(bash.py) gets here, so no word holds `$`, a backtick, a backslash, braces, brackets, parentheses or a
leading `~`; the only expansions left are `*`, `?` and quote removal, and the expansion of a glob is never
expanded again (a file named `$(id)` stays a string). As a second layer the script sets restricted mode
(`set -r`: no redirections, no `exec`, no PATH changes) before the words are read, with no rc files and an
allowlisted environment. Bounds: a deadline within the run's (a link loop like `a -> .` makes `*/*/*/*/*/x`
explode, and bash would hang with it), a cap on the words and bytes it may print, and `ulimit -v` / `-t`
on the expanding bash. Whatever cannot be expanded within them is a reason to ask.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from ..core.cancel import remaining
from ..tools.environment import child_environment

#: The most one expansion may take, within the run's deadline.
EXPAND_TIMEOUT = 2.0
#: Words one simple command may expand to before the command asks instead of checking each.
MAX_WORDS = 2000
#: Bytes of expansion read before giving up (names are short; this is ~2000 long paths).
_MAX_BYTES = 1 << 20
#: `ulimit -v` (KiB) and `-t` (CPU seconds) for the expanding bash: a glob over a link loop builds its whole
#: list in memory before printing anything.
_MEMORY_KIB = 256 * 1024
_CPU_SECONDS = 5
_BASH = "/bin/bash"


class Unexpandable(Exception):
    """The words could not be expanded safely (deadline, too many, no bash); the message says why."""


def expand(
    commands: Sequence[Sequence[str]],
    directory: str | os.PathLike[str],
    *,
    deadline: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[list[str]]:
    """The argv bash makes of each command's words (their source text, quotes included) in `directory`.

    Raises `Unexpandable` when bash cannot answer within the deadline and limits."""
    if not commands:
        return []
    if not os.path.exists(_BASH):
        raise Unexpandable("there is no bash to say what a glob expands to")
    budget = min(EXPAND_TIMEOUT, remaining(deadline))
    if budget <= 0:
        raise Unexpandable("no time is left in this run to expand a glob")
    lines = [f"ulimit -v {_MEMORY_KIB} -t {_CPU_SECONDS} 2>/dev/null", "set -r"]
    lines += [f"set -- {' '.join(words)}; printf '%s\\0' \"$#\" \"$@\"" for words in commands]
    env = dict(child_environment() if environ is None else environ)
    try:
        process = subprocess.Popen(
            [_BASH, "--norc", "--noprofile", "-c", "\n".join(lines)], cwd=directory, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as error:
        raise Unexpandable(f"bash cannot be run to expand a glob ({error.strerror})") from None
    try:
        out = _read(process, budget)
    finally:
        _end(process)
    if process.returncode != 0:
        raise Unexpandable(f"bash could not expand the glob (exit {process.returncode}; too many matches?)")
    return _split(out.decode("utf-8", "surrogateescape").split("\0")[:-1], len(commands))


def _read(process: subprocess.Popen[bytes], budget: float) -> bytes:
    assert process.stdout is not None
    end = time.monotonic() + budget
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise Unexpandable(
                    f"bash did not finish expanding the glob within {budget:.3g} s (a symbolic link loop?)"
                )
            if not selector.select(left):
                continue
            data = os.read(process.stdout.fileno(), 65536)
            if not data:
                break
            size += len(data)
            if size > _MAX_BYTES:
                raise Unexpandable("a glob expands to too many file names to check")
            chunks.append(data)
    try:
        process.wait(max(end - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise Unexpandable(f"bash did not finish expanding the glob within {budget:.3g} s") from None
    return b"".join(chunks)


def _end(process: subprocess.Popen[bytes]) -> None:
    """Kill the expanding bash if it still runs (its own session: nothing else is in it), and reap it."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _split(fields: list[str], count: int) -> list[list[str]]:
    out: list[list[str]] = []
    i = 0
    for _ in range(count):
        if i >= len(fields) or not fields[i].isdigit():
            raise Unexpandable("bash's expansion of the glob could not be read")
        n = int(fields[i])
        if n > MAX_WORDS:
            raise Unexpandable(f"a glob expands to {n:,} words, over the {MAX_WORDS:,} the policy checks")
        out.append(fields[i + 1 : i + 1 + n])
        i += 1 + n
    if i != len(fields) or any(len(words) == 0 for words in out):
        raise Unexpandable("bash's expansion of the glob could not be read")
    return out

