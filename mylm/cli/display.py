"""Terminal output for the CLI: the one sanitiser for foreign text, and the printers of agent events."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from ..core.jsontext import text_json
from ..core.redact import Redactor, StreamRedactor
from ..core.types import (
    CompactionEvent,
    ErrorEvent,
    Event,
    FinalResponseEvent,
    IterationStartEvent,
    ReasoningEvent,
    StepCompleteEvent,
    StopReason,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from ..core.words import counted

# Escape sequences a terminal would execute: CSI, OSC (ended by BEL or ST), DCS/SOS/PM/APC, 8-bit CSI,
# and any other two-byte ESC sequence.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -~]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Bidi embeddings, overrides and isolates, and the line/paragraph separators some terminals act on.
_BIDI = re.compile(r"[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def for_terminal(text: str) -> str:
    """Make model or tool text safe to print: escapes become visible, never executed by the terminal.

    Escape sequences are shown as `\\x1b[...` text, other control characters (carriage return included, so it
    cannot hide what precedes it) as `\\xNN`, and bidi overrides as `<U+202E>`; tab and newline pass.
    """
    text = _ESCAPES.sub(lambda m: m.group().replace("\x1b", "\\x1b").replace("\x9b", "\\x9b"), text)
    text = _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


#: What `json.dumps(ensure_ascii=False)` leaves raw but a terminal acts on: DEL and C1 controls (0x9b is CSI), bidi
#: controls, line separators, and lone surrogates (which would also fail to encode).
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")


def json_text(value: Any, *, indent: int | None = None) -> str:
    """JSON for stdout: readable UTF-8, but every character a terminal would act on written as a `\\uXXXX` escape.

    Escaping after `json.dumps` is sound: outside strings JSON is plain ASCII, so each match is inside a string.
    """
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def quote_for_terminal(value: object) -> str:
    """A value on one line, quoted like `repr` but with every control shown as `\\xNN` (a CR as `\\x0d`).

    For approval prompts: the user must see exactly what will run, so nothing may be hidden, wrapped or executed.
    """
    if not isinstance(value, str):
        return for_terminal(repr(value))
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
    return "'" + for_terminal(escaped) + "'"


def text_rows(text: str, columns: int) -> int | None:
    """How many terminal rows `text` (already sanitised) fills from column 0, or None when that is uncertain.

    Uncertain means characters whose width terminals disagree on (emoji, ambiguous East Asian, combining marks):
    a wrong count would erase lines that are not ours, so the caller then leaves the screen alone.
    """
    rows = 0
    for line in text.split("\n"):
        width = 0
        for char in line:
            if char == "\t":
                width += 8 - width % 8
            elif char < "\u0300":
                width += 1
            else:
                kind = unicodedata.east_asian_width(char)
                if kind in ("W", "F") and not _is_emoji(char):
                    width += 2
                elif kind in ("N", "Na", "H") and not unicodedata.combining(char) and not _is_emoji(char):
                    width += 1
                else:
                    return None
        rows += max(1, -(-width // max(1, columns)))
    return rows


def _is_emoji(char: str) -> bool:
    return "\U0001f000" <= char or "\u2600" <= char <= "\u27bf" or char in "\ufe0f\u200d"


@dataclass(frozen=True)
class Style:
    """How decorations look: plain when colour is off (NO_COLOR, not a terminal)."""

    color: bool

    def dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.color and text else text

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.color and text else text

    def red(self, text: str) -> str:
        return f"\x1b[31m{text}\x1b[0m" if self.color and text else text


def summarise_output(output: str, *, lines: int = 6, width: int = 160) -> str:
    """The first few lines of a tool's output, each cut to `width`, with a count of what was left out."""
    rows = output.rstrip("\n").splitlines() or [""]
    shown = [r if len(r) <= width else r[: width - 1] + "…" for r in rows[:lines]]
    if len(rows) > lines:
        shown.append(f"… {counted(len(rows) - lines, 'more line')} (-v shows all)")
    return "\n".join(shown)


class Waiting(Protocol):
    """Something drawn while nothing else is (the spinner); it must be erased before anything is printed."""

    def start(self, label: str) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Screen:
    """Where the printer writes: whether stdout is a terminal, the same one as stderr, and its size."""

    out_is_tty: bool = False
    #: stdout and stderr are one terminal: what is streamed to stdout can be redrawn from stderr.
    same_terminal: bool = False
    #: stdout and stderr are one file or pipe that is not a terminal (`> log 2>&1`, a CI log): text streamed
    #: to stderr would then be followed by the same answer on stdout.
    shared_output: bool = False
    color: bool = False
    size: Callable[[], tuple[int, int]] = field(default=lambda: (80, 24))


