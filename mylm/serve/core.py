"""The core every route shares: a client's conversation in mylm's text protocol, the upstream's reply read back
as native tool calls, and unusable replies corrected upstream before the client sees them.

The conversation is rendered the way the agent records its own: the tools through mylm's templates (prompts/,
so users customise them the same way), earlier calls as canonical `<tool_code>` blocks and tool results as
user-role `<observation>` messages. Rendering is a pure function of the request, so each request of a
conversation is a byte-stable extension of the last and the upstream's prompt cache keeps hitting.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import threading
import time
from dataclasses import dataclass
from typing import Any, Generator, Iterator

from ..cancel import CancelToken
from ..llm import LLM, ConstrainMode, Constraint, FinishChunk, LLMRequest, ReasoningChunk, TextChunk, alternating
from ..prompts import PromptLoader, dump_json, tool_view
from ..protocol.canonical import format_tool_call
from ..protocol.defuse import neutralise
from ..protocol.stops import DEFAULT_STOPS, OBSERVATION_STOP
from ..tools.validation import validate
from ..turn import ModelTurn, stream_turn
from ..types import FinishReason, Message, ReasoningEvent, TextEvent, ToolCall, Usage
from .wire import CallOut, ChatMessage, ChatRequest, Finished, FunctionTool, Out, ReasoningOut, TextOut

logger = logging.getLogger("mylm.serve")

#: The templates the core renders; checked when the server starts, so a broken one is reported before a request.
TEMPLATES = ("system.j2", "observation.j2", "tool_error.j2", "format_error.j2", "truncated.j2", "tool_required.j2")


@dataclass(frozen=True)
class CoreSettings:
    """How the core treats requests: the grammar mode, the corrections allowed, the limits."""

    constrain: ConstrainMode = "auto"
    max_corrections: int = 2
    #: The output cap when a request names none.
    max_tokens: int = 4096
    #: Seconds one request may take upstream, corrections included.
    timeout: float = 300.0
    #: Whether the upstream accepts stop strings (some hosted models refuse them; the parser cuts anyway).
    stop_strings: bool = True


class Core:
    """Serves `ChatRequest`s against one upstream model; thread-safe (each request runs in its own thread)."""

    def __init__(self, llm: LLM, prompts: PromptLoader, settings: CoreSettings = CoreSettings()) -> None:
        self.llm = llm
        self.prompts = prompts
        self.settings = settings
        #: What replies have shown about the upstream's chat template opening `<think>` (None: not known yet).
        self.opens_reasoning: bool | None = None
        self._grammars: dict[tuple[Any, ...], Constraint | None] = {}
        self._lock = threading.Lock()
        prompts.check(list(TEMPLATES))

    # ------------------------------------------------------------------------------------------ rendering

    def render(self, request: ChatRequest) -> tuple[Message, ...]:
        """The messages sent upstream for `request`: the same request always gives the same bytes."""
        instructions = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
        turns = self._turns(request)
        if not self._emulated(request):
            system = (Message("system", instructions),) if instructions else ()
            return alternating((*system, *turns))
        system = self.prompts.render(
            "system.j2",
            tools=tool_view(request.tools if request.tool_choice in ("auto", "required")
                            else [t for t in request.tools if t.name == request.tool_choice]),
            multiple_calls=request.parallel,
            final_answer_tag=self.settings.constrain != "off",
            instructions=instructions,
            platform=platform.system() or "unknown",
            cwd="",
            tool_choice=request.tool_choice,
        )
        return alternating((Message("system", system), *turns))

    def _turns(self, request: ChatRequest) -> list[Message]:
        names = {call.id: call.name for m in request.messages for call in m.calls}
        turns: list[Message] = []
        results: list[str] = []
        for message in request.messages:
            if message.role == "tool":
                results.append(self._observation(names.get(message.call_id or "", "tool"), message))
                continue
            if results:
                # One user message for a turn's results, as the agent records them.
                turns.append(Message("user", "\n".join(results)))
                results = []
            if message.role == "user":
                turns.append(Message("user", message.content))
            elif message.role == "assistant":
                canonical = "\n".join(format_tool_call(ToolCall(c.name, c.arguments)) for c in message.calls)
                thought = message.content.strip()
                content = f"{thought}\n{canonical}" if thought and canonical else thought or canonical
                if content:
                    turns.append(Message("assistant", content))
        if results:
            turns.append(Message("user", "\n".join(results)))
        return turns

    def _observation(self, tool: str, message: ChatMessage) -> str:
        # Neutralised here, not only by the templates' filter: a customised template that drops the filter
        # still cannot let a tool result close the observation, open a call or forge a chat turn.
        output = neutralise(message.content.rstrip("\n"))
        if message.is_error:
            return self.prompts.render("tool_error.j2", tool=tool, message=output)
        return self.prompts.render("observation.j2", tool=tool, output=output, cut=0, handle=None)

    @staticmethod
    def _emulated(request: ChatRequest) -> bool:
        """Whether mylm's protocol is in play: the request offers tools the model may call."""
        return bool(request.tools) and request.tool_choice != "none"

    def constraint(self, request: ChatRequest) -> Constraint | None:
        """The grammar for the request's tools and `tool_choice` (compiled once per tool set)."""
        mode = self.settings.constrain
        if mode == "off" or not self._emulated(request):
            return None
        max_tokens = request.max_tokens or self.settings.max_tokens
        tools = json.dumps([[t.name, t.parameters] for t in request.tools], sort_keys=True, default=str)
        key = (tools, request.tool_choice, request.parallel, max_tokens)
        with self._lock:
            if key in self._grammars:
                return self._grammars[key]
        from ..constrain import TRIGGER, ToolSpec, compile_protocol
        from ..constrain.protocol import ANSWER_CHARS, THOUGHT_CHARS

        choice = request.tool_choice
        offered = [t for t in request.tools if choice in ("auto", "required") or t.name == choice]
        try:
            grammar = compile_protocol(
                [ToolSpec(t.name, t.parameters) for t in offered],
                multiple_calls=request.parallel,
                thought_chars=min(THOUGHT_CHARS, max_tokens // 2),
                answer_chars=min(ANSWER_CHARS, max_tokens),
                require_call=choice != "auto",
            )
            constraint: Constraint | None = Constraint(grammar.turn, grammar.call, TRIGGER, mode == "grammar")
        except Exception as error:  # noqa: BLE001 - a schema the compiler cannot take: parse and validate only
            logger.warning("No grammar for this request's tools (%s: %s)", type(error).__name__, error)
            constraint = None
        with self._lock:
            if len(self._grammars) > 256:
                self._grammars.clear()
            self._grammars[key] = constraint
        return constraint

    # ------------------------------------------------------------------------------------------- serving

    def run(self, request: ChatRequest, cancel: CancelToken) -> Iterator[Out]:
        """The reply to `request`, as it becomes known: text and reasoning as they stream, each call once it is
        complete and valid, then `Finished`. Raises `LLMError`s from the upstream and `CancelledError`."""
        messages = list(self.render(request))
        deadline = time.monotonic() + self.settings.timeout
        if not self._emulated(request):
            yield from self._plain(request, tuple(messages), deadline, cancel)
            return
        yield from self._emulate(request, messages, deadline, cancel)

    def _plain(self, request: ChatRequest, messages: tuple[Message, ...], deadline: float,
               cancel: CancelToken) -> Iterator[Out]:
        """No tools: the conversation proxied as plain chat, its text and reasoning passed straight on."""
        upstream = LLMRequest(messages, stop=request.stop, max_tokens=request.max_tokens, deadline=deadline,
                              cancel=cancel)
        finish: FinishChunk | None = None
        stream = iter(self.llm.stream(upstream))
        try:
            for chunk in stream:
                if isinstance(chunk, TextChunk):
                    if chunk.text:
                        yield TextOut(chunk.text)
                elif isinstance(chunk, ReasoningChunk):
                    if chunk.text:
                        yield ReasoningOut(chunk.text)
                elif isinstance(chunk, FinishChunk):
                    finish = chunk
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        reason = (finish.reason or "") if finish else ""
        yield Finished("length" if reason in ("length", "max_tokens", "limit") else "stop",
                       finish.usage if finish else None)

    def _emulate(self, request: ChatRequest, messages: list[Message], deadline: float,
                 cancel: CancelToken) -> Iterator[Out]:
        tools = {t.name: t for t in request.tools}
        names = {t.name: tuple(dict(t.parameters).get("properties") or ()) for t in request.tools}
        stops = (DEFAULT_STOPS if not request.parallel else (OBSERVATION_STOP,)) if self.settings.stop_strings else ()
        stops = (*stops, *(s for s in request.stop if s not in stops))
        constraint = self.constraint(request)
        seed = stable_id("", *(f"{m.role}\x01{m.content}" for m in messages))
        usage: Usage | None = None
        turn: ModelTurn | None = None
        shown: list[str] = []
        for attempt in range(self.settings.max_corrections + 1):
            upstream = LLMRequest(alternating(messages), stop=stops, max_tokens=request.max_tokens,
                                  deadline=deadline, cancel=cancel, constraint=constraint)
            shown = []
            turn = yield from _relay(stream_turn(self.llm, upstream, multiple_calls=request.parallel,
                                                 shown=shown, tools=names, reasoning_open=self.opens_reasoning))
            if turn.opens_reasoning is not None:
                self.opens_reasoning = turn.opens_reasoning
            if turn.usage is not None:
                usage = turn.usage if usage is None else usage + turn.usage
            calls, problem = self._judge(turn, request, tools)
            if problem is None:
                for index, call in enumerate(calls):
                    # Stable: the same conversation gives the same ids, so a retried request is answered alike.
                    call_id = stable_id("call_", seed, str(attempt), str(index))
                    yield CallOut(call_id, call.name, json.dumps(call.arguments, ensure_ascii=False))
                cut = turn.finish is FinishReason.MAX_TOKENS
                settled = turn.parsed.thought if calls else (turn.parsed.final_answer or turn.parsed.thought)
                yield Finished("tool_calls" if calls else ("length" if cut else "stop"), usage, settled)
                return
            logger.info("Unusable reply (attempt %d): %s", attempt + 1, problem)
            if attempt == self.settings.max_corrections:
                break
            messages.append(Message("assistant", turn.parsed.text.strip() or "(empty reply)"))
            messages.append(Message("user", self._correction(turn, request, problem)))
        # Out of corrections: the text the reply had, never a half call.
        assert turn is not None
        sent = "".join(shown)
        answer = turn.parsed.final_answer or turn.parsed.thought
        if answer and not sent.strip():
            yield TextOut(answer)
        cut = turn.finish is FinishReason.MAX_TOKENS
        yield Finished("length" if cut else "stop", usage, answer)

    def _judge(self, turn: ModelTurn, request: ChatRequest,
               tools: dict[str, FunctionTool]) -> tuple[list[ToolCall], str | None]:
        """The turn's calls checked against their tools' schemas, or what makes the turn unusable."""
        parsed = turn.parsed
        if parsed.error is not None:
            return [], parsed.error
        calls = list(parsed.tool_calls if request.parallel else parsed.tool_calls[:1])
        if not calls:
            if request.tool_choice not in ("auto", "none"):
                return [], "required"
            if (parsed.final_answer or "").strip():
                return [], None
            if turn.finish is FinishReason.MAX_TOKENS:
                return [], "truncated"
            if parsed.unclosed_reasoning:
                return [], ("Your reply ended inside <think> with neither a tool call nor an answer. Close your "
                            "reasoning with </think>, then write one <tool_code> block or your answer.")
            return [], "Your reply was empty. Write one <tool_code> block to use a tool, or write your answer."
        checked: list[ToolCall] = []
        for call in calls:
            tool = tools.get(call.name)
            if tool is None or (request.tool_choice not in ("auto", "required") and call.name != request.tool_choice):
                allowed = [request.tool_choice] if request.tool_choice in tools else list(tools)
                return [], (f"There is no tool named '{call.name}' you may call here. The tools you may call "
                            f"are: {', '.join(allowed)}.")
            arguments, problems = validate(dict(tool.parameters), dict(call.arguments))
            if problems:
                return [], (f"The call to {call.name} has invalid arguments: {'; '.join(problems)}. The "
                            f"parameters schema is {dump_json(dict(tool.parameters))}")
            checked.append(ToolCall(call.name, arguments))
        return checked, None

    def _correction(self, turn: ModelTurn, request: ChatRequest, problem: str) -> str:
        if problem == "truncated":
            return self.prompts.render("truncated.j2", max_tokens=request.max_tokens or self.settings.max_tokens)
        if problem == "required":
            named = request.tool_choice if request.tool_choice != "required" else None
            return self.prompts.render("tool_required.j2", tool=named)
        return self.prompts.render("format_error.j2", message=neutralise(problem))


def _relay(turn: Generator[Any, None, ModelTurn]) -> Generator[Out, None, ModelTurn]:
    """The turn's text and reasoning events as the server's `Out` items; returns the parsed turn."""
    try:
        while True:
            try:
                event = next(turn)
            except StopIteration as stop:
                result: ModelTurn = stop.value
                return result
            if isinstance(event, TextEvent):
                if event.text:
                    yield TextOut(event.text)
            elif isinstance(event, ReasoningEvent):
                if event.text:
                    yield ReasoningOut(event.text)
    finally:
        turn.close()  # a client gone mid-reply: the upstream stream is released now, not when collected


def stable_id(prefix: str, *parts: str) -> str:
    """An id derived from `parts` (the same request gives the same id)."""
    return prefix + hashlib.sha256("\x00".join(parts).encode("utf-8", "replace")).hexdigest()[:24]
