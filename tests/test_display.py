"""The terminal sanitiser (THREATS T8) and the event printers: what reaches stdout and stderr, and how."""

from __future__ import annotations

import io
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mylm.cli.display import (
    EventPrinter,
    JsonPrinter,
    Screen,
    for_terminal,
    json_text,
    quote_for_terminal,
    text_rows,
)
from mylm.core.redact import Redactor
from mylm.core.types import (
    ErrorEvent,
    FinalResponseEvent,
    IterationStartEvent,
    ReasoningEvent,
    StepCompleteEvent,
    StopReason,
    TextEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
)

#: Every C0 and C1 control and DEL: 32 + 32 + 1 = 65 code points.
CONTROLS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))]
#: What may reach the terminal raw: no control but tab and newline, no bidi control.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")

PAYLOADS = {
    "clear screen": "\x1b[2J\x1b[H",
    "cursor up, erase line": "ok\x1b[1A\x1b[2K",
    "OSC 52 clipboard (BEL)": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "OSC 52 clipboard (ST)": "\x1b]52;c;cm0gLXJmIH4=\x1b\\",
    "OSC 8 link": "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    "OSC 0 title": "\x1b]0;pwned\x07",
    "8-bit CSI": "\x9b2J",
    "carriage return hides text": "rm -rf ~/proj\r ls -la",
    "backspaces": "rm -rf /\x08\x08\x08\x08\x08\x08\x08\x08ls",
    "concealed text": "\x1b[8msecret\x1b[28m",
    "right-to-left override": "txt.\u202eexe",
    "bidi isolate": "a\u2066b\u2069c",
    "DCS": "\x1bP1$r\x1b\\",
    "unterminated OSC": "\x1b]0;never ends",
}


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_display_sanitiser_neutralises_each_payload(payload: str) -> None:
    shown = for_terminal(payload)
    assert not UNSAFE.search(shown), repr(shown)
    assert "\x1b" not in shown


def test_display_sanitiser_shows_the_carriage_return_that_hides_a_command() -> None:
    assert for_terminal("rm -rf ~/proj\r ls -la") == "rm -rf ~/proj\\x0d ls -la"
    assert for_terminal("txt.\u202eexe") == "txt.<U+202E>exe"