class EventPrinter:
    """Renders agent events: the answer to `out`, everything else (thoughts, calls, results) to `err`.

    Text streams as it arrives, but whether it is the answer or a thought before a tool call is only known when
    the model's turn ends. So on a terminal it streams undimmed to `out` (most streamed text is the answer); if the
    turn then calls a tool, the thought just shown is erased and redrawn dimmed on `err`, so that dimmed text is
    always a thought and the answer is never dimmed. When `out` is redirected, text streams dimmed to `err` and
    only the final answer is written to `out`. With `stream=False` nothing is shown until each turn ends.
    """

    def __init__(
        self,
        out: IO[str],
        err: IO[str],
        *,
        screen: Screen,
        verbose: bool = False,
        stream: bool = True,
        redactor: Redactor | None = None,
        waiting: Waiting | None = None,
    ) -> None:
        self.out, self.err = out, err
        self.screen = screen
        self.style = Style(screen.color)
        self.verbose = verbose
        # Streaming to a redirected stdout means streaming to stderr; when both are one log, every answer
        # would appear twice, so each turn is shown once it is complete instead.
        self.stream = stream and (screen.out_is_tty or not screen.shared_output)
        self.redactor = redactor or Redactor()
        self.waiting = waiting
        self._text: StreamRedactor = self.redactor.stream()
        self._reasoning: StreamRedactor = self.redactor.stream()
        self._line_open: IO[str] | None = None
        self._turn_text: list[str] = []  # this turn's visible text, as shown (no-stream mode: not yet shown)
        self._live = False  # this turn's text went to `out` and nothing was printed after it
        self._streamed_answer = False
        self._pending_result: ToolResultEvent | None = None

    # ------------------------------------------------------------------------------------------ events

    def handle(self, event: Event) -> None:
        """Render one event."""
        if self._pending_result is not None and not isinstance(event, StepCompleteEvent):
            pending, self._pending_result = self._pending_result, None
            self._tool_result(pending, "error" if pending.is_error else "completed")
        if isinstance(event, IterationStartEvent):
            self._settle_thought()
            self._end_line()
            self._streamed_answer = False
            if self.waiting is not None:
                self.waiting.start("waiting for the model")
        elif isinstance(event, TextEvent):
            self._show_text(self._text.feed(event.text))
        elif isinstance(event, ReasoningEvent):
            self._show_text(self._text.flush())
            self._write(self.err, self.style.dim(for_terminal(self._reasoning.feed(event.text))))
        elif isinstance(event, ToolCallEvent):
            self._settle_thought()
            self._tool_call(event)
        elif isinstance(event, ToolResultEvent):
            # Shown when its step completes, which says whether the call failed or was refused.
            self._pending_result = event
        elif isinstance(event, StepCompleteEvent):
            if self._pending_result is not None:
                self._tool_result(self._pending_result, event.status)
                self._pending_result = None
        elif isinstance(event, ErrorEvent):
            self._settle_thought()
            if not event.fatal:
                self._write(self.err, self.style.red(f"! {for_terminal(self.redactor.redact(event.message))}") + "\n")
        elif isinstance(event, CompactionEvent):
            self._settle_thought()
            note = f"(older turns summarised: ~{event.tokens_before} -> ~{event.tokens_after} tokens)"
            self._write(self.err, self.style.dim(note) + "\n")
        elif isinstance(event, FinalResponseEvent):
            self._final(event)

    def make_room(self) -> None:
        """Before another line is written to the terminal (a log record): erase the spinner, end our line."""
        self._stop_waiting()
        self._end_line()

    def finish(self) -> None:
        """Stop the spinner and close any line left open by streamed text."""
        if self._pending_result is not None:
            pending, self._pending_result = self._pending_result, None
            self._tool_result(pending, "error" if pending.is_error else "completed")
        self._stop_waiting()
        self._show_text(self._text.flush())
        self._end_line()

    # -------------------------------------------------------------------------------------------- text

    def _show_text(self, text: str) -> None:
        if not text:
            return
        safe = for_terminal(text)
        self._turn_text.append(safe)
        if not self.stream:
            return
        if self.screen.out_is_tty:
            self._write(self.out, safe)
            self._live, self._streamed_answer = True, True
        else:
            self._write(self.err, self.style.dim(safe))

    def _settle_thought(self) -> None:
        """This turn's text turned out to be a thought (a tool call or a problem followed it): show it as one."""
        self._show_text(self._text.flush())
        self._flush_reasoning()
        text = "".join(self._turn_text)
        self._turn_text.clear()
        if not text.strip():
            self._live = False
            return
        if not self.stream:
            self._write(self.err, self.style.dim(text.strip("\n")) + "\n")
        elif self._live and self.screen.same_terminal and self.style.color:
            self._redraw_dimmed(text)
        self._live = False
        self._streamed_answer = False

    def _redraw_dimmed(self, text: str) -> None:
        columns, lines = self.screen.size()
        rows = text_rows(text, columns)
        if rows is None or rows >= lines:
            return  # cannot be sure what to erase, or part of it has scrolled away: leave it as it is
        up = f"\x1b[{rows - 1}A" if rows > 1 else ""
        self._stop_waiting()
        self.err.write("\r" + up + "\x1b[J" + self.style.dim(text))
        self.err.flush()
        self._line_open = None if text.endswith("\n") else self.err

    def _flush_reasoning(self) -> None:
        rest = self._reasoning.flush()
        if rest:
            self._write(self.err, self.style.dim(for_terminal(rest)))

    # ------------------------------------------------------------------------------------------- tools

    def _tool_call(self, event: ToolCallEvent) -> None:
        self._end_line()
        args = text_json(dict(event.call.arguments))
        args = for_terminal(self.redactor.redact(args))
        if not self.verbose and len(args) > 300:
            args = args[:299] + "…"
        self._write(self.err, self.style.bold(f"→ {for_terminal(event.call.name)} ") + args + "\n")

    def _tool_result(self, event: ToolResultEvent, status: str) -> None:
        self._end_line()
        output = self.redactor.redact(event.output)
        body = output if self.verbose else summarise_output(output)
        if status == "denied":
            header = "  refused"
        elif status == "interrupted":
            header = f"  interrupted after {event.duration:.2f}s"
        else:
            header = f"  {'error' if event.is_error else 'done'} in {event.duration:.2f}s"
        text = "\n".join("  │ " + line for line in for_terminal(body).splitlines())
        paint = self.style.red if event.is_error else self.style.dim
        self._write(self.err, paint(header) + "\n" + (self.style.dim(text) + "\n" if text else ""))

    # ------------------------------------------------------------------------------------------ answer

    def _final(self, event: FinalResponseEvent) -> None:
        self._show_text(self._text.flush())
        self._flush_reasoning()
        streamed = (
            self.stream
            and self.screen.out_is_tty
            and self._streamed_answer
            and event.stop_reason is not StopReason.DONE_TOOL
        )
        self._turn_text.clear()
        self._live = False
        self._end_line()
        if not streamed:
            self._write(self.out, for_terminal(self.redactor.redact(event.text)).rstrip("\n") + "\n")

    # ---------------------------------------------------------------------------------------- plumbing

    def _write(self, stream: IO[str], text: str) -> None:
        if not text:
            return
        self._stop_waiting()
        if self._line_open is not None and self._line_open is not stream:
            self._end_line()
        if stream is self.err:
            self._live = False  # something now follows the streamed text: it can no longer be redrawn
        stream.write(text)
        stream.flush()
        self._line_open = None if text.endswith("\n") else stream

    def _end_line(self) -> None:
        if self._line_open is not None:
            self._line_open.write("\n")
            self._line_open.flush()
            self._line_open = None

    def _stop_waiting(self) -> None:
        if self.waiting is not None:
            self.waiting.stop()


