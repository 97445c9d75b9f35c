"""The streaming parser's reading of text outside blocks: tags, code fences, inline code, Markdown context.

Part of `StreamParser` (see `state`). Prose with no tag or fence in sight is one slice; the engine stops only
where a decision is needed: a tag (is it a block, reasoning, an invented observation, or text: in inline code,
a blockquote or an indented code block it is text), or a run of backticks (a fence opens or closes: a block in a
fence runs only if the fence is a stray wrapper, see `fences`).
"""

from __future__ import annotations

from .blockscan import WAIT, match_tag
from .fences import MAX_RUN, Fence, fence_run
from .reasoning import BLOCK_TAGS
from .state import (
    DISCARD,
    DRIFT_RE,
    DRIFT_WINDOW,
    FENCE_TAGS,
    FINAL,
    LONE_CLOSERS,
    THINK,
    ParserState,
    closer_pattern,
)
from .structure import OUTPUT_LABELS, PLAIN, LineContext
from .tags import OBSERVATION_TAGS


class OutsideSteps(ParserState):
    """Steps of the engine outside blocks and reasoning."""

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
                self._state, self._made_up = DISCARD, True
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
                self._state, self._made_up = DISCARD, True
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
            tag = match_tag(buf, pos, FENCE_TAGS if fence and not fence.closed else self._vocab.outside, final)
            if tag is WAIT:
                return False
            if tag in DRIFT_RE:
                if not final and len(buf) - pos < DRIFT_WINDOW:
                    return False
                if not DRIFT_RE[tag][1].match(buf, pos, pos + DRIFT_WINDOW):
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
        if tag in BLOCK_TAGS:
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
            self._state, self._made_up = DISCARD, True
            return True
        if fence is not None:
            self._content_in_fence()
        self._pos = pos + len(tag)
        if tag in LONE_CLOSERS:
            # An end tag with no block open: maybe the model left out the opening tag. Shown as text for now.
            if self._lone_closer is None:
                self._lone_closer = (len(self._thought), text)
            self._emit_text(text)
        elif tag in self._vocab.envelope:
            pass  # harmony's message envelope (`<|start|>assistant`, `<|end|>`): markup, not text
        elif tag in self._vocab.opens:
            self._state, self._think_unclosed = THINK, True
            self._think_closes = self._vocab.closes_of[tag]
            self._think_close_re = closer_pattern(self._think_closes)
            self._hold = False  # the reply opens its own reasoning: a later </think> closes that one
        elif tag in self._vocab.lone:
            # Reasoning the template opened: what was shown so far was thought (already streamed; not retracted).
            self._release_json_hold(restart=True)
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
            self._state = FINAL
            self._final = self._final if self._final is not None else []
        return True


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
