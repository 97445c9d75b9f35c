"""One model turn: stream a completion into the parser, close early once settled, normalise why it ended."""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..core.jsontext import sorted_json
from ..core.types import Event, FinishReason, ReasoningEvent, TextEvent, ToolCall, Usage
from ..llm import LLM, FinishChunk, LLMRequest, ReasoningChunk, TextChunk
from ..protocol.drift import ToolNames
from ..protocol.parsed import ParsedTurn, ParseEvent
from ..protocol.parser import StreamParser
from ..protocol.reasoning import template_opens_reasoning
from ..protocol.repetition import ARGUMENTS_SCALE, Repetition, RepetitionGuard
from ..protocol.tags import REASONING_DIALECTS, TOOL_CLOSE, TOOL_OPEN, ReasoningDialect
from .grounding import grounded, heard


@dataclass(frozen=True)
class ModelTurn:
    """One model reply: what it means, how it ended, and what it cost."""

    parsed: ParsedTurn
    finish: FinishReason
    usage: Usage | None
    #: What this turn showed about the chat template: it opens reasoning (a lone `</think>`), it does not (the
    #: reply opened its own, or the server split reasoning out, or a whole reply had none), or None (unknown).
    opens_reasoning: bool | None = None
    #: When the first chunk of the reply arrived (`time.monotonic()`), or None if none did.
    first_chunk: float | None = None
    #: Why the stream was cut as degenerate (a line or block repeated on and on; docs/parser.md), else "".
    #: Such a turn ends as MAX_TOKENS would have, only sooner, and the step sends a correction.
    degenerate: str = ""
    #: The repetition it was cut for, if it was (its `first_copy` is what the model meant to say once).
    loop: Repetition | None = None


def stream_turn(
    llm: LLM,
    request: LLMRequest,
    *,
    multiple_calls: bool,
    shown: list[str],
    tools: ToolNames | None = None,
    reasoning_open: bool | None = None,
    reasoning: tuple[ReasoningDialect, ...] = REASONING_DIALECTS,
) -> Generator[Event, None, ModelTurn]:
    """Stream one completion as text and reasoning events; return the parsed turn.

    Visible text is also appended to `shown`, so a caller interrupted mid-stream still knows what the user saw.
    The stream is closed as soon as the parser says nothing more can change the turn (the call is complete,
    or the model began inventing an observation), so a server that ignores stops costs nothing extra, and as
    soon as the reply degenerates into repeating a line (`RepetitionGuard`), so a loop does not run to the
    token limit.
    `reasoning_open` is what earlier turns showed about the template (None: unknown); a raw-prompt provider that
    rendered the prompt itself says so exactly (`opens_reasoning`), once its stream has started.
    """
    # coalesce=1: every chunk is shown as it arrives. A model that pauses mid-reply must not leave its last words
    # hidden, and at model speeds (tens of tokens a second) per-chunk parsing costs microseconds.
    server: FinishChunk | None = None
    parser: StreamParser | None = None
    split_reasoning = False
    first: float | None = None
    guard = RepetitionGuard()
    # Over a call's raw text as it is written, with every threshold longer (`ARGUMENTS_SCALE`).
    loose = RepetitionGuard(scale=ARGUMENTS_SCALE)
    calls: list[str] = []  # the calls read so far, as keys: one written again ends the turn
    listed = [0]  # how many calls `_listing` has looked at
    stream = iter(llm.stream(request))
    try:
        for chunk in stream:
            if parser is None:
                first = time.monotonic()
                rendered = _rendered(llm)
                known = rendered if rendered is not None else reasoning_open
                parser = StreamParser(multiple_calls=multiple_calls, coalesce=1, tools=tools, reasoning_open=known,
                                      reasoning=reasoning)
            if isinstance(chunk, TextChunk):
                events = parser.feed(chunk.text)
                yield from _relay(events, shown)
                if parser.finished or _degenerate(guard, events) or _repeats_a_call(parser, calls) or (
                        multiple_calls and _listing(parser, request, listed)):
                    break
                # Only text the parser shows nothing of yet (a call being written): prose is the first guard's,
                # and the 1 MiB answer's stream stays as cheap as it was.
                if not events and loose.feed(chunk.text):
                    guard.found = loose.found
                    break
            elif isinstance(chunk, ReasoningChunk):
                if chunk.text:
                    split_reasoning = True
                    yield ReasoningEvent(chunk.text)
                    if guard.feed(chunk.text):
                        break
            elif isinstance(chunk, FinishChunk):
                server = chunk
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # release the connection now: the rest of the completion is not needed
    if parser is None:
        parser = StreamParser(multiple_calls=multiple_calls, coalesce=1, tools=tools, reasoning_open=reasoning_open,
                              reasoning=reasoning)
    yield from _relay(parser.close(), shown)
    parsed = parser.result
    assert parsed is not None
    if len(parsed.tool_calls) > 1:
        parsed = replace(parsed, tool_calls=_distinct(parsed.tool_calls))
    rendered = _rendered(llm)
    opens = rendered if rendered is not None else template_opens_reasoning(parsed, split_reasoning, reasoning)
    usage = server.usage if server else None
    if guard.found is not None:
        return ModelTurn(parsed, FinishReason.MAX_TOKENS, usage, opens, first, guard.found.describe(), guard.found)
    return ModelTurn(parsed, finish_reason(parsed, server, parser.finished), usage, opens, first)