class JsonPrinter:
    """Writes each event as one JSON object per line (`--json`), redacted like everything else mylm prints."""

    def __init__(self, out: IO[str], *, redactor: Redactor | None = None) -> None:
        self.out = out
        self.redactor = redactor or Redactor()
        self._text = self.redactor.stream()
        self._reasoning = self.redactor.stream()

    def handle(self, event: Event) -> None:
        """Write one event (text is re-cut at word ends, so a secret split between two pieces is still caught)."""
        if isinstance(event, TextEvent):
            self._emit_text("text", self._text.feed(event.text))
            return
        if isinstance(event, ReasoningEvent):
            self._emit_text("reasoning", self._reasoning.feed(event.text))
            return
        self._flush()
        self.emit(event.to_dict())

    def emit(self, record: dict[str, Any]) -> None:
        """Write one record as a line."""
        self.out.write(json_text(self.redactor.redact_value(record)) + "\n")
        self.out.flush()

    def finish(self) -> None:
        """Write any text still held back."""
        self._flush()

    def _flush(self) -> None:
        self._emit_text("reasoning", self._reasoning.flush())
        self._emit_text("text", self._text.flush())

    def _emit_text(self, kind: str, text: str) -> None:
        if text:
            self.emit({"type": kind, "text": text})


def event_json(event: Event | dict[str, Any]) -> str:
    """One JSON Lines record for an event (or a plain mapping such as the run summary)."""
    data = event if isinstance(event, dict) else event.to_dict()
    return json_text(data)
