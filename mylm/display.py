"""Terminal output for the CLI: the one sanitiser for foreign text, and the renderer of agent events."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import IO, Any

from .types import (
    ErrorEvent,
    Event,
    FinalResponseEvent,
    IterationStartEvent,
    ReasoningEvent,
    StopReason,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)

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
_BIDI = re.compile(r"[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def for_terminal(text: str) -> str:
    """Make model or tool text safe to print: escapes become visible, never executed by the terminal.

    Escape sequences are shown as `\\x1b[...` text, other control characters (carriage return included, so it
    cannot hide what precedes it) as `\\xNN`, and bidi overrides as `<U+202E>`; tab and newline pass.
    """
    text = _ESCAPES.sub(lambda m: m.group().replace("\x1b", "\\x1b").replace("\x9b", "\\x9b"), text)
    text = _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


@dataclass
class Style:
    """How decorations look: plain when colour is off (NO_COLOR, not a terminal)."""

    color: bool

    def dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.color else text

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.color else text

    def red(self, text: str) -> str:
        return f"\x1b[31m{text}\x1b[0m" if self.color else text


def summarise_output(output: str, *, lines: int = 6, width: int = 160) -> str:
    """The first few lines of a tool's output, each cut to `width`, with a count of what was left out."""
    rows = output.rstrip("\n").splitlines() or [""]
    shown = [r if len(r) <= width else r[: width - 1] + "…" for r in rows[:lines]]
    if len(rows) > lines:
        shown.append(f"… {len(rows) - lines} more lines")
    return "\n".join(shown)


class EventPrinter:
    """Renders agent events: the answer to `out`, everything else (thoughts, calls, results) to `err`.

    When `out` and `err` are the same terminal, text streams once, live, to `out`. When `out` is redirected,
    text streams dimmed to `err` and only the final answer is written to `out`, so `> answer.txt` captures
    just the answer.
    """

    def __init__(self, out: IO[str], err: IO[str], *, out_is_tty: bool, color: bool, verbose: bool) -> None:
        self.out, self.err = out, err
        self.out_is_tty = out_is_tty
        self.style = Style(color)
        self.verbose = verbose
        self._line_open: IO[str] | None = None
        self._streamed_answer = False

    def handle(self, event: Event) -> None:
        """Render one event."""
        if isinstance(event, IterationStartEvent):
            self._streamed_answer = False
        elif isinstance(event, TextEvent):
            self._text(event.text)
        elif isinstance(event, ReasoningEvent):
            self._write(self.err, self.style.dim(for_terminal(event.text)))
        elif isinstance(event, ToolCallEvent):
            self._end_line()
            args = json.dumps(dict(event.call.arguments), ensure_ascii=False)
            self._write(self.err, self.style.bold(f"→ {event.call.name} ") + for_terminal(args) + "\n")
        elif isinstance(event, ToolResultEvent):
            self._tool_result(event)
        elif isinstance(event, ErrorEvent) and not event.fatal:
            self._end_line()
            self._write(self.err, self.style.red(f"! {for_terminal(event.message)}") + "\n")
        elif isinstance(event, FinalResponseEvent):
            self._final(event)

    def _text(self, text: str) -> None:
        if self.out_is_tty:
            self._write(self.out, for_terminal(text))
            self._streamed_answer = True
        else:
            self._write(self.err, self.style.dim(for_terminal(text)))

    def _tool_result(self, event: ToolResultEvent) -> None:
        self._end_line()
        body = event.output if self.verbose else summarise_output(event.output)
        status = "error" if event.is_error else "done"
        header = f"  {status} in {event.duration:.2f}s"
        text = "\n".join("  │ " + line for line in for_terminal(body).splitlines())
        paint = self.style.red if event.is_error else self.style.dim
        self._write(self.err, paint(header) + "\n" + (self.style.dim(text) + "\n" if text else ""))

    def _final(self, event: FinalResponseEvent) -> None:
        streamed = self.out_is_tty and self._streamed_answer and event.stop_reason is not StopReason.DONE_TOOL
        self._end_line()
        if not streamed:
            self.out.write(for_terminal(event.text).rstrip("\n") + "\n")
            self.out.flush()

    def _write(self, stream: IO[str], text: str) -> None:
        if not text:
            return
        if self._line_open is not None and self._line_open is not stream:
            self._end_line()
        stream.write(text)
        stream.flush()
        self._line_open = None if text.endswith("\n") else stream

    def _end_line(self) -> None:
        if self._line_open is not None:
            self._line_open.write("\n")
            self._line_open.flush()
            self._line_open = None

    def finish(self) -> None:
        """Close any line left open by streamed text."""
        self._end_line()


def event_json(event: Event | dict[str, Any]) -> str:
    """One JSON Lines record for an event (or a plain mapping such as the run summary)."""
    data = event if isinstance(event, dict) else event.to_dict()
    return json.dumps(data, ensure_ascii=False)
