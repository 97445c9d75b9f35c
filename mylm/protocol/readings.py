"""What the streaming parser reads once the reply is whole, and the verdict on the turn.

Part of `StreamParser` (see `state`). When the stream closes and no call or correction came from the blocks, the
reply is read again for calls written otherwise: a block with its opener left out, a reply cut off inside a tag,
JSON calls after prose (`jsoncalls`), call markup in another spelling (`normalise`), a reply of bare JSON calls
(`verdict.reply_calls`), drifted formats (`drift`). A reply that quotes or refuses a block (`quoting`) is read
for none of these.
"""

from __future__ import annotations

import re

from ..core.types import TextEvent, ToolCall
from .callblock import decode_block
from .corrections import bare_json_error, cut_off_tag
from .drift import find_drift, known_tool, looks_like_schema, schema_error
from .jsoncalls import find_json_calls
from .normalise import normalise_markup
from .parsed import ParsedTurn
from .quoting import presented_as_quoted
from .state import OUT, ParserState
from .tags import TOOL_CLOSE, TOOL_OPEN
from .verdict import reply_calls, verdict

_NAME_OPEN = re.compile(r"<name\s*>", re.IGNORECASE)
#: A tag the reply ended inside: `<tool_co`, `<tool_code name="x`, `</parame`, `<list_d` (no `>` after it).
_OPEN_TAIL = re.compile(
    r"(?:^|(?<=[\s>]))<(?P<slash>/)?(?P<word>[A-Za-z_][\w-]{1,63})(?:[\s=][^<>]{0,200})?(?P<closed>>)?\s*\Z")
#: A whole reply that is one name, maybe quoted, called with nothing (`list_dir()`), or ended with a full stop.
_BARE_NAME = re.compile(r"[`'\"*]*([A-Za-z_][\w.-]{0,127}?)(?:\(\s*\))?[`'\"*]*\.?")
_CUT_WORDS = ("tool_code", "tool_call", "function", "function_calls", "invoke", "name", "parameters",
              "arguments", "parameter", "tool_name", "function-name", "function_name", "function_call", "tool_use")


class WholeReplyReadings(ParserState):
    """Readings of the whole reply at `close()`, and the verdict."""

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
        if self._calls or self._errors or self._final is not None or self._state != OUT or self._inline:
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

    def _refused_after(self) -> None:
        """A call still held back (not yet emitted) that the text right after it refuses ("I have not run it")
        was quoted, not made: the answer keeps the block as text (see `quoting`)."""
        if not self._hold or len(self._calls) == self._emitted:
            return
        for i in range(len(self._calls) - 1, self._emitted - 1, -1):
            at = self._call_at[i]
            after = "".join(self._thought[at : self._call_at[i + 1] if i + 1 < len(self._calls) else None])
            if presented_as_quoted("", after):
                raw = self._calls[i].raw
                del self._calls[i], self._call_at[i]
                self._thought.insert(at, raw)
                self._events.append(TextEvent(raw))  # never shown while it was a call: shown now
                self._quoted = True
        if not self._calls:
            self._watch = False

    def _recover_json_calls(self) -> None:
        """Calls written as JSON at the end of the reply (```` ```json ```` fences, `{…}` lines): see `jsoncalls`."""
        if self._tools is None or self._calls or self._errors or self._final is not None:
            return
        thought = "".join(self._thought)
        found = find_json_calls(thought, self._tools)
        if found is None:
            return
        self._thought[:] = [thought[: found.start]]
        self._json_taken = True
        for call in found.calls:
            self._commit(call, None)

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
        turn = self._reparse(plain)
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

    def _recover_bare_name(self) -> None:
        """A reply that is nothing but a tool's name (`list_dir`, `` `list_dir` ``, `list_dir()`) is a call of it
        with no arguments: Qwen2.5-Coder-0.5B, told to call `list_dir`, answered the word `list_dir`, which was
        taken as its answer. Arguments the tool needs are then asked for like any others missing."""
        if self._tools is None or self._calls or self._errors or self._final is not None:
            return
        thought = "".join(self._thought).strip()
        if len(thought) > 130:
            return
        word = _BARE_NAME.fullmatch(thought)
        name = known_tool(word.group(1), self._tools) if word is not None else None
        if name is None:
            return
        self._thought.clear()
        self._commit(ToolCall(name, {}, raw=thought), None)

    def _verdict(self) -> ParsedTurn:
        joined = "".join(self._chunks)
        return verdict(
            calls=tuple(self._calls),
            errors=tuple(self._errors),
            thought="".join(self._thought).strip(),
            reasoning="".join(self._reasoning).strip(),
            final=None if self._final is None else "".join(self._final).strip(),
            text=joined if self._discard_at is None else joined[: self._discard_at],
            discarded="" if self._discard_at is None else joined[self._discard_at :],
            invented_observation=self._made_up,
            think_unclosed=self._think_unclosed,
            ambiguous_example=self._ambiguous_example,
            skipped=tuple(self._skipped),
        )
