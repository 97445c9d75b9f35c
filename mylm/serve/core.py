"""The core every route shares: a client's conversation in mylm's text protocol, the upstream's reply read back
as native tool calls, and unusable replies corrected upstream before the client sees them.

Each request is one model step (`mylm.agent.step.ModelStep`, the agent's own): the tools rendered through mylm's
templates (prompts/, so users customise them the same way), the grammar chosen from their schemas and the
`tool_choice`, the reply parsed with their names and judged, and the correction picked. The conversation is
rendered the way the agent records its own: earlier calls as canonical `<tool_code>` blocks and tool results as
user-role `<observation>` messages. Rendering is a pure function of the request, so each request of a
conversation is a byte-stable extension of the last and the upstream's prompt cache keeps hitting.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..agent.context import TokenEstimator
from ..agent.corrections import ECHOED
from ..agent.step import Meter, ModelStep, StepConfig, StepOutcome
from ..core.cancel import CancelToken
from ..core.errors import RequestError
from ..core.types import (
    ErrorEvent,
    FinishReason,
    Message,
    ModelCallEvent,
    ReasoningEvent,
    TextEvent,
    ToolCall,
)
from ..llm import (
    LLM,
    ConstrainMode,
    Constraint,
    FinishChunk,
    LLMRequest,
    NativeTools,
    ReasoningChunk,
    TextChunk,
    alternating,
    native_refused,
    supports_native_tools,
)
from ..prompts import PromptLoader
from ..protocol import dialects
from ..protocol.defuse import defuse_special_tokens, neutralise
from ..protocol.dialects import format_call
from .checks import (
    CLIENT_BLOCK,
    again,
    copied,
    copy_sent_back,
    looked,
    made_up,
    opened,
    overwrites,
    repeated,
    whole_reads,
    written,
)
from .native import (
    NOT_RUN,
    Forwarding,
    call_entry,
    checked,
    wire_choice,
    wire_messages,
    wire_tools,
)
from .native import rescued as rescued_json
from .transcripts import read_transcripts
from .turns import Observe, answered, relay, thought_of
from .window import ContextWindow
from .wire import (
    CallOut,
    ChatMessage,
    ChatRequest,
    Finished,
    Out,
    ReasoningOut,
    TextOut,
)

logger = logging.getLogger("mylm.serve")

ToolsMode = Literal["emulate", "native"]
TOOLS_MODES: tuple[ToolsMode, ...] = ("emulate", "native")

#: The templates the core renders itself (the step checks its own); checked when the server starts.
TEMPLATES = ("system.j2", "observation.j2", "tool_error.j2", "denied.j2", "tool_required.j2")


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
    #: `emulate`: tools go into the prompt in mylm's protocol; `native`: they are forwarded to an upstream with
    #: native tool calling, and calls it leaves in the text are rescued (`native.py`).
    tools: ToolsMode = "emulate"
    #: The form of call the prompt teaches in `emulate` (`mylm`, `hermes`, or `auto`: the registry's dialect for
    #: the upstream's model, else `mylm`; see `mylm.protocol.dialects`).
    tool_dialect: str = "mylm"


class Core:
    """Serves `ChatRequest`s against one upstream model; thread-safe (each request runs in its own thread)."""

    def __init__(self, llm: LLM, prompts: PromptLoader, settings: CoreSettings = CoreSettings(),
                 window: ContextWindow | None = None) -> None:
        self.llm = llm
        self.prompts = prompts
        self.settings = settings
        #: The upstream's context window, which requests are fitted into (None: nothing is checked).
        self.window = window
        #: What replies have shown about the upstream (shared by every request's step): whether its chat template
        #: opens `<think>` (None: not known yet), and whether its stop strings cut the model's reasoning.
        self.opens_reasoning: bool | None = None
        self.stopless = False
        #: The tool dialect of every request's prompt, and of the calls its history records.
        self.dialect = dialects.resolve(settings.tool_dialect, getattr(getattr(llm, "endpoint", None), "model", None))
        #: Rendered system prompts by tools, choice and instructions: the same request renders the same bytes.
        self._systems: dict[tuple[Any, ...], str] = {}
        #: Model steps by tools and config, each copied per request (see `step`).
        self._steps: dict[tuple[Any, ...], ModelStep] = {}
        self._lock = threading.Lock()
        if settings.tools == "native" and not supports_native_tools(llm):
            raise native_refused(str(getattr(llm, "name", None) or type(llm).__name__))
        prompts.check([*TEMPLATES, dialects.SYSTEM_TEMPLATES[self.dialect],
                       *ModelStep(llm, [], prompts=prompts).templates()])

    # ------------------------------------------------------------------------------------------ rendering

    def step(self, request: ChatRequest, tools_key: str | None = None) -> ModelStep:
        """The model step for `request`'s tools and choices, with what earlier replies taught about the upstream
        (`tools_key`: `_tools_key(request)`, if the caller has it already)."""
        tools = request.tools
        max_tokens = request.max_tokens or self.settings.max_tokens
        stop_strings = self.settings.stop_strings and not self.stopless
        # Compiling the grammar and reading the schemas is a pure function of the tools and the config: done
        # once, and each request gets a copy for what it learns (stops, reasoning, token estimate).
        # Sampling is not part of what is compiled: requests differing only in it share one prototype. The key is
        # the config's own fields (building the config and a copy of it without sampling, per request, cost more
        # than the rest of this lookup).
        key = (tools_key if tools_key is not None else _tools_key(request), max_tokens, request.parallel,
               self.settings.constrain, request.tool_choice, stop_strings, self.dialect)
        with self._lock:
            prototype = self._steps.get(key)
        if prototype is None:
            config = StepConfig(
                max_tokens=max_tokens, multiple_calls=request.parallel, constrain=self.settings.constrain,
                tool_choice=request.tool_choice, stop_strings=stop_strings, tool_dialect=self.dialect,
            )
            try:
                prototype = ModelStep(self.llm, tools, config, prompts=self.prompts)
            except Exception as error:  # noqa: BLE001 - any schema the grammar compiler cannot take
                # A schema the grammar compiler cannot take: parse and validate only (or refuse, if insisted on).
                if config.constrain == "grammar":
                    raise RequestError(f"the tools' schemas cannot be compiled into a grammar: {error}",
                                       param="tools") from None
                logger.warning("No grammar for this request's tools (%s: %s)", type(error).__name__, error)
                prototype = ModelStep(self.llm, tools, dataclasses.replace(config, constrain="off"),
                                      prompts=self.prompts)
            with self._lock:
                if len(self._steps) > 256:
                    self._steps.clear()
                self._steps[key] = prototype
        step = copy.copy(prototype)
        # The prototype's config has the default sampling: shared as it is (frozen) when the request asks for none.
        if request.sampling != prototype.config.sampling:
            step.config = dataclasses.replace(prototype.config, sampling=request.sampling)
        step.estimator = TokenEstimator()
        step.opens_reasoning = self.opens_reasoning
        if request.stop:
            step.stops = (*step.stops, *(s for s in request.stop if s not in step.stops))
        return step

    def render(self, request: ChatRequest, step: ModelStep | None = None,
               tools_key: str | None = None) -> tuple[Message, ...]:
        """The messages sent upstream for `request` (with tools, through its `step`'s system prompt; `tools_key`:
        `_tools_key(request)`, if the caller has it already)."""
        # The client's own words (system, user, its assistant turns) are its principal's, kept as written; only
        # chat-template special tokens in them are broken, so no message can forge a turn of the upstream's
        # template. Tool results and tool descriptions are data and are fully neutralised (`_observation`,
        # `prompts.tool_view`).
        instructions = "\n\n".join(defuse_special_tokens(m.content) for m in request.messages
                                    if m.role == "system" and m.content)
        turns = self._turns(request)
        if step is None:
            system = (Message("system", instructions),) if instructions else ()
            return alternating((*system, *turns))
        schema = _shown_schema(request.output_schema)
        key = (tools_key if tools_key is not None else _tools_key(request), request.tool_choice, request.parallel,
               step.config.constrain, instructions, schema)
        with self._lock:
            system_prompt = self._systems.get(key)
        if system_prompt is None:
            system_prompt = step.system_prompt(instructions=instructions)
            if schema:  # the answer's format beside the tools (the OpenAI Agents SDK's `output_type`)
                system_prompt += "\n\n" + self.prompts.render("output_schema.j2", schema=schema, tools=True)
            with self._lock:
                if len(self._systems) > 256:
                    self._systems.clear()
                self._systems[key] = system_prompt
        return alternating((Message("system", system_prompt), *turns))

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
                turns.append(Message("user", defuse_special_tokens(message.content)))
            elif message.role == "assistant":
                canonical = "\n".join(format_call(ToolCall(c.name, c.arguments), self.dialect)
                                       for c in message.calls)
                thought = defuse_special_tokens(message.content.strip())
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
    def emulated(request: ChatRequest) -> bool:
        """Whether mylm's protocol is in play: the request offers tools the model may call."""
        return bool(request.tools) and request.tool_choice != "none"

    # ------------------------------------------------------------------------------------------- serving

    def run(self, request: ChatRequest, cancel: CancelToken, observe: Observe | None = None) -> Iterator[Out]:
        """The reply to `request`, as it becomes known: text and reasoning as they stream, each call once it is
        complete and valid, then `Finished`. Raises `LLMError`s from the upstream and `CancelledError`.
        `observe` (a trace) sees the events of each upstream call (`ModelCallEvent` when one ends, its text and
        reasoning) and an `ErrorEvent` for each correction sent."""
        deadline = time.monotonic() + self.settings.timeout
        request = read_transcripts(request)  # a client's calls kept as text (smolagents), as calls
        if self.settings.tools == "native" and (request.tools or any(m.calls for m in request.messages)):
            if request.output_schema is not None and self.emulated(request):
                raise RequestError("an answer format (response_format, text.format) beside callable tools needs "
                                   "`mylm serve --tools emulate`: send the tools, or the format, in a request of "
                                   "its own")
            if self.emulated(request):
                yield from self._native(request, deadline, cancel, observe)
            else:
                # No call is wanted, but the conversation still goes upstream in the model's own format.
                native = NativeTools(tuple(wire_messages(request)), wire_tools(request.tools),
                                     wire_choice(request.tool_choice), request.parallel)
                yield from self._plain(request, self.render(request), deadline, cancel, native, observe)
            return
        if not self.emulated(request):
            if request.output_schema is not None:  # `response_format`, no tool to call
                yield from self._structured(request, deadline, cancel, observe)
                return
            yield from self._plain(request, self.render(request), deadline, cancel, observe=observe)
            return
        tools_key = _tools_key(request)
        step = self.step(request, tools_key)
        messages = self.render(request, step, tools_key)
        fitted = self._fitted(messages, step.config.max_tokens)
        if fitted != step.config.max_tokens:
            step.config = dataclasses.replace(step.config, max_tokens=fitted)
        yield from self._emulate(request, step, list(messages), deadline, cancel, observe)

    def _fitted(self, messages: tuple[Message, ...], max_tokens: int, native: NativeTools | None = None) -> int:
        """`max_tokens` fitted into the upstream's window (a `RequestError` in the API's context-length shape
        when the prompt cannot fit: refused at once, before anything goes upstream). With `native` tools the
        forwarded conversation and schemas are what is sent, so they are what is counted."""
        if self.window is None:
            return max_tokens
        if native is not None:
            return self.window.fit((), max_tokens, json.dumps([*native.messages, *native.tools], default=str))
        return self.window.fit(messages, max_tokens)

    def _structured(self, request: ChatRequest, deadline: float, cancel: CancelToken,
                    observe: Observe | None = None) -> Iterator[Out]:
        """`response_format`: the answer as one JSON value `request.output_schema` allows, sampled under a grammar
        compiled from it where the upstream takes one, else checked and corrected (`--max-corrections` times);
        its reasoning passed on, its text held until it is known good. Out of corrections, the last reply's text
        goes out as it is."""
        schema = dict(request.output_schema or {})
        shown = _shown_schema(schema)
        told = self.prompts.render("output_schema.j2", schema=shown)
        messages = list(self.render(request))
        if messages and messages[0].role == "system":
            messages[0] = Message("system", f"{messages[0].content}\n\n{told}")
        else:
            messages.insert(0, Message("system", told))
        constraint = _schema_constraint(schema)
        text, finished = "", Finished("stop", None)
        for attempt in range(self.settings.max_corrections + 1):
            pieces: list[str] = []
            for item in self._plain(request, tuple(messages), deadline, cancel, observe=observe,
                                    constraint=constraint):
                if isinstance(item, TextOut):
                    pieces.append(item.text)
                elif isinstance(item, Finished):
                    finished = item
                else:
                    yield item
            text = "".join(pieces)
            value, problems = _json_answer(text, schema)
            if not problems:
                yield TextOut(json.dumps(value, ensure_ascii=False))
                yield finished
                return
            logger.info("Reply not JSON following the schema (attempt %d): %s", attempt + 1, problems)
            messages += [Message("assistant", text or "(empty)"),
                         Message("user", self.prompts.render("output_schema.j2", schema=shown, problems=problems))]
        if text:
            yield TextOut(text)
        yield finished

    def _plain(self, request: ChatRequest, messages: tuple[Message, ...], deadline: float,
               cancel: CancelToken, native: NativeTools | None = None, observe: Observe | None = None,
               constraint: Constraint | None = None) -> Iterator[Out]:
        """No tools: the conversation proxied as plain chat, its text and reasoning passed straight on (sampled
        under `constraint` where the upstream takes a grammar)."""
        wanted = request.max_tokens or self.settings.max_tokens
        fitted = self._fitted(messages, wanted, native)
        # No cap asked for and none needed: the upstream's own default, as before.
        max_tokens = request.max_tokens if fitted == wanted else fitted
        upstream = LLMRequest(messages, stop=request.stop, max_tokens=max_tokens, deadline=deadline,
                              cancel=cancel, constraint=constraint, native=native, sampling=request.sampling)
        finish: FinishChunk | None = None
        started, first = time.monotonic(), None
        stream = iter(self.llm.stream(upstream))
        try:
            for chunk in stream:
                if isinstance(chunk, (TextChunk, ReasoningChunk)):
                    if chunk.text:
                        first = first or time.monotonic()
                        text = isinstance(chunk, TextChunk)
                        if observe is not None:
                            observe(TextEvent(chunk.text) if text else ReasoningEvent(chunk.text))
                        yield TextOut(chunk.text) if text else ReasoningOut(chunk.text)
                elif isinstance(chunk, FinishChunk):
                    finish = chunk
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        reason = (finish.reason or "") if finish else ""
        if observe is not None:
            cut = reason in ("length", "max_tokens", "limit")
            ended = FinishReason.MAX_TOKENS if cut else (FinishReason.STOP_SEQUENCE if finish and finish.stop_sequence
                                                         else FinishReason.END_TURN)
            observe(ModelCallEvent(ended, time.monotonic() - started, first - started if first else None,
                                   finish.usage if finish else None))
        yield Finished("length" if reason in ("length", "max_tokens", "limit") else "stop",
                       finish.usage if finish else None)

    def _emulate(self, request: ChatRequest, step: ModelStep, messages: list[Message], deadline: float,
                 cancel: CancelToken, observe: Observe | None = None) -> Iterator[Out]:
        sent = tuple(messages)
        seeds: list[str] = []

        def seed() -> str:
            """The conversation's id, which call ids derive from (hashed once a call is made: an answer needs
            none)."""
            if not seeds:
                seeds.append(stable_id("", *(f"{m.role}\x01{m.content}" for m in sent)))
            return seeds[0]

        corrections = step.corrections()
        meter = Meter()
        counted = [False, False]
        outcome: StepOutcome | None = None
        question = open_question(request)
        if question:  # what an echo correction restates: the user's words, not the reminders around them
            corrections.task = question
        repeat_sent = copy_sent = write_sent = overwrite_sent = answer_only = False
        # The client's tools' results, which a correction may show again: an answer quoting one is no echo of
        # mylm's words (one copying the task still is).
        quoted = "\n".join(m.content for m in request.messages if m.role == "tool")
        said: StepOutcome | None = None  # the last unusable reply that was not an echo of a correction
        limit = self.settings.max_corrections
        attempt = -1
        while attempt < limit:
            attempt += 1
            stops = step.stops
            try:
                # Calls checked as `mylm eval` scores them: values from nowhere, a plan's made-up next steps.
                outcome = yield from relay(step.turn(messages, deadline=deadline, cancel=cancel,
                                                      corrections=corrections, meter=meter, check_calls=True,
                                                      question=question, answer_only=answer_only,
                                                      quoted=quoted),
                                           counted, observe=observe)
            except _SCHEMA_ERRORS as error:
                raise _unchecked(error) from None
            self.opens_reasoning = step.opens_reasoning
            if stops and not step.stops:
                self.stopless = True  # the step learnt that this upstream's stops cut the model's reasoning
            usage = meter.usage if counted[0] else None
            parsed = outcome.turn.parsed
            formatted: str | None = None
            # Each sent back once a request: an answer before the file the question names was read, a call the
            # conversation already holds with the same result (`checks.py`).
            answer = outcome.usable and not outcome.calls
            if answer and not copy_sent and copied(parsed.final_answer or parsed.thought, request):
                outcome, copy_sent = copy_sent_back(outcome, corrections), True
            elif answer:
                forced = None
                if not corrections.unlooked_sent:
                    outcome, forced = looked(outcome, request, step, corrections)
                if forced is None and not write_sent:
                    outcome, forced = written(outcome, request, step, corrections)
                    write_sent = forced is not None
                if forced is None and not corrections.unlooked_sent:
                    outcome, forced = made_up(outcome, parsed.final_answer or parsed.thought, request, step,
                                              corrections)
                if forced is None and not corrections.unlooked_sent:
                    outcome, forced = opened(outcome, parsed.final_answer or parsed.thought, request, step,
                                             corrections)
                if forced is None and outcome.usable and request.output_schema is not None:
                    outcome, formatted = self._formatted(outcome, request.output_schema)
                if forced is not None:
                    # Not counted against --max-corrections: the look (or the write) is owed whatever went before
                    # it (Codex: an unknown tool, then an echo, then an answer without reading, none left).
                    limit += 1
                    # Told to read it, the 1.5B at a client's default temperature (0.8) answered again without
                    # reading, three times in four: the retry's grammar admits only a call of that tool.
                    step = self.step(dataclasses.replace(request, tool_choice=forced))
            elif outcome.usable and outcome.calls:
                outcome = whole_reads(outcome, request)
                if not repeat_sent:
                    outcome = again(outcome, request, corrections)
                    repeat_sent = not outcome.usable
                elif not answer_only and (stuck := repeated(request, outcome.calls[0].name,
                                                            outcome.calls[0].arguments)) is not None:
                    # Made again after its correction: stuck, as the agent's loop judges a model that repeats a
                    # call, and asked the same way for its answer, no tools. Codex's 1.5B read notes.txt, then fed
                    # its text to write_stdin for a process that never was, and made that call until the client
                    # gave up; going out again, it gets the same error again.
                    outcome = dataclasses.replace(
                        outcome, problem=f"{stuck.tool} made again after its correction", kind="call",
                        correction=corrections.stuck(stuck.tool, stuck.times + 1))
                    answer_only = True
                    limit += 1  # the answer is owed, whatever corrections went before
                if outcome.usable and not overwrite_sent:
                    outcome = overwrites(outcome, request, corrections)
                    overwrite_sent = not outcome.usable
            correction = outcome.correction
            if outcome.usable:  # its calls checked by the step (`check_calls`), one unless parallel
                cut = outcome.turn.finish is FinishReason.MAX_TOKENS
                if not outcome.calls:
                    if formatted is not None:  # the answer format's JSON value, and only it
                        yield from answered("", formatted, "length" if cut else "stop", usage, counted)
                        return
                    yield from answered(parsed.thought, parsed.final_answer, "length" if cut else "stop", usage,
                                        counted)
                    return
                yield from thought_of(parsed.thought, counted)
                for index, call in enumerate(outcome.calls):
                    # Stable: the same conversation gives the same ids, so a retried request is answered alike.
                    call_id = stable_id("call_", seed(), str(attempt), str(index))
                    yield CallOut(call_id, call.name, json.dumps(call.arguments, ensure_ascii=False))
                yield Finished("tool_calls", usage, "")
                return
            logger.info("Unusable reply (attempt %d): %s", attempt + 1, outcome.problem or correction)
            if outcome.problem != ECHOED:
                said = outcome
            if attempt == limit:
                break
            if observe is not None:
                observe(ErrorEvent(outcome.problem or correction or "", outcome.kind or "call"))
            # A made-up answer is left out (`kept`): kept, the model copied it after the look.
            messages += [*([outcome.reply] if outcome.reply.content and outcome.kept else []),
                         Message("user", correction or "")]
            # Every correction sent is mylm's words, whatever it was about: a reply that only copies one back (the
            # echo correction itself included, which a small model copied word for word) is not an answer.
            corrections.said += (correction or "") + "\n"
        # Out of corrections: the text the reply had, never a half call, and never mylm's own correction that the
        # model copied back (OpenCode's 1.5B, told its working ran to the limit, answered that message three times,
        # and OpenCode printed it): the last reply of the model's own words, else nothing.
        # A reply cut for looping goes out said once, not with its hundred copies (the Agents SDK printed 48 lines of
        # "```python").
        assert outcome is not None
        if outcome.problem == ECHOED:
            outcome = said
        last = outcome.turn.parsed if outcome is not None else None
        loop = outcome.turn.loop if outcome is not None and outcome.turn.degenerate else None
        if last is not None and loop is not None:
            once = loop.first_copy(last.final_answer or last.thought)
            last = dataclasses.replace(last, thought=once, final_answer=once if last.final_answer else None)
        cut = outcome is not None and outcome.turn.finish is FinishReason.MAX_TOKENS
        yield from answered(last.thought if last else "", last.final_answer if last else None,
                            "length" if cut else "stop", meter.usage if counted[0] else None, counted)


    def _formatted(self, outcome: StepOutcome, schema: Mapping[str, Any]) -> tuple[StepOutcome, str | None]:
        """An answer beside tools under an answer format: the JSON value it holds (compact, as the format's
        answer alone goes out), or the turn sent back with what is wrong with it."""
        parsed = outcome.turn.parsed
        value, problems = _json_answer(parsed.final_answer or parsed.thought, schema)
        if not problems:
            return outcome, json.dumps(value, ensure_ascii=False)
        told = self.prompts.render("output_schema.j2", schema=_shown_schema(schema), problems=problems, tools=True)
        return dataclasses.replace(outcome, problem=f"the answer does not follow the answer format: {problems}",
                                   kind="format", correction=told), None

    def _native(self, request: ChatRequest, deadline: float, cancel: CancelToken,
                observe: Observe | None = None) -> Iterator[Out]:
        """`--tools native`: the tools forwarded, native calls validated, calls left in the text rescued; an
        unusable reply corrected upstream in the native format (see `native.py`)."""
        tools = request.tools
        # No grammar and no stop strings: the upstream's own tool-call format must not be cut or constrained.
        step = ModelStep(self.llm, tools, StepConfig(
            max_tokens=request.max_tokens or self.settings.max_tokens, multiple_calls=request.parallel,
            constrain="off", tool_choice=request.tool_choice, stop_strings=False, sampling=request.sampling),
            prompts=self.prompts)
        step.stops = tuple(request.stop)
        wire = wire_messages(request)
        step.config = dataclasses.replace(step.config, max_tokens=self._fitted(
            (), step.config.max_tokens, NativeTools(tuple(wire), wire_tools(request.tools))))
        seed = stable_id("", json.dumps(wire, sort_keys=True, default=str))
        shown = list(self.render(request))  # what the step calibrates its token estimate with
        corrections, meter, counted = step.corrections(), Meter(), [False, False]
        settled: str = ""
        cut = False
        for attempt in range(self.settings.max_corrections + 1):
            upstream = Forwarding(self.llm, NativeTools(tuple(wire), wire_tools(request.tools),
                                                        wire_choice(request.tool_choice), request.parallel))
            step.llm = upstream
            outcome = yield from relay(step.turn(shown, deadline=deadline, cancel=cancel, corrections=corrections,
                                                  meter=meter), counted, observe)
            parsed = outcome.turn.parsed
            cut = outcome.turn.finish is FinishReason.MAX_TOKENS
            native = upstream.calls if request.parallel else upstream.calls[:1]
            for index, call in enumerate(native):
                call.id = call.id or stable_id("call_", seed, str(attempt), "native", str(index))
            rescued = list(parsed.tool_calls) if request.parallel or not native else []
            # Beside native calls the text is their thought: its problems (empty, no call where one is
            # required, a malformed block) do not make the turn unusable.
            problem = None if native else outcome.correction
            thought = parsed.thought
            printed = None if native or rescued else rescued_json(parsed.thought, {t.name for t in tools})
            if printed is not None:
                # The whole reply, or a fenced block ending it, is call JSON: what vLLM's and llama.cpp's tool
                # parsers leave in `content`. Its text was held back, so the client never saw it as text.
                rescued, thought, problem = list(printed[0]), printed[1], None
            results = [checked(step, corrections, call) for call in native]
            found = [step.check_call(call, corrections) for call in rescued[: None if request.parallel else 1]]
            text_problems = [o for _, o in found if o is not None] + ([problem] if problem else [])
            if not text_problems and all(o is None for _, o in results):
                ids = [c.id or "" for c in native] + [stable_id("call_", seed, str(attempt), str(i))
                                                     for i in range(len(found))]
                usage = meter.usage if counted[0] else None
                if not (native or found):
                    yield from answered(parsed.thought, parsed.final_answer, "length" if cut else "stop", usage,
                                            counted)
                    return
                yield from thought_of(thought, counted)
                for call_id, (good, _) in zip(ids, [*results, *found]):
                    yield CallOut(call_id, good.name, json.dumps(good.arguments, ensure_ascii=False))
                yield Finished("tool_calls", usage, "")
                return
            logger.info("Unusable reply (attempt %d): %s", attempt + 1,
                        outcome.problem or "; ".join(o for _, o in results if o) or text_problems[0])
            settled = parsed.final_answer or parsed.thought
            if attempt == self.settings.max_corrections:
                break
            if observe is not None:
                # A call that cannot run (native or rescued) is a `call` correction; else the text's own problem.
                bad = next((o for _, o in [*results, *found] if o), None)
                observe(ErrorEvent(bad, "call") if bad else ErrorEvent(outcome.problem or problem or "",
                                                                        outcome.kind or "format"))
            reply: dict[str, Any] = {"role": "assistant", "content": parsed.text.strip() or
                                     ("" if native else "(empty reply)")}
            if native:
                reply["tool_calls"] = [call_entry(c.id or "", c.name, c.arguments) for c in native]
            wire.append(reply)
            for call, (_, observation) in zip(native, results):
                wire.append({"role": "tool", "tool_call_id": call.id, "content": observation or NOT_RUN})
            if text_problems:
                wire.append({"role": "user", "content": "\n".join(text_problems)})
        # Out of corrections: the text the reply had, never a half call.
        yield from answered(settled, None, "length" if cut else "stop", meter.usage if counted[0] else None, counted)


