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
from . import markup
from .blockscan import (
    CLOSED,
    KINDS,
    MORE,
    WAIT,
    BlockScan,
    match_tag,
    partial_suffix,
)
from .callblock import decode_block, decode_calls
from .canonical import format_tool_call
from .corrections import bare_json_error, cut_off_tag, dtd_refused, several_calls_error
from .drift import ToolNames, find_drift, known_tool, looks_like_schema, recover_block, registry, schema_error
from .fences import MAX_RUN, Fence, Pending, fence_run
from .normalise import normalise_markup
from .parsed import CallParsed, ParsedTurn, ParseEvent
from .reasoning import BLOCK_TAGS, LONE_BLOCK_CLOSERS, Vocabulary, vocabulary
from .structure import INVENTED, OUTPUT_LABELS, PLAIN, LineContext, may_be_invented
from .tags import (
    DRIFT_OPENERS,
    FINAL_CLOSE,
    FINAL_OPEN,
    OBSERVATION_OPEN,
    OBSERVATION_TAGS,
    REASONING_DIALECTS,
    THINK_NAMES,
    TOOL_CLOSE,
    TOOL_OPEN,
    ReasoningDialect,
)
from .verdict import reply_calls, verdict

THINK_TAGS = THINK_NAMES
#: Other formats a call may drift into, by opener: the block kind, and what must follow the opener for it to be
#: a call rather than a mention (decided once `_DRIFT_WINDOW` characters, or the end of the reply, are there).
_DRIFT_FULL = {
    "<tool_call>":
        r"<tool_call>\s{0,64}(?:[{\[<`\"]|[A-Za-z_][\w.:-]{0,63}\s{0,16}(?:<arg_key>|</tool_call>|</arg_value>))",
    "<function=": r"<function=[\w.:-]{1,64}>",
    "<function_calls>": r"<function_calls>\s{0,64}<",
    "<invoke": r"<invoke\s+name\s*=\s*[\"'][\w.:-]{1,64}[\"']\s*>",
}
_DRIFT_RE = {tag: (DRIFT_OPENERS[tag], re.compile(full, re.IGNORECASE)) for tag, full in _DRIFT_FULL.items()}
_DRIFT_WINDOW = 160
_BLOCK_TAGS = BLOCK_TAGS
_LONE_CLOSERS = LONE_BLOCK_CLOSERS
_FENCE_TAGS = (*_BLOCK_TAGS, *OBSERVATION_TAGS)
_TICK_OR_NL = re.compile(r"`+|\n")
_NAME_OPEN = re.compile(r"<name\s*>", re.IGNORECASE)
_FINAL_CLOSE_RE = re.compile(re.escape(FINAL_CLOSE), re.IGNORECASE)
_MAX_BLOCKS = 100
#: A tag the reply ended inside: `<tool_co`, `<tool_code name="x`, `</parame`, `<list_d` (no `>` after it).
_OPEN_TAIL = re.compile(
    r"(?:^|(?<=[\s>]))<(?P<slash>/)?(?P<word>[A-Za-z_][\w-]{1,63})(?:[\s=][^<>]{0,200})?(?P<closed>>)?\s*\Z")
_CUT_WORDS = ("tool_code", "tool_call", "function", "function_calls", "invoke", "name", "parameters",
              "arguments", "parameter", "tool_name", "function-name", "function_name", "function_call", "tool_use")
#: In a block, text is processed every this many characters even without a `/`: a block that ends without its
#: end tag (complete parameters, then prose) is still noticed promptly.
_HIDDEN_STEP = 256
_OUT, _THINK, _BLOCK, _FINAL, _DISCARD = range(5)
#: Stop strings that may arrive half-written at the very end of a stream (the server stopped mid-way).
_HALF_STOPS = (TOOL_CLOSE, OBSERVATION_OPEN)


def parse_block(body: str, *, at_end: bool = False) -> tuple[ToolCall | None, str | None]:
    """Decode the inside of one `<tool_code>` block into a call, or an error message for the model."""
    return decode_block(body, "tool_code", at_end=at_end)


