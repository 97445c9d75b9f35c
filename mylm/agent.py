"""The agent loop: ask the model, parse its turn, run the tool it called, observe, repeat (seeds 000–004)."""

from __future__ import annotations

import logging
import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from .cancel import CancelToken
from .errors import CancelledError, LLMTimeoutError, MylmError, RunTimeoutError
from .llm import LLM, FinishChunk, LLMRequest, ReasoningChunk, TextChunk
from .parser import ParsedTurn, ParseEvent, ReasoningDelta, StreamParser, TextDelta, format_tool_call
from .prompts import PromptLoader, dump_json, tool_view
from .stops import DEFAULT_STOPS, OBSERVATION_STOP
from .tools.base import Tool, ToolContext, ToolOutcome, run_tool
from .tools.registry import ToolRegistry
from .types import (
    ErrorEvent,
    Event,
    FinalResponseEvent,
    FinishReason,
    IterationStartEvent,
    Message,
    Permission,
    ReasoningEvent,
    RunResult,
    StepCompleteEvent,
    StepStartEvent,
    StopReason,
    TextEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
    UsageEvent,
)

logger = logging.getLogger("mylm.agent")

PermissionHook = Callable[[ToolCall, Tool], Permission]

#: The answer given when the iteration limit is hit and even the summary call fails (seed 003 §6).
FALLBACK_ANSWER = "I could not finish the task within the allowed number of steps."


@dataclass(frozen=True)
class ModelTurn:
    """One model reply: what it means, how it ended, and what it cost."""

    parsed: ParsedTurn
    finish: FinishReason
    usage: Usage | None


@dataclass
class _Run:
    """Mutable bookkeeping for one run; never shared between runs."""

    history: list[Message]
    cancel: CancelToken
    deadline: float
    delta: list[Message] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    usage: Usage = Usage()
    iteration: int = 0
    failures: int = 0
    #: Stop strings still sent to the server (dropped if they cut the model's reasoning).
    stops: tuple[str, ...] = ()

    def add(self, message: Message) -> None:
        self.delta.append(message)