@pytest.mark.parametrize("control", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_display_sanitiser_every_control_code_point(control: str) -> None:
    shown = for_terminal(f"a{control}b{control}[31m{control}]0;t\x07c")
    if control in "\t\n":
        assert control in shown
    assert not UNSAFE.search(shown), repr(shown)


@given(st.text(alphabet=st.sampled_from([*CONTROLS, "[", "]", ";", "\\", "a", "0", "\u202e", "\u2066", "é"])))
def test_display_sanitiser_fuzzed_mixtures(text: str) -> None:
    assert not UNSAFE.search(for_terminal(text))


@given(st.text(alphabet=st.sampled_from([*CONTROLS, "'", "\\", "a", "\u202e"])))
def test_display_quoted_values_stay_on_one_line_with_nothing_hidden(text: str) -> None:
    shown = quote_for_terminal(text)
    assert not UNSAFE.search(shown) and "\n" not in shown and "\t" not in shown
    assert shown.startswith("'") and shown.endswith("'")


def test_display_sanitiser_keeps_ordinary_text() -> None:
    text = "Plain text, tabs\tand\nnewlines, unicode: héllo 你好 ✓"
    assert for_terminal(text) == text


def test_display_text_rows_counts_wrapping_and_refuses_uncertain_widths() -> None:
    assert text_rows("abc", 80) == 1
    assert text_rows("abc\n", 80) == 2
    assert text_rows("x" * 80, 80) == 1
    assert text_rows("x" * 81, 80) == 2
    assert text_rows("你好" * 20, 80) == 1 and text_rows("你好" * 21, 80) == 2
    assert text_rows("\tx", 8) == 2
    assert text_rows("smile 😀", 80) is None


# ------------------------------------------------------------------------------------------ the printer


class Recorder:
    """A fake spinner that records what the printer asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self, label: str) -> None:
        self.calls.append(f"start {label}")

    def stop(self) -> None:
        self.calls.append("stop")


def printer(*, out_tty: bool, same: bool = False, color: bool = False, **kwargs: object) -> EventPrinter:
    screen = Screen(out_is_tty=out_tty, same_terminal=same, color=color, size=lambda: (80, 24))
    return EventPrinter(io.StringIO(), io.StringIO(), screen=screen, **kwargs)  # type: ignore[arg-type]


def tool_turn(thought: str = "I will look.\n") -> list[object]:
    call = ToolCall("execute_command", {"command": "ls"}, id="call_1_1")
    return [
        IterationStartEvent(1, 10),
        TextEvent(thought),
        ToolCallEvent(call),
        ToolResultEvent("call_1_1", "execute_command", "a\nb\n", False, 0.01),
        IterationStartEvent(2, 10),
        TextEvent("The answer "),
        TextEvent("is 42."),
        FinalResponseEvent("The answer is 42.", StopReason.FINAL_ANSWER),
    ]


def run(p: EventPrinter, events: list[object]) -> tuple[str, str]:
    for event in events:
        p.handle(event)  # type: ignore[arg-type]
    p.finish()
    return p.out.getvalue(), p.err.getvalue()  # type: ignore[attr-defined]


def test_display_printer_same_terminal_redraws_the_thought_dimmed_and_leaves_the_answer() -> None:
    out, err = run(printer(out_tty=True, same=True, color=True), tool_turn())
    # The thought streamed to stdout, then was erased (cursor up one row, clear) and redrawn dimmed on stderr.
    assert out == "I will look.\nThe answer is 42.\n"
    assert "\r\x1b[1A\x1b[J\x1b[2mI will look.\n\x1b[0m" in err
    assert "\x1b[2mThe answer" not in err + out


def test_display_printer_does_not_redraw_what_it_cannot_measure() -> None:
    out, err = run(printer(out_tty=True, same=True, color=True), tool_turn("Looking 😀\n"))
    assert "\x1b[J" not in err and out.startswith("Looking 😀\n")


def test_display_printer_redraw_needs_one_terminal_and_colour() -> None:
    for p in (printer(out_tty=True, same=False, color=True), printer(out_tty=True, same=True, color=False)):
        out, err = run(p, tool_turn())
        assert "\x1b[J" not in err and out == "I will look.\nThe answer is 42.\n"


def test_display_printer_redirected_stdout_gets_only_the_answer() -> None:
    out, err = run(printer(out_tty=False), tool_turn())
    assert out == "The answer is 42.\n"
    assert "I will look." in err and "→ execute_command" in err and "│ a" in err


def test_display_printer_no_stream_shows_each_turn_once_complete() -> None:
    out, err = run(printer(out_tty=True, same=True, color=True, stream=False), tool_turn())
    assert out == "The answer is 42.\n"
    assert "\x1b[2mI will look.\x1b[0m" in err and "\x1b[J" not in err


def test_display_printer_stops_the_spinner_before_writing() -> None:
    waiting = Recorder()
    p = printer(out_tty=True, waiting=waiting)
    p.handle(IterationStartEvent(1, 10))
    assert waiting.calls == ["start waiting for the model"]
    p.handle(TextEvent("hi"))
    assert waiting.calls[-1] == "stop" and p.out.getvalue() == "hi"  # type: ignore[attr-defined]


def test_display_printer_compact_tool_output_and_full_with_verbose() -> None:
    result = ToolResultEvent("c", "execute_command", "\n".join(f"line {i}" for i in range(20)), False, 0.5)
    _, err = run(printer(out_tty=False), [result])
    assert "line 5" in err and "line 6" not in err and "14 more lines (-v shows all)" in err
    _, err = run(printer(out_tty=False, verbose=True), [result])
    assert "line 19" in err


def test_display_printer_errors_and_reasoning_go_to_stderr_sanitised() -> None:
    out, err = run(printer(out_tty=True), [ReasoningEvent("hmm \x1b[2J"), ErrorEvent("bad \x07", "format")])
    assert out == "" and "hmm \\x1b[2J" in err and "! bad \\x07" in err


def test_display_printer_redacts_a_secret_split_between_pieces() -> None:
    secret = "sk-test-CANARY-0123456789abcdef"
    p = printer(out_tty=True, redactor=Redactor([secret]))
    pieces = ["my key is sk-te", "st-CANARY-0123", "456789abcdef, ok"]
    out, err = run(p, [TextEvent(piece) for piece in pieces] + [FinalResponseEvent("".join(pieces), StopReason.FINAL_ANSWER)])
    assert "CANARY" not in out + err and "my key is [REDACTED], ok" in out


def test_display_json_printer_one_record_per_line_redacted() -> None:
    secret = "CANARY2-abcdefgh"
    out = io.StringIO()
    p = JsonPrinter(out, redactor=Redactor([secret]))
    for event in [IterationStartEvent(1, 1), TextEvent("token CANA"), TextEvent("RY2-abcdefgh done"),
                  FinalResponseEvent(f"x {secret}", StopReason.FINAL_ANSWER)]:
        p.handle(event)
    p.finish()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert "CANARY2" not in out.getvalue()
    assert records[0]["type"] == "iteration_start" and records[-1]["type"] == "final"
    assert "".join(r["text"] for r in records if r["type"] == "text") == "token [REDACTED] done"


def test_display_printer_says_refused_for_a_denied_call() -> None:
    call = ToolCall("execute_command", {"command": "rm -rf build"}, id="call_1_1")
    events = [
        IterationStartEvent(1, 10), ToolCallEvent(call),
        ToolResultEvent("call_1_1", "execute_command", "the user declined it", True, 0.0),
        StepCompleteEvent("call_1_1", "denied"),
        FinalResponseEvent("ok", StopReason.FINAL_ANSWER),
    ]
    _, err = run(printer(out_tty=False), events)
    assert "  refused\n" in err and "error in" not in err


@pytest.mark.parametrize("char", [*CONTROLS, "\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)),
                                  *map(chr, range(0x2066, 0x206A)), "\u2028", "\u2029", "\ud800"])
def test_display_json_text_escapes_what_a_terminal_would_act_on(char: str) -> None:
    """Review F10: `--json` keeps UTF-8 readable but never writes C1, DEL or bidi controls raw."""
    value = {"text": f"a{char}b é 😀", char: [char]}
    text = json_text(value, indent=2)
    assert not UNSAFE.search(text) and "\ud800" not in text
    assert json.loads(text) == value and "é 😀" in text


def test_display_printer_says_a_tool_stopped_by_ctrl_c_was_interrupted() -> None:
    # Issue 20: Ctrl-C during a command was labelled "error".
    from mylm.agent.tool_runner import TOOL_INTERRUPTED

    result = ToolResultEvent("c", "execute_command", TOOL_INTERRUPTED, True, 2.5)
    _, err = run(printer(out_tty=False), [result, StepCompleteEvent("c", "interrupted")])
    assert err.splitlines()[0] == "  interrupted after 2.50s" and "error" not in err