class StreamParser:
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
        self._think_close_re = _closer_pattern(self._think_closes)
        self._multiple_calls = multiple_calls
        self._tools = registry(tools)
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
        self._state = _THINK if reasoning_open else _OUT
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
    def finished(self) -> bool:
        """True once no further text can change the result: a fabricated observation began, or (one call per
        turn) the call is complete. A consumer can stop reading the stream then."""
        return self._state == _DISCARD

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
        if self._state == _BLOCK:
            self._finish_block("")
        if self._fence is not None:
            self._end_fence_content()
        self._hold = False
        self._recover_missing_opener()
        self._recover_truncated_tag()
        self._recover_spelling()
        self._recover_bare_json()
        self._recover_drift()
        self._flush()
        for call in self._calls[self._emitted :]:
            self._events.append(CallParsed(call))
        self._emitted = len(self._calls)
        self.result = self._verdict()
        return events

    def _drop_half_stop(self) -> None:
        """A stop string the server cut off half-way (`…</tool_co`) at the very end is not text: drop it."""
        if self._state not in (_OUT, _FINAL) or self._fence is not None:
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
                    return

    # ---------------------------------------------------------------------------------------------- engine

    def _drain(self, *, final: bool) -> list[ParseEvent]:
        new = "".join(self._chunks[self._joined :])
        self._joined, self._waiting = len(self._chunks), 0
        if self._pos:
            self._base += self._pos
            self._buf, self._pos = self._buf[self._pos :], 0
        if self._state == _OUT and not self._buf and self._fence is None and not self._long_run and \
                not self._watch and self._vocab.plain.fullmatch(new) and "```" not in new and not new.endswith("`"):
            # Prose with nothing pending and no tag or fence in sight: only inline code and line starts change.
            self._base += len(new)
            self._thought.append(new)
            self._track_lines(new)
            return [TextEvent(new)]
        if self._state == _BLOCK and not self._buf and self._scan is not None and self._scan.inside_string(new):
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
        if state == _BLOCK:
            self._threshold, self._trigger = _HIDDEN_STEP, ">" if self._pos < len(self._buf) else "/"
        elif state == _DISCARD:
            self._threshold, self._trigger = 1 << 16, "\uffff\uffff"
        else:
            self._threshold, self._trigger = self._coalesce, ">"
        return self._events

    def _track_lines(self, text: str) -> None:
        """Follow inline code spans and line starts through text that holds no tag and no fence."""
        inline, line_blank = self._inline, self._line_blank
        if "`" in text or "\n" in text:
            for match in _TICK_OR_NL.finditer(text):
                if match.group() == "\n":
                    inline, line_blank = 0, True
                else:
                    run = match.end() - match.start()
                    inline, line_blank = (0 if inline == run else inline or run), False
            tail = text[text.rfind("\n") + 1 :] if line_blank else ""
            line_blank = line_blank and (not tail or tail.isspace())
        elif not text.isspace():
            line_blank = False
        self._inline, self._line_blank = inline, line_blank

    def _flush(self) -> None:
        if self._run_text:
            self._events.append(TextEvent("".join(self._run_text)))
            self._run_text = []
        if self._run_reasoning:
            self._events.append(ReasoningEvent("".join(self._run_reasoning)))
            self._run_reasoning = []

    def _emit_text(self, text: str) -> None:
        if self._run_reasoning:
            self._flush()
        self._run_text.append(text)
        self._thought.append(text)
        if self._state == _FINAL and self._final is not None:
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

    # ------------------------------------------------------------------------------------------- outside

    def _step_outside(self, final: bool) -> bool:
        if self._fence is not None or self._long_run or self._watch:
            return self._step_outside_slow(final)
        # Prose outside any fence: one pass tracks inline code and line starts, and stops only where a decision
        # is needed (a tag, a possible fence line), so a long answer becomes one slice of text.
        buf, start = self._buf, self._pos
        n = len(buf)
        pos, inline, line_blank = start, self._inline, self._line_blank
        stop = n
        for match in self._vocab.fast.finditer(buf, start):
            i = match.start()
            if i > pos:
                nl = buf.rfind("\n", pos, i)
                if nl >= 0:
                    inline = 0
                    line_blank = nl + 1 == i or buf[nl + 1 : i].isspace()
                elif line_blank and not buf[pos:i].isspace():
                    line_blank = False
            c, run = buf[i], match.end() - i
            if c not in "`~":
                if not inline and self._outside_tags.match(buf, i, final) is not None:
                    stop = i
                    break
            elif line_blank and run >= 3 or run > MAX_RUN or match.end() == n and not final:
                stop = i
                break
            if c == "`":
                inline = 0 if inline == run else inline or run
            line_blank = False
            pos = match.end()
        else:
            if pos < n:
                nl = buf.rfind("\n", pos, n)
                if nl >= 0:
                    inline = 0
                    line_blank = nl + 1 == n or buf[nl + 1 : n].isspace()
                elif line_blank and not buf[pos:n].isspace():
                    line_blank = False
        if stop > start:
            self._emit_text(buf[start:stop])
            self._pos = stop
        self._inline, self._line_blank = inline, line_blank
        if stop >= n:
            return False
        if buf[stop] not in "`~":
            return self._step_tag(final) or stop > start
        return self._step_run(buf[stop], final) or stop > start

    def _step_outside_slow(self, final: bool) -> bool:
        """Inside or just after a code fence, or after a call: every line start and tag matters."""
        if self._line_start:  # set only after a call, or after a fence holding blocks (see `_watch`)
            fence = self._fence
            pending = fence is not None and fence.closed
            invented = self._invented(final) if fence is None or pending else False
            if invented is None:
                return False
            self._line_start = False
            if invented:
                if pending:
                    self._end_fence_content()  # a result after the fence: it was a wrapper, as before `<observation>`
                self._discard_at = self._base + self._pos
                self._state = _DISCARD
                return True
        buf, pos = self._buf, self._pos
        match = self._vocab.special.search(buf, pos)
        end = match.start() if match else len(buf)
        if end > pos:
            self._visible(buf[pos:end])
            self._pos = end
        if match is None:
            return False
        ch = match.group()
        if ch == "\n":
            self._visible("\n")
            self._pos = end + 1
            fence = self._fence
            self._line_blank, self._inline = True, 0
            self._line_start = self._watch or (fence is not None and fence.closed and fence.had_block)
            return True
        if ch[0] not in "`~":
            return self._step_tag(final) or self._pos > pos
        return self._step_run(ch, final) or self._pos > pos

    def _step_run(self, ch: str, final: bool) -> bool:
        """A run of backticks or tildes: a fence opener or closer at line start, else inline code or text."""
        buf, pos, fence = self._buf, self._pos, self._fence
        action, end = fence_run(buf, pos, line_blank=self._line_blank, fence=fence, long_run=self._long_run,
                                final=final)
        if action == "wait":
            return False
        self._pos = end
        if action == "long":
            self._visible(buf[pos:end])
            self._long_run = ch if end == len(buf) else ""
        elif action == "close":
            assert fence is not None
            line = fence.close(buf[pos:end])
            if line is not None:
                self._emit_text(line)
            self._line_blank = False
            if not fence.had_block:
                self._fence = None
        elif action == "open":
            if self._watch and fence is None and buf[pos:end].strip(" \t`~").lower() in OUTPUT_LABELS:
                # A fenced "output" block after a call: a result the model made up. The rest is discarded.
                self._discard_at = self._base + pos
                self._state = _DISCARD
                return True
            if fence is not None:
                self._content_in_fence()
            self._emit_text(buf[pos:end])
            run = len(buf[pos:end]) - len(buf[pos:end].lstrip(ch))
            self._fence = Fence(ch, run, thought_at=len(self._thought) - 1)
            self._inline, self._line_blank = 0, False
        else:
            if ch == "`" and (fence is None or fence.closed):
                run = end - pos
                self._inline = 0 if self._inline == run else self._inline or run
            self._visible(buf[pos:end])
        return True

    def _step_tag(self, final: bool) -> bool:
        buf, pos, fence = self._buf, self._pos, self._fence
        if self._inline:
            tag = None
        else:
            tag = match_tag(buf, pos, _FENCE_TAGS if fence and not fence.closed else self._vocab.outside, final)
            if tag is WAIT:
                return False
            if tag in _DRIFT_RE:
                if not final and len(buf) - pos < _DRIFT_WINDOW:
                    return False
                if not _DRIFT_RE[tag][1].match(buf, pos, pos + _DRIFT_WINDOW):
                    tag = None
        if tag is None:
            self._visible(buf[pos])
            self._pos = pos + 1
            return True
        text = buf[pos : pos + len(tag)]
        if (fence is None or fence.closed) and tag not in self._vocab.lone and tag not in self._vocab.envelope \
                and self._ctx.of(self._thought) != PLAIN:
            # In a blockquote or an indented code block: quoted or shown, never run (see `structure`).
            self._visible(text)
            self._pos = pos + len(text)
            return True
        if tag in _BLOCK_TAGS:
            if fence is not None and not fence.closed:
                fence.had_block = True
                if fence.tainted:
                    self._visible(text)
                    self._pos = pos + len(text)
                    return True
            elif fence is not None:
                self._end_fence_content()
            self._start_block(tag, text, fenced=fence is not None and not fence.closed)
            return True
        if tag in OBSERVATION_TAGS:
            if fence is not None and not fence.closed and not fence.held:
                self._visible(text)  # an observation shown inside a code example
                self._pos = pos + len(text)
                return True
            if fence is not None:
                self._end_fence_content()
            self._discard_at = self._base + pos
            self._state = _DISCARD
            return True
        if fence is not None:
            self._content_in_fence()
        self._pos = pos + len(tag)
        if tag in _LONE_CLOSERS:
            # An end tag with no block open: maybe the model left out the opening tag. Shown as text for now.
            if self._lone_closer is None:
                self._lone_closer = (len(self._thought), text)
            self._emit_text(text)
        elif tag in self._vocab.envelope:
            pass  # harmony's message envelope (`<|start|>assistant`, `<|end|>`): markup, not text
        elif tag in self._vocab.opens:
            self._state, self._think_unclosed = _THINK, True
            self._think_closes = self._vocab.closes_of[tag]
            self._think_close_re = _closer_pattern(self._think_closes)
            self._hold = False  # the reply opens its own reasoning: a later </think> closes that one
        elif tag in self._vocab.lone:
            # Reasoning the template opened: what was shown so far was thought (already streamed; not retracted).
            self._reasoning.extend(self._thought)
            self._thought.clear()
            self._ctx = LineContext()
            self._lone_closer = None
            # A block drafted in that reasoning (quoting `<tool_code>` or `<name>` while planning) was reasoning
            # too: its error is not the turn's, and it does not stop the calls after the closer.
            self._errors, self._skipped = [], []
            if self._hold:
                # Calls drafted before it were reasoning too: never run. (Calls already emitted, when the
                # template was known not to open reasoning, stay: streaming is append-only.)
                self._reasoning.extend(self._held_raw)
                del self._calls[self._emitted :]
                self._held_raw, self._hold = [], False
            if self._fence is not None:
                self._fence.thought_at = None
        else:
            self._state = _FINAL
            self._final = self._final if self._final is not None else []
        return True

    # ---------------------------------------------------------------------------------------------- fences

    def _content_in_fence(self) -> None:
        """Non-blank content in a fence, or prose after it: the fence's blocks were examples, shown as text."""
        fence = self._fence
        assert fence is not None
        for text in fence.release():
            self._emit_text(text)
        if fence.closed:
            self._fence = None

    def _end_fence_content(self) -> None:
        """The fence's content ends with nothing but blanks after it: a wrapper, so its blocks count."""
        fence = self._fence
        assert fence is not None
        self._fence = None
        self._ambiguous_example = self._ambiguous_example or fence.ambiguous
        pending = fence.wrapped()
        if pending and fence.thought_at is not None:
            self._thought[fence.thought_at] = ""  # the wrapper fence is not part of the thought
        for item in pending:
            self._commit(item.call, item.error)

    # ---------------------------------------------------------------------------------------------- blocks

    def _start_block(self, tag: str, text: str, *, fenced: bool) -> None:
        if len(self._calls) + len(self._errors) >= _MAX_BLOCKS:
            # A flood of blocks is not a reply anyone can use; stop spending work on it.
            self._errors.append(f"Your reply had more than {_MAX_BLOCKS} tool blocks; the rest was ignored.")
            self._discard_at = self._base + self._pos
            self._state = _DISCARD
            return
        kind = "tool_code" if tag == TOOL_OPEN else _DRIFT_RE[tag][0]
        keep_opener = kind in ("function", "invoke")  # the opener carries the tool's name
        self._scan = BlockScan(KINDS[kind], interrupts=self._vocab.lone)
        self._block_kind, self._block_fenced = kind, fenced
        self._block_open = "" if keep_opener else text
        self._block_parts = []
        if not keep_opener:
            self._pos += len(text)
        self._state = _BLOCK

    def _step_block(self, final: bool) -> bool:
        scan = self._scan
        assert scan is not None
        start = self._pos
        pos, outcome = scan.scan(self._buf, start, final)
        if pos > start:
            self._block_parts.append(self._buf[start:pos])
        self._pos = pos
        if outcome == MORE:
            return pos > start
        closer = ""
        if outcome == CLOSED:
            closer = self._buf[pos : pos + scan.close_len]
            self._pos = pos + scan.close_len
        self._finish_block(closer)
        return True

    def _finish_block(self, closer: str) -> None:
        body = "".join(self._block_parts)
        several = self._scan is not None and self._scan.names_after_params > 0
        calls, error = decode_calls(body, self._block_kind, at_end=not closer, several=several)
        if len(calls) > 1:
            self._finish_several(calls, self._block_open + body + closer)
            return
        call = calls[0] if calls else None
        if call is None and self._tools is not None and closer:
            # A complete block whose body is another format (a tool tag with attributes, `name` then JSON, …):
            # read against the registry, or keep the block's own error.
            call = recover_block(body, self._tools)
            error = error if call is None else None
        raw = self._block_open + body + closer
        if call is not None:
            call = ToolCall(call.name, call.arguments, raw=raw)
        self._state, self._scan, self._block_parts, self._line_blank = _OUT, None, [], True
        if self._block_fenced and self._fence is not None:
            self._fence.held.append(Pending(call, error, raw))
        else:
            self._commit(call, error)

    def _dtd_before(self) -> bool:
        """Whether the text shown so far declares a DTD or an entity (checked once per piece of text, with an
        overlap for a declaration split between pieces)."""
        pieces = self._thought
        if len(pieces) < self._dtd_at:
            self._dtd_at, self._dtd_tail, self._dtd_seen = 0, "", False  # the thought was rewritten (reasoning, recovery): read it again
        if not self._dtd_seen and len(pieces) > self._dtd_at:
            text = self._dtd_tail + "".join(pieces[self._dtd_at :])
            self._dtd_seen = "<!" in text and bool(markup.dtd_positions(text))
            self._dtd_at, self._dtd_tail = len(pieces), text[-80:]
        return self._dtd_seen

    def _finish_several(self, calls: tuple[ToolCall, ...], raw: str) -> None:
        """One block holding several name/parameters pairs: each is a call when a turn may make several, else
        the block is a correction (silently running one of them would drop the others)."""
        self._state, self._scan, self._block_parts, self._line_blank = _OUT, None, [], True
        if self._multiple_calls:
            items = [Pending(ToolCall(c.name, c.arguments, raw=format_tool_call(c)), None, raw) for c in calls]
        else:
            items = [Pending(None, several_calls_error(len(calls)), raw)]
        for item in items:
            if self._block_fenced and self._fence is not None:
                self._fence.held.append(item)
            else:
                self._commit(item.call, item.error)

    def _commit(self, call: ToolCall | None, error: str | None) -> None:
        if not self._multiple_calls and self._calls:
            return  # one call per turn: later blocks are not part of it
        if call is not None and error is None:
            call, error = self._checked(call)
        if call is not None and self._dtd_before():
            # `<!DOCTYPE …[<!ENTITY …>]>` before the block: its author expects the entities expanded, and mylm
            # never expands any; running the block with them literal would run something else. Refuse.
            call, error = None, dtd_refused()
        if call is not None and self._errors:
            # A turn runs in order: after a block that cannot be used, later ones would run out of sequence.
            self._skipped.append(call.name)
            return
        if call is not None:
            self._flush()
            self._calls.append(call)
            self._watch = True
            if self._hold:
                self._held_raw.append(call.raw)
                return
            self._events.append(CallParsed(call))
            self._emitted = len(self._calls)
            if not self._multiple_calls and not self._closed:
                # The turn ends where its call ends: the rest is not part of it (and need not be read).
                self._discard_at = self._base + self._pos
                self._state = _DISCARD
        elif error is not None:
            self._errors.append(error)

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
            self._pos, self._state, self._think_unclosed = match.end(), _OUT, False
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
        self._pos, self._state = match.end(), _OUT
        return True

    def _step_discard(self, final: bool) -> bool:
        self._pos = len(self._buf)
        return False

    def _recover_missing_opener(self) -> None:
        """`<name>x</name><parameters>…</parameters></tool_code>` with no `<tool_code>`: the opener was left out."""
        if self._calls or self._errors or self._final is not None or self._lone_closer is None:
            return
        index, closer = self._lone_closer
        if closer != TOOL_CLOSE:
            return  # `{…}</tool_call>` is recovered as bare JSON
        before = "".join(self._thought[:index])
        name = _NAME_OPEN.search(before)
        if name is None:
            return
        call, error = decode_block(before[name.start() :], "tool_code", at_end=False)
        if call is None:
            self._errors.append(f"Your reply has {TOOL_CLOSE} but no {TOOL_OPEN} before it. " + (error or ""))
            return
        raw = TOOL_OPEN + before[name.start() :] + closer
        self._thought[: index + 1] = [before[: name.start()]]
        self._commit(ToolCall(call.name, call.arguments, raw=raw), None)

    def _checked(self, call: ToolCall) -> tuple[ToolCall | None, str | None]:
        """A decoded call that is still unusable: its parameters are the tool's schema echoed back."""
        if self._tools is not None and call.name not in self._tools:
            named = known_tool(call.name, self._tools)  # `List_Dir`, `functions.list_dir`: one tool, unambiguously
            if named is not None:
                call = ToolCall(named, call.arguments, raw=call.raw)
        known = self._tools.get(call.name, frozenset()) if self._tools is not None else frozenset()
        if looks_like_schema(call.arguments, known):
            return None, schema_error(call.name, call.arguments, known)
        return call, None

    def _recover_truncated_tag(self) -> None:
        """A reply that ends inside a tag (`…<tool_co`) was cut off mid-call: never an answer."""
        if self._calls or self._errors or self._final is not None or self._state != _OUT or self._inline:
            return
        thought = "".join(self._thought)
        match = _OPEN_TAIL.search(thought, max(0, len(thought) - 300))
        if match is None:
            return
        word = match.group("word").lower()
        names = (*_CUT_WORDS, *(n.lower() for n in (self._tools or ())))
        if match.group("closed"):
            # A whole opening tag that ends the reply: the call it opens was never written.
            if match.group("slash") or word not in names or word in ("name", "parameter") or \
                    match.group().rstrip().endswith("/>"):
                return
        elif not any(n.startswith(word) for n in names):
            return
        self._thought[:] = [thought[: match.start()]]
        self._errors.append(cut_off_tag(match.group().strip()))

    def _recover_drift(self) -> None:
        """A call written in another format (tool name as tag, ReAct, sloppy tags): run it if unambiguous."""
        if self._tools is None or self._calls or self._errors or self._final is not None:
            return
        drift = find_drift("".join(self._thought), self._tools)
        if drift is None:
            return
        self._thought[:] = [drift.remaining]
        for call, error in drift.items:
            self._commit(call, error)

    def _recover_spelling(self) -> None:
        """Call markup in another spelling (`＜tool_code＞`, `&lt;tool_code&gt;`, a fence labelled `tool_code`, a
        registered tool called Python-style): read the reply rewritten to the plain spelling (see `normalise`)."""
        if self._respelled or self._calls or self._errors or self._final is not None:
            return
        thought = "".join(self._thought)
        plain = normalise_markup(thought, self._tools)
        if plain == thought:
            return
        parser = StreamParser(reasoning_open=False, multiple_calls=self._multiple_calls, tools=self._tools,
                              reasoning=self._vocab.dialects)
        parser._respelled = True
        parser.feed(plain)
        parser.close()
        turn = parser.result
        assert turn is not None
        if turn.tool_calls:
            self._thought[:] = [turn.thought]
            for call in turn.tool_calls:
                self._commit(call, None)
        elif turn.error is not None:
            self._errors.append(turn.error)

    def _recover_bare_json(self) -> None:
        """A reply that is nothing but calls in JSON (Hermes, OpenAI-shaped, Mistral) runs only if tagged."""
        if self._calls or self._errors or self._final is not None:
            return
        calls, tagged = reply_calls("".join(self._thought))
        if not calls:
            return
        if not tagged:
            # Untagged JSON may be quoted data (a tool output echoed back): never run it, show how to call.
            self._errors.append(bare_json_error(calls[0]))
            return
        self._thought.clear()
        for call in calls:
            self._commit(call, None)

    def _verdict(self) -> ParsedTurn:
        joined = "".join(self._chunks)
        return verdict(
            calls=tuple(self._calls),
            errors=tuple(self._errors),
            thought="".join(self._thought).strip(),
            reasoning="".join(self._reasoning).strip(),
            final=None if self._final is None else "".join(self._final).strip(),
            text=joined if self._discard_at is None else joined[: self._discard_at],
            think_unclosed=self._think_unclosed,
            ambiguous_example=self._ambiguous_example,
            skipped=tuple(self._skipped),
        )


@lru_cache(maxsize=1)
def _default_vocabulary() -> Vocabulary:
    return vocabulary(REASONING_DIALECTS)


@lru_cache(maxsize=64)
def _closer_pattern(closes: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(c) for c in sorted(closes, key=len, reverse=True)), re.IGNORECASE)


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