class AgentStream:
    """The events of one run as they happen; `result` is set once the iteration is exhausted."""

    def __init__(self, events: Iterator[Event], cancel: CancelToken) -> None:
        self._events = events
        self._cancel = cancel
        self.result: RunResult | None = None

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> Event:
        try:
            return next(self._events)
        except StopIteration as stop:
            self.result = stop.value
            raise

    def cancel(self) -> None:
        """Ask the run to stop as soon as possible (aborts an in-flight model stream or tool)."""
        self._cancel.cancel()

    def consume(self) -> RunResult:
        """Run to the end, discarding the events (they are kept in the result), and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


class Agent:
    """A ReAct agent over the text protocol; the model and the tools are injected."""

    def __init__(
        self,
        llm: LLM,
        tools: Iterable[Tool] = (),
        *,
        max_iterations: int = 10,
        timeout: float = 120.0,
        prompts: PromptLoader | None = None,
        instructions: str = "",
        max_tokens: int = 4096,
        multiple_calls: bool = False,
        permission: PermissionHook | None = None,
        workspace: Path | None = None,
        max_consecutive_failures: int = 3,
        max_observation_chars: int = 30_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.llm = llm
        self.tools = ToolRegistry(tools)
        self.max_iterations = max_iterations
        self.timeout = timeout
        self.prompts = prompts or PromptLoader.default()
        self.max_tokens = max_tokens
        self.multiple_calls = multiple_calls
        self.permission = permission
        self.workspace = workspace or Path.cwd()
        self.max_consecutive_failures = max_consecutive_failures
        self.max_observation_chars = max_observation_chars
        self._clock = clock
        # One system prompt for the agent's life: no timestamps or counters, so server prompt caches hit.
        self.system_prompt = self.prompts.render(
            "system.j2",
            tools=tool_view(self.tools),
            multiple_calls=multiple_calls,
            instructions=instructions,
            platform=platform.system() or "unknown",
            cwd=str(self.workspace),
        )
        # Without several calls per turn, the end of the first call can stop generation at the server.
        self.stops: tuple[str, ...] = DEFAULT_STOPS if not multiple_calls else (OBSERVATION_STOP,)

    # --------------------------------------------------------------------------------------------- API

    def stream(
        self, prompt: str | None, *, history: Sequence[Message] = (), cancel: CancelToken | None = None
    ) -> AgentStream:
        """Start a run on `prompt` after `history`; iterate the returned stream for events, then read `.result`."""
        token = cancel or CancelToken()
        run = _Run(history=list(history), cancel=token, deadline=self._clock() + self.timeout, stops=self.stops)
        if prompt is not None:
            run.add(Message("user", prompt))
        return AgentStream(self._recorded(run), token)

    def run(
        self, prompt: str | None, *, history: Sequence[Message] = (), cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to the end and return the result."""
        return self.stream(prompt, history=history, cancel=cancel).consume()

    # ---------------------------------------------------------------------------------------- the loop

    def _recorded(self, run: _Run) -> Iterator[Event]:
        """Run the loop, keeping every event for the result; turn any ending into a `RunResult`."""
        loop = self._loop(run)
        try:
            while True:
                event = next(loop)
                run.events.append(event)
                yield event
        except StopIteration as stop:
            text, reason = stop.value
            return self._result(run, text, reason, None)
        except (CancelledError, KeyboardInterrupt):
            return self._result(run, "", StopReason.CANCELLED, CancelledError("cancelled by the user"))
        except (RunTimeoutError, LLMTimeoutError) as error:
            if isinstance(error, LLMTimeoutError) and self._clock() < run.deadline:
                return (yield from self._fail(run, error))
            timeout = RunTimeoutError(f"the run took longer than its {self.timeout:g} s timeout")
            logger.warning("Run timed out after %g s", self.timeout)
            return self._result(run, "", StopReason.TIMEOUT, timeout)
        except MylmError as error:
            return (yield from self._fail(run, error))
        finally:
            loop.close()

    def _fail(self, run: _Run, error: MylmError) -> Iterator[Event]:
        event = ErrorEvent(str(error), type(error).__name__, fatal=True)
        run.events.append(event)
        yield event
        return self._result(run, "", StopReason.ERROR, error)

    def _result(self, run: _Run, text: str, reason: StopReason, error: MylmError | None) -> RunResult:
        logger.info("Run ended: %s after %d iteration(s)", reason.value, run.iteration)
        return RunResult(
            final_text=text,
            stop_reason=reason,
            iterations_used=run.iteration,
            timed_out=reason is StopReason.TIMEOUT,
            history_delta=tuple(run.delta),
            events=tuple(run.events),
            usage=run.usage,
            error=error,
        )

    def _loop(self, run: _Run) -> Iterator[Event]:
        for iteration in range(1, self.max_iterations + 1):
            self._check(run)
            run.iteration = iteration
            logger.info("Agentic iteration %d/%d", iteration, self.max_iterations)
            yield IterationStartEvent(iteration, self.max_iterations)
            turn = yield from self._model_turn(run, self._messages(run))
            logger.info("Model turn ended: %s", turn.finish.value)
            problem = _unusable(turn.parsed)
            if problem is not None:
                yield from self._reject_turn(run, turn, problem)
                continue
            run.failures = 0
            if not turn.parsed.tool_calls:
                logger.info("Final response received (no tool calls)")
                run.add(Message("assistant", turn.parsed.thought or turn.parsed.text.strip()))
                answer = turn.parsed.final_answer or ""
                yield FinalResponseEvent(answer, StopReason.FINAL_ANSWER)
                return answer, StopReason.FINAL_ANSWER
            done = yield from self._act(run, turn.parsed)
            if done is not None:
                yield FinalResponseEvent(done, StopReason.DONE_TOOL)
                return done, StopReason.DONE_TOOL
        logger.warning("Max agentic iterations reached without final response")
        answer = yield from self._summarise(run)
        yield FinalResponseEvent(answer, StopReason.MAX_ITERATIONS)
        return answer, StopReason.MAX_ITERATIONS

    def _check(self, run: _Run) -> None:
        run.cancel.raise_if_cancelled()
        if self._clock() >= run.deadline:
            raise RunTimeoutError("deadline passed")

    def _messages(self, run: _Run, *extra: Message) -> tuple[Message, ...]:
        return (Message("system", self.system_prompt), *run.history, *run.delta, *extra)

    # ----------------------------------------------------------------------------------- model turns

    def _model_turn(self, run: _Run, messages: tuple[Message, ...]) -> Iterator[Event]:
        """One completion; redone once without stop strings if a server stop cut the model's reasoning."""
        turn = yield from self._complete(run, messages)
        parsed = turn.parsed
        cut_mid_thought = parsed.unclosed_reasoning and not parsed.tool_calls and turn.finish is not FinishReason.MAX_TOKENS
        if cut_mid_thought and run.stops:
            # Models draft calls inside <think>; a server honouring our stops then ends the turn mid-thought.
            # Ask again without stops for the rest of the run: the parser still ends the turn at a real call.
            logger.warning("The endpoint stopped inside the model's reasoning; retrying without stop strings")
            yield ErrorEvent("the reply stopped inside the reasoning; asking again without stop strings", "retry")
            run.stops = ()
            turn = yield from self._complete(run, messages)
        return turn

    def _complete(self, run: _Run, messages: tuple[Message, ...]) -> Iterator[Event]:
        """Stream one completion into the parser, closing the stream as soon as the turn's outcome is settled."""
        request = LLMRequest(messages, run.stops, self.max_tokens, run.deadline, run.cancel)
        parser = StreamParser(multiple_calls=self.multiple_calls)
        shown: list[str] = []
        server: FinishChunk | None = None
        stream = self.llm.stream(request)
        try:
            for chunk in stream:
                if isinstance(chunk, TextChunk):
                    yield from self._relay(parser.feed(chunk.text), shown)
                    if parser.finished:
                        break  # stop paying for tokens once the call is complete, or the model invents results
                elif isinstance(chunk, ReasoningChunk):
                    if chunk.text:
                        yield ReasoningEvent(chunk.text)
                elif isinstance(chunk, FinishChunk):
                    server = chunk
        except BaseException:
            # Keep what the user already saw: the conversation so far is never lost.
            if "".join(shown).strip():
                run.add(Message("assistant", "".join(shown).rstrip() + "\n[interrupted]"))
            raise
        finally:
            stream.close()
        yield from self._relay(parser.close(), shown)
        assert parser.result is not None
        usage = server.usage if server else None
        if usage is not None:
            run.usage = run.usage + usage
            yield UsageEvent(usage, run.usage)
        return ModelTurn(parser.result, _finish_reason(parser.result, server, parser.finished), usage)

    @staticmethod
    def _relay(events: list[ParseEvent], shown: list[str]) -> Iterator[Event]:
        """Turn parser events into agent events (calls are reported when they are handled)."""
        for event in events:
            if isinstance(event, TextDelta):
                shown.append(event.text)
                yield TextEvent(event.text)
            elif isinstance(event, ReasoningDelta):
                yield ReasoningEvent(event.text)

    def _reject_turn(self, run: _Run, turn: ModelTurn, message: str) -> Iterator[Event]:
        """Record an unusable turn and tell the model exactly what to fix (or give up after repeated failures)."""
        run.add(Message("assistant", turn.parsed.text.strip() or "(empty reply)"))
        run.failures += 1
        yield ErrorEvent(message, "format")
        if run.failures >= self.max_consecutive_failures:
            raise MylmError(
                f"the model gave {run.failures} unusable replies in a row; last problem: {message}"
            )
        if turn.finish is FinishReason.MAX_TOKENS:
            observation = self.prompts.render("truncated.j2", max_tokens=self.max_tokens)
        else:
            observation = self.prompts.render("format_error.j2", message=message)
        run.add(Message("user", observation))

    # ------------------------------------------------------------------------------------------ tools

    def _act(self, run: _Run, parsed: ParsedTurn) -> Iterator[Event]:
        """Run the turn's calls in order; return the done tool's final message, if one ended the run."""
        calls = parsed.tool_calls if self.multiple_calls else parsed.tool_calls[:1]
        calls = tuple(replace(c, id=f"call_{run.iteration}_{i}") for i, c in enumerate(calls, 1))
        # History records the canonical form, so the next prompt is an exact extension of this one.
        canonical = "\n".join(format_tool_call(c) for c in calls)
        run.add(Message("assistant", f"{parsed.thought}\n{canonical}" if parsed.thought else canonical))
        logger.info("Executing %d tool call(s)", len(calls))
        observations: list[str] = []
        final: str | None = None
        for call in calls:
            outcome, observation = yield from self._step(run, call)
            observations.append(observation)
            if outcome.final_message is not None:
                final = outcome.final_message
                break
        run.add(Message("user", "\n".join(observations)))
        return final

    def _step(self, run: _Run, call: ToolCall) -> Iterator[Event]:
        yield StepStartEvent(call.id, run.iteration, call.name)
        tool_ = self.tools.get(call.name)
        status = "error"
        if tool_ is None:
            yield ToolCallEvent(call)
            outcome = ToolOutcome(self.tools.unknown_tool_message(call.name), True, 0.0)
        else:
            arguments, problems = tool_.validate(call.arguments)
            call = replace(call, arguments=arguments)
            yield ToolCallEvent(call)
            verdict = Permission.allow() if problems or self.permission is None else self.permission(call, tool_)
            if problems:
                outcome = ToolOutcome(_invalid_arguments(tool_, problems), True, 0.0)
            elif not verdict.allowed:
                outcome, status = ToolOutcome(verdict.reason or "the user refused it", True, 0.0), "denied"
            else:
                self._check(run)
                context = ToolContext(deadline=run.deadline, cancel=run.cancel, workspace=self.workspace)
                outcome = run_tool(tool_, arguments, context)
                run.cancel.raise_if_cancelled()
                status = "error" if outcome.is_error else "completed"
        yield ToolResultEvent(call.id, call.name, outcome.output, outcome.is_error, outcome.duration)
        yield StepCompleteEvent(call.id, status)  # type: ignore[arg-type]
        return outcome, self._observe(call.name, outcome, status)

    def _observe(self, name: str, outcome: ToolOutcome, status: str) -> str:
        if status == "denied":
            return self.prompts.render("denied.j2", tool=name, reason=outcome.output)
        if outcome.is_error:
            return self.prompts.render("tool_error.j2", tool=name, message=outcome.output)
        output, cut = _truncate_middle(outcome.output, self.max_observation_chars)
        return self.prompts.render("observation.j2", tool=name, output=output, cut=cut, handle=None)

    # ------------------------------------------------------------------------------------ the summary

    def _summarise(self, run: _Run) -> Iterator[Event]:
        """At the iteration limit: one last call asking for an answer without tools (seed 003 §6)."""
        request = Message("user", self.prompts.render("summary.j2", max_iterations=self.max_iterations))
        try:
            self._check(run)
            turn = yield from self._model_turn(run, self._messages(run, request))
        except (CancelledError, RunTimeoutError, KeyboardInterrupt):
            raise
        except MylmError as error:
            logger.warning("Summary call failed: %s", error)
            return FALLBACK_ANSWER
        answer = (turn.parsed.final_answer or turn.parsed.thought).strip() or FALLBACK_ANSWER
        # Kept in history (unlike seed 003) so a resumed conversation still alternates user/assistant.
        run.add(request)
        run.add(Message("assistant", answer))
        return answer


