"""The tolerant streaming parser: pulls tool calls, reasoning and the answer out of raw model text.

One incremental engine serves streaming (`StreamParser.feed`) and whole text (`parse_completion`), so the
result never depends on how the text was chunked. Text that might be the start of a tag is held back until it
is decided, so no fragment like `<tool_` is shown. Work is linear: every scan resumes where the last stopped.

Decisions, in the order a careful reader makes them:
- `<think>`/`<thinking>` (closed or not) is reasoning and never runs. A lone `</think>` moves the visible text
  before it into `reasoning`; events already streamed are not retracted (streaming is append-only), so a
  template that pre-opens `<think>` should pass `reasoning_open=True`, which streams that text as reasoning.
- Markdown: a block inside inline code is text; a block inside a fence runs only if the fence holds nothing
  but blocks and no prose follows the fence (a stray wrapper), else it was an example.
- Block ends are structural (see `blockscan`); bodies are decoded by `callblock`.
- `<observation>` (or Hermes `<tool_response>`) outside code is a fabricated result: the rest is discarded.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..core.types import ReasoningEvent, TextEvent, ToolCall
from .blocks import BlockSteps
from .blockscan import BlockScan, partial_suffix
from .callblock import decode_block
from .canonical import format_tool_call
from .drift import ToolNames, registry
from .fences import Fence
from .jsoncalls import CallHold
from .outside import OutsideSteps
from .parsed import CallParsed, ParsedTurn, ParseEvent
from .readings import WholeReplyReadings
from .reasoning import Vocabulary, vocabulary
from .state import BLOCK, DISCARD, FINAL, OUT, THINK, closer_pattern
from .structure import INVENTED, LineContext, may_be_invented
from .tags import (
    FINAL_CLOSE,
    FINAL_OPEN,
    OBSERVATION_OPEN,
    REASONING_DIALECTS,
    TOOL_CLOSE,
    TOOL_OPEN,
    ReasoningDialect,
)

_TICKS = re.compile(r"`+")
_FINAL_CLOSE_RE = re.compile(re.escape(FINAL_CLOSE), re.IGNORECASE)
#: In a block, text is processed every this many characters even without a `/`: a block that ends without its
#: end tag (complete parameters, then prose) is still noticed promptly.
_HIDDEN_STEP = 256
#: Stop strings that may arrive half-written at the very end of a stream (the server stopped mid-way).
_HALF_STOPS = (TOOL_CLOSE, OBSERVATION_OPEN)


def parse_block(body: str, *, at_end: bool = False) -> tuple[ToolCall | None, str | None]:
    """Decode the inside of one `<tool_code>` block into a call, or an error message for the model."""
    return decode_block(body, "tool_code", at_end=at_end)


class StreamParser(OutsideSteps, BlockSteps, WholeReplyReadings):
    """Feed model text chunk by chunk; get display-safe events; read `result` after `close()`.

    `reasoning_open`: True when the prompt ended inside `<think>` (the chat template pre-opened it), so the reply
    starts as reasoning; False when it is known not to; None (unknown) holds calls back until the reply shows
    which (a `<think>` of its own, a lone `</think>`, or the end), because a lone `</think>` makes everything
    before it reasoning. `tools`: the tool names (or name to argument names) in play, which lets calls drifted
    into other formats run when their reading is unambiguous (see `drift`); without it they are not read.
    `coalesce`: visible text is processed once this many characters have arrived, or at once when a
    chunk holds `>` (every tag ends with it), which keeps token-sized chunks cheap; once calls are not held
    back (see `reasoning_open`), a call is emitted by the `feed()` that completes it. Use `coalesce=1` for
    per-token display, or `flush()` when the network idles.
    `multiple_calls=False`: the turn ends where its first call ends (what follows is not part of it, and
    `finished` says the rest of the stream need not be read).
    """

    def __init__(
        self,
        *,
        reasoning_open: bool | None = None,
        coalesce: int = 16,
        multiple_calls: bool = True,
        tools: ToolNames | None = None,
        reasoning: tuple[ReasoningDialect, ...] = REASONING_DIALECTS,
    ) -> None:
        # The default table is the common case: no hashing of the table per reply.
        default = reasoning is REASONING_DIALECTS
        self._vocab = vocab = _default_vocabulary() if default else vocabulary(tuple(reasoning))
        self._outside_tags = vocab.outside_set
        self._think_closes = vocab.closes  # until an opener says which dialect: any closer ends reasoning
        self._think_close_re = closer_pattern(self._think_closes)
        self._multiple_calls = multiple_calls
        self._tools = registry(tools)
        # Shown text that may turn out to be a JSON call (a `json` fence, a `{` line) is held back until decided.
        self._json_hold = CallHold(self._tools) if self._tools else None
        self._json_taken = False
        # The model presented a block as quoted or refused (see `quoting`): the text keeps it, and the readings
        # of calls in text (drifted forms, other spellings, JSON) must not run it, nor anything else it quotes.
        self._quoted = False
        self._call_at: list[int] = []  # for each call, where it stood among the thought pieces
        # Unknown whether the template opened reasoning: a later lone `</think>` would make a call written
        # before it reasoning, so calls are held (not emitted, the stream not closed early) until that is known.
        self._hold = reasoning_open is None
        self._held_raw: list[str] = []
        self._emitted = 0
        self._skipped: list[str] = []
        self._coalesce = max(1, coalesce)
        self._threshold = self._coalesce
        self._trigger = ">"
        self._chunks: list[str] = []
        self._joined = 0
        self._waiting = 0
        self._buf = ""
        self._pos = 0
        self._base = 0
        self._state = THINK if reasoning_open else OUT
        self._events: list[ParseEvent] = []
        self._run_text: list[str] = []
        self._run_reasoning: list[str] = []
        self._line_blank = True
        self._inline = 0
        self._long_run = ""
        self._fence: Fence | None = None
        self._scan: BlockScan | None = None
        self._block_kind = ""
        self._block_open = ""
        self._block_parts: list[str] = []
        self._block_fenced = False
        self._calls: list[ToolCall] = []
        self._errors: list[str] = []
        self._thought: list[str] = []
        self._reasoning: list[str] = []
        self._final: list[str] | None = None
        self._discard_at: int | None = None
        self._made_up = False  # the turn ended where the model began writing a tool result itself
        self._ambiguous_example = False
        self._lone_closer: tuple[int, str] | None = None  # (thought piece index, tag) of the first stray end tag
        self._think_unclosed = bool(reasoning_open)
        self._respelled = False  # this parser reads a reply already rewritten to the plain spelling
        self._ctx = LineContext()
        self._dtd_at, self._dtd_tail, self._dtd_seen = 0, "", False
        # After a call, every line start is checked for an invented result (`Observation:`, `Result:`, …).
        self._watch = False
        self._line_start = False
        self._closed = False
        self.result: ParsedTurn | None = None
        self._steps = (self._step_outside, self._step_think, self._step_block, self._step_final, self._step_discard)

    # ------------------------------------------------------------------------------------------ public API

    @property
    def calls_read(self) -> tuple[ToolCall, ...]:
        """Every call read so far, including those not yet emitted because it is unknown whether the template
        opened reasoning (a later lone `</think>` would make them drafts). A consumer watching for a model that
        writes one call again and again needs them: held calls are only emitted at `close()`."""
        return tuple(self._calls)

    @property
    def finished(self) -> bool:
        """True once no further text can change the result: a fabricated observation began, or (one call per
        turn) the call is complete. A consumer can stop reading the stream then."""
        return self._state == DISCARD

    def feed(self, chunk: str) -> list[ParseEvent]:
        """Add text; return the events it completes."""
        # The hot path for token-sized chunks: nothing but bookkeeping until a tag may have ended (`>`) or
        # enough text has arrived for the current state (after close() the threshold forces the check below).
        self._chunks.append(chunk)
        self._waiting += len(chunk)
        if self._waiting < self._threshold and self._trigger not in chunk:
            return []
        if self._closed:
            raise RuntimeError("feed() after close()")
        return self._drain(final=False)

    def flush(self) -> list[ParseEvent]:
        """Process everything fed so far now, without ending the stream (e.g. when the network goes idle)."""
        if self._closed or not self._waiting:
            return []
        return self._drain(final=False)

    def close(self) -> list[ParseEvent]:
        """Mark the end of the text; return the remaining events and set `result`."""
        if self._closed:
            return []
        self._drop_half_stop()
        events = self._drain(final=True)
        self._closed, self._threshold = True, -1
        self._events = events
        if self._state == BLOCK:
            self._finish_block("")
        if self._fence is not None:
            self._end_fence_content()
        self._refused_after()
        self._hold = False
        if not self._quoted:
            self._recover_missing_opener()
            self._recover_truncated_tag()
            self._recover_json_calls()
            self._recover_spelling()
            self._recover_bare_json()
            self._recover_drift()
            self._recover_bare_name()
        self._flush()
        if self._json_hold is not None:
            shown = self._json_hold.finish()
            if not self._json_taken:
                shown += self._json_hold.release()  # it was text after all
            if shown:
                self._events.append(TextEvent(shown))
        for call in self._calls[self._emitted :]:
            self._events.append(CallParsed(call))
        self._emitted = len(self._calls)
        self.result = self._verdict()
        return events

    def _drop_half_stop(self) -> None:
        """A stop string the server cut off half-way (`…</tool_co`) at the very end is not text: drop it."""
        if self._state not in (OUT, FINAL) or self._fence is not None:
            return
        self._buf += "".join(self._chunks[self._joined :])
        self._joined, self._waiting = len(self._chunks), 0
        tail = self._buf[self._pos :].lower()
        for stop in _HALF_STOPS:
            # Two characters at least: a lone "<" ending a reply is more likely text.
            for n in range(min(len(stop) - 1, len(tail)), 1, -1):
                if stop.startswith(tail[-n:]):
                    self._buf = self._buf[:-n]
                    if self._discard_at is None:
                        self._discard_at = sum(len(c) for c in self._chunks) - n
                    self._made_up = self._made_up or stop == OBSERVATION_OPEN
                    return

    # ---------------------------------------------------------------------------------------------- engine

    def _drain(self, *, final: bool) -> list[ParseEvent]:
        new = "".join(self._chunks[self._joined :])
        self._joined, self._waiting = len(self._chunks), 0
        if self._pos:
            self._base += self._pos
            self._buf, self._pos = self._buf[self._pos :], 0
        if self._state == OUT and not self._buf and self._fence is None and not self._long_run and \
                not self._watch and self._vocab.plain.fullmatch(new) and "```" not in new and not new.endswith("`"):
            # Prose with nothing pending and no tag or fence in sight: only inline code and line starts change.
            self._base += len(new)
            self._thought.append(new)
            self._track_lines(new)
            hold = self._json_hold
            shown = new if hold is None or hold.quiet and "\n" not in new else hold.show(new)
            return [TextEvent(shown)] if shown else []
        if self._state == BLOCK and not self._buf and self._scan is not None and self._scan.inside_string(new):
            # Inside a JSON string of a block: hidden, and nothing in it can end the block.
            self._base += len(new)
            self._block_parts.append(new)
            self._threshold, self._trigger = _HIDDEN_STEP, "/"
            return []
        self._buf += new
        self._events = []
        steps = self._steps
        while self._pos < len(self._buf) and steps[self._state](final):
            pass
        self._flush()
        # Hidden text (a block body, a discarded tail) needs no display latency, so it is processed in big steps.
        # What must be seen at once: outside, any tag's end (`>`); in a block, the start of an end tag (`/`),
        # then its `>` while part of a tag is held back; after a fabricated observation, nothing.
        state = self._state
        if state == BLOCK:
            self._threshold, self._trigger = _HIDDEN_STEP, ">" if self._pos < len(self._buf) else "/"
        elif state == DISCARD:
            self._threshold, self._trigger = 1 << 16, "\uffff\uffff"
        else:
            self._threshold, self._trigger = self._coalesce, ">"
        return self._events

    def _track_lines(self, text: str) -> None:
        """Follow inline code spans and line starts through text that holds no tag and no fence."""
        inline, line_blank = self._inline, self._line_blank
        newline = text.rfind("\n")
        if newline >= 0:
            # A newline closes any inline span and starts a blank line: only the text after the last one
            # matters (a long chunk is not walked tick by tick).
            inline, line_blank, text = 0, True, text[newline + 1 :]
        if "`" in text:
            for match in _TICKS.finditer(text):
                run = match.end() - match.start()
                inline = 0 if inline == run else inline or run
            line_blank = False
        elif newline >= 0:
            line_blank = not text or text.isspace()
        elif not text.isspace():
            line_blank = False
        self._inline, self._line_blank = inline, line_blank

    def _flush(self) -> None:
        if self._run_text:
            text = "".join(self._run_text)
            self._run_text = []
            hold = self._json_hold
            if hold is not None and not (hold.quiet and "\n" not in text):
                text = hold.show(text)
            if text:
                self._events.append(TextEvent(text))
        if self._run_reasoning:
            self._events.append(ReasoningEvent("".join(self._run_reasoning)))
            self._run_reasoning = []

    def _release_json_hold(self, *, restart: bool = False) -> None:
        """Something else decided the turn (a call, reasoning): text held as a possible JSON call is shown."""
        if self._json_hold is None:
            return
        self._flush()
        held = self._json_hold.release()
        if held:
            self._events.append(TextEvent(held))
        if restart:  # the thought starts again (a lone reasoning closer): read it as a new text
            self._json_hold = CallHold(self._json_hold.tools)

    def _reparse(self, text: str) -> ParsedTurn:
        """`text` (the reply rewritten to the plain spelling) read by a parser like this one, once."""
        parser = StreamParser(reasoning_open=False, multiple_calls=self._multiple_calls, tools=self._tools,
                              reasoning=self._vocab.dialects)
        parser._respelled = True
        parser.feed(text)
        parser.close()
        assert parser.result is not None
        return parser.result

    def _emit_text(self, text: str) -> None:
        if self._run_reasoning:
            self._flush()
        self._run_text.append(text)
        self._thought.append(text)
        if self._state == FINAL and self._final is not None:
            self._final.append(text)

    def _emit_reasoning(self, text: str) -> None:
        if text:
            if self._run_text:
                self._flush()
            self._run_reasoning.append(text)
            self._reasoning.append(text)

    def _visible(self, text: str) -> None:
        """Visible text outside blocks: it may decide a pending fence, and it is shown."""
        if not text.isspace():
            self._line_blank = False
            self._long_run = ""
            if self._fence is not None:
                self._content_in_fence()
        elif self._fence is not None and self._fence.held:
            self._fence.held.append(text)
            return
        self._emit_text(text)

    # ------------------------------------------------------------------------------------ think, final, rest

    def _invented(self, final: bool) -> bool | None:
        """At a line start after a call: whether the line invents a result (None: more text must decide)."""
        buf, pos = self._buf, self._pos
        nl = buf.find("\n", pos, pos + 80)
        line = buf[pos : nl if nl >= 0 else pos + 80]
        if INVENTED.match(line):
            return True
        if nl < 0 and not final and len(buf) - pos < 80 and may_be_invented(line):
            return None
        return False

    def _step_think(self, final: bool) -> bool:
        buf, pos = self._buf, self._pos
        match = self._think_close_re.search(buf, pos)
        if match is not None:
            self._emit_reasoning(buf[pos : match.start()])
            self._pos, self._state, self._think_unclosed = match.end(), OUT, False
            return True
        keep = 0 if final else partial_suffix(buf, pos, self._think_closes)
        self._emit_reasoning(buf[pos : len(buf) - keep])
        self._pos = len(buf) - keep
        return False

    def _step_final(self, final: bool) -> bool:
        buf, pos = self._buf, self._pos
        match = _FINAL_CLOSE_RE.search(buf, pos)
        stop = match.start() if match else len(buf) - (0 if final else partial_suffix(buf, pos, (FINAL_CLOSE,)))
        if stop > pos:
            self._emit_text(buf[pos:stop])
        self._pos = stop
        if match is None:
            return False
        self._pos, self._state = match.end(), OUT
        return True

    def _step_discard(self, final: bool) -> bool:
        self._pos = len(self._buf)
        return False

@lru_cache(maxsize=1)
def _default_vocabulary() -> Vocabulary:
    return vocabulary(REASONING_DIALECTS)


def parse_completion(
    text: str, *, reasoning_open: bool | None = None, multiple_calls: bool = True, tools: ToolNames | None = None,
    reasoning: tuple[ReasoningDialect, ...] = REASONING_DIALECTS,
) -> ParsedTurn:
    """Parse a whole completion; the same result `StreamParser` gives for any chunking of `text`."""
    parser = StreamParser(reasoning_open=reasoning_open, multiple_calls=multiple_calls, tools=tools,
                          reasoning=reasoning)
    parser.feed(text)
    parser.close()
    assert parser.result is not None
    return parser.result


__all__ = [
    "FINAL_CLOSE",
    "FINAL_OPEN",
    "OBSERVATION_OPEN",
    "TOOL_CLOSE",
    "TOOL_OPEN",
    "CallParsed",
    "ParseEvent",
    "ParsedTurn",
    "ReasoningEvent",
    "StreamParser",
    "TextEvent",
    "format_tool_call",
    "parse_block",
    "parse_completion",
]