def _rendered(llm: LLM) -> bool | None:
    """What a raw-prompt endpoint says its last prompt opened (None: it does not render the template itself)."""
    # What `isinstance(llm, PromptRenderingLLM)` asks, read directly: a runtime protocol check walks the class's
    # attributes each time (~30 µs in CPython 3.11), twice a turn.
    opens = getattr(llm, "opens_reasoning", None)
    return opens if isinstance(opens, bool) else None


def _degenerate(guard: RepetitionGuard, events: list[ParseEvent]) -> bool:
    """Feed the guard the prose and reasoning the parser read; whether the reply has degenerated. A call's
    arguments are data, not fed here: a file of repeated lines or a long run of one character may be what the
    model was asked to write (and a call block ends the line around it). The loose guard watches them."""
    for event in events:
        if isinstance(event, (TextEvent, ReasoningEvent)):
            if guard.feed(event.text):
                return True
        else:
            guard.interrupt()
    return False


def call_key(call: ToolCall) -> str:
    """A call's identity: its tool and its arguments as canonical JSON (key order ignored)."""
    return call.name + "\0" + sorted_json(call.arguments)


def _repeats_a_call(parser: StreamParser, seen: list[str]) -> bool:
    """Whether a call just read repeats one read before in this turn (remembering the new ones, in `seen`). A
    model that writes the same call again is looping, not asking twice: greedy decoding under a grammar that
    allows several calls repeated Qwen2.5-Coder's one call until `max_tokens`. Calls the parser still holds back
    (whether the template opened reasoning is not known yet, as on every first turn) count: they were written."""
    read = parser.calls_read
    if len(read) < len(seen):  # held calls became reasoning at a lone `</think>`: start over from what stands
        del seen[len(read):]
    for call in read[len(seen):]:
        key = call_key(call)
        if key in seen:
            return True
        seen.append(key)
    return False


def _listing(parser: StreamParser, request: LLMRequest, looked: list[int]) -> bool:
    """Whether the calls read so far list options instead of making the call asked for: two of them are calls
    of one tool that `grounded` would drop (values the conversation never named, or the first call's values
    reshuffled). Qwen2.5-Coder-1.5B wrote eight such calls to most BFCL questions (20-30 s a question on two
    cores) where the first was the one kept; the rest of such a list is more of the same."""
    read = parser.calls_read
    if len(read) < 3 or len(read) == looked[0] or len({c.name for c in read}) != 1:
        return False
    looked[0] = len(read)
    return len(read) - len(grounded(read, heard(request.messages))) >= 2


def _distinct(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """The calls without repeats, in order: a call repeated in one turn is run once, and so is one restated with
    more arguments (BFCL simple_python, Qwen2.5-Coder-1.5B: `math.hypot(x=4, y=5)` then `math.hypot(x=4, y=5,
    z=0)`, one question asked twice). Calls of one tool with differing values (two cities) all stay."""
    kept: list[ToolCall] = []
    for call in calls:
        if not any(c.name == call.name and (_within(c.arguments, call.arguments) or _within(call.arguments, c.arguments))
                   for c in kept):
            kept.append(call)
    return tuple(kept)


def _within(small: Mapping[str, Any], large: Mapping[str, Any]) -> bool:
    """Whether every argument of `small` (at least one: `list_dir()` and `list_dir(path="src")` differ) is in
    `large` with the same value."""
    return bool(small) and all(key in large and _same(value, large[key]) for key, value in small.items())


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _relay(events: list[ParseEvent], shown: list[str]) -> Generator[Event, None, None]:
    for event in events:
        if isinstance(event, TextEvent):
            shown.append(event.text)
            yield event
        elif isinstance(event, ReasoningEvent):
            yield event


def finish_reason(parsed: ParsedTurn, server: FinishChunk | None, cut: bool) -> FinishReason:
    """Normalise why a turn ended (seed 004): decided from the parsed text, the server's value only a hint."""
    if parsed.tool_calls:
        return FinishReason.TOOL_USE
    hint = (server.reason or "") if server else ""
    if hint in ("length", "max_tokens", "limit"):
        return FinishReason.MAX_TOKENS
    if cut or (server is not None and server.stop_sequence):
        return FinishReason.STOP_SEQUENCE
    return FinishReason.END_TURN


def cut_mid_thought(turn: ModelTurn) -> bool:
    """Whether a stop string evidently cut the model's reasoning: the turn ended inside `<think>` with nothing
    to run, not for lack of tokens, and either the server says a stop fired or a call drafted there lacks its
    end tag (the `</tool_code>` stop ate it)."""
    parsed = turn.parsed
    if not parsed.unclosed_reasoning or parsed.tool_calls or turn.finish is FinishReason.MAX_TOKENS:
        return False
    reasoning = parsed.reasoning.lower()
    drafted = reasoning.rfind(TOOL_OPEN[:-1])
    return turn.finish is FinishReason.STOP_SEQUENCE or (drafted >= 0 and TOOL_CLOSE not in reasoning[drafted:])


def collect_text(llm: LLM, request: LLMRequest) -> tuple[str, Usage | None]:
    """Run a completion to its end without events (for internal calls such as compaction summaries)."""
    shown: list[str] = []
    turn_gen = stream_turn(llm, request, multiple_calls=True, shown=shown)
    try:
        while True:
            next(turn_gen)
    except StopIteration as stop:
        turn: ModelTurn = stop.value
    text = turn.parsed.final_answer or turn.parsed.thought or "".join(shown)
    return text.strip(), turn.usage