def _finish_reason(parsed: ParsedTurn, server: FinishChunk | None, cut: bool) -> FinishReason:
    """Normalise why the turn ended: decided from the parsed text, with the server's value only as a hint."""
    if parsed.tool_calls:
        return FinishReason.TOOL_USE
    hint = (server.reason or "") if server else ""
    if hint in ("length", "max_tokens", "limit"):
        return FinishReason.MAX_TOKENS
    if cut or (server is not None and server.stop_sequence):
        return FinishReason.STOP_SEQUENCE
    return FinishReason.END_TURN


def _unusable(parsed: ParsedTurn) -> str | None:
    """Why a turn can be neither run nor taken as the answer, or None if it can."""
    if parsed.error is not None:
        return parsed.error
    if parsed.tool_calls or (parsed.final_answer or "").strip():
        return None
    if parsed.unclosed_reasoning:
        return (
            "Your reply ended inside <think> with neither a tool call nor an answer. Close your reasoning "
            "with </think>, then write one <tool_code> block or your answer."
        )
    return "Your reply was empty. Write one <tool_code> block to use a tool, or write your answer."


def _invalid_arguments(tool_: Tool, problems: list[str]) -> str:
    listed = "; ".join(problems)
    return f"invalid arguments: {listed}. The parameters schema is {dump_json(dict(tool_.parameters))}"


def _truncate_middle(text: str, limit: int) -> tuple[str, int]:
    """Keep the head and tail of `text` within `limit` characters; return it and how many were cut."""
    if len(text) <= limit:
        return text, 0
    half = limit // 2
    return text[:half] + "\n[...]\n" + text[-half:], len(text) - 2 * half