#: What checking arguments against a schema that is not one raises.
_SCHEMA_ERRORS = (TypeError, ValueError, AttributeError, KeyError)


def _schema_constraint(schema: Mapping[str, Any]) -> Constraint | None:
    """The grammar of the JSON values `schema` allows, or None where it cannot be compiled (the reply is then
    only checked)."""
    from ..constrain.gbnf import Rules
    from ..constrain.jsonschema import SchemaCompiler

    rules = Rules()
    try:
        root = SchemaCompiler(rules).value(schema, "answer")
    except Exception as error:  # noqa: BLE001 - any schema the compiler cannot take: checked, not constrained
        logger.warning("No grammar for this response_format (%s: %s)", type(error).__name__, error)
        return None
    return Constraint(rules.text(root)) if root is not None else None


def _shown_schema(schema: Mapping[str, Any] | None) -> str:
    """An answer format's schema as the prompt shows it (compact JSON; "" for none)."""
    return "" if schema is None else json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _json_answer(text: str, schema: Mapping[str, Any]) -> tuple[Any, str]:
    """The JSON value `text` holds (alone, or in a code fence, or after prose) and what is wrong with it against
    `schema` ("" when nothing is)."""
    from ..tools.validation import validate

    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1).strip()
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return None, "the reply holds no JSON value"
    try:
        value, _ = json.JSONDecoder().raw_decode(body, min(starts))
    except (ValueError, RecursionError) as error:
        return None, f"it is not valid JSON ({error})"
    checked, problems = validate(dict(schema), value)
    return checked, "; ".join(problems)


