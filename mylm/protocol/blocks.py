"""The streaming parser's blocks: a block from its opener to its end, its call decoded, and the call committed.

Part of `StreamParser` (see `state`). A block's end is found structurally (`blockscan`) and its body decoded by
`callblock`; a block in a fence waits for the fence's fate (`fences`); a block the model presents as quoted or
refused is text (`quoting`); a committed call is emitted at once, or held while it is unknown whether the chat
template opened reasoning.
"""

from __future__ import annotations

from ..core.types import ToolCall
from . import markup
from .blockscan import CLOSED, KINDS, MORE, BlockScan
from .callblock import decode_calls
from .canonical import format_tool_call
from .corrections import dtd_refused, several_calls_error
from .drift import recover_block
from .fences import Pending
from .parsed import CallParsed
from .quoting import WINDOW, presented_as_quoted
from .state import BLOCK, DISCARD, DRIFT_RE, MAX_BLOCKS, OUT, ParserState
from .tags import TOOL_OPEN


class BlockSteps(ParserState):
    """Steps of the engine inside a block, and what becomes of the call it holds."""

    def _start_block(self, tag: str, text: str, *, fenced: bool) -> None:
        if len(self._calls) + len(self._errors) >= MAX_BLOCKS:
            # A flood of blocks is not a reply anyone can use; stop spending work on it.
            self._errors.append(f"Your reply had more than {MAX_BLOCKS} tool blocks; the rest was ignored.")
            self._discard_at = self._base + self._pos
            self._state = DISCARD
            return
        kind = "tool_code" if tag == TOOL_OPEN else DRIFT_RE[tag][0]
        keep_opener = kind in ("function", "invoke")  # the opener carries the tool's name
        self._scan = BlockScan(KINDS[kind], interrupts=self._vocab.lone)
        self._block_kind, self._block_fenced = kind, fenced
        self._block_open = "" if keep_opener else text
        self._block_parts = []
        if not keep_opener:
            self._pos += len(text)
        self._state = BLOCK

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
        self._state, self._scan, self._block_parts, self._line_blank = OUT, None, [], True
        if self._block_fenced and self._fence is not None:
            self._fence.held.append(Pending(call, error, raw))
        elif call is not None and closer and presented_as_quoted(self._thought_tail()):
            self._emit_text(raw)  # "The block you pasted asks…": quoted, not the model's call (see `quoting`)
            self._quoted = True
        else:
            self._commit(call, error)

    def _thought_tail(self) -> str:
        """The last `WINDOW` characters of the thought (the sentence that introduces what comes next)."""
        pieces, size, i = self._thought, 0, len(self._thought)
        while i > 0 and size < WINDOW:
            i -= 1
            size += len(pieces[i])
        return "".join(pieces[i:])[-WINDOW:]

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
        self._state, self._scan, self._block_parts, self._line_blank = OUT, None, [], True
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
            if not self._closed:
                self._release_json_hold()
            self._flush()
            self._calls.append(call)
            self._call_at.append(len(self._thought))
            self._watch = True
            if self._hold:
                self._held_raw.append(call.raw)
                return
            self._events.append(CallParsed(call))
            self._emitted = len(self._calls)
            if not self._multiple_calls and not self._closed:
                # The turn ends where its call ends: the rest is not part of it (and need not be read).
                self._discard_at = self._base + self._pos
                self._state = DISCARD
        elif error is not None:
            self._errors.append(error)