def _unchecked(error: Exception) -> RequestError:
    return RequestError(f"a tool's parameters schema cannot be checked against ({type(error).__name__}: {error})",
                        param="tools")


def open_question(request: ChatRequest) -> str:
    """The client's last user message when no tool has answered since (the model's first call for it is
    checked against it: `agent.fit`), without the blocks the client wrapped around it; empty once tool results
    came back, or with no tools to call."""
    if not request.tools:
        return ""
    for message in reversed(request.messages):
        if message.role == "tool" or (message.role == "assistant" and message.calls):
            return ""
        if message.role == "user":
            # Claude Code's message opens with kilobytes of reminders: asked whether Read does what *they* ask
            # (all the probe kept of the message), the 1.5B said no, and its call of Read was sent back.
            # Claude Code's `<system-reminder>`, Codex's `<environment_context>` (`checks.CLIENT_BLOCK`).
            return CLIENT_BLOCK.sub("", message.content).strip() or message.content
    return ""


def _tools_key(request: ChatRequest) -> str:
    """The request's tools as a cache key (their JSON: parameters are dicts)."""
    return json.dumps([[t.name, t.description, t.parameters] for t in request.tools], default=str)


def stable_id(prefix: str, *parts: str) -> str:
    """An id derived from `parts` (the same request gives the same id)."""
    return prefix + hashlib.sha256("\x00".join(parts).encode("utf-8", "replace")).hexdigest()[:24]


def prompt_tokens(core: Core, request: ChatRequest) -> tuple[int, bool]:
    """The tokens the prompt of `request` takes upstream (Anthropic's `count_tokens`), and whether they were
    counted (by the upstream's tokenizer) or estimated: the messages as `core` renders them, mylm's system prompt
    with the tools included, or with `--tools native` the conversation and tool schemas it forwards."""
    request = read_transcripts(request)
    # With no window configured nothing is asked of the upstream: an unprobed one estimates.
    window = core.window if core.window is not None else ContextWindow(core.llm, probe=False)
    if core.settings.tools == "native" and (request.tools or any(m.calls for m in request.messages)):
        return window.count((), json.dumps([*wire_messages(request), *wire_tools(request.tools)], default=str))
    step = core.step(request) if core.emulated(request) else None
    return window.count(core.render(request, step))
