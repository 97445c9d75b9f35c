"""The agent loop: ask the model, parse its turn, run the tool it called, observe, repeat (seeds 000–004)."""

from __future__ import annotations

import logging
import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Generator, Iterable, Literal, Sequence, TypeVar

from .cancel import CancelToken, hook_deadline
from .context import Compactor, TokenEstimator
from .decoding import clean_text
from .errors import (
    CancelledError,
    LLMTimeoutError,
    MylmError,
    NoToolsError,
    RunTimeoutError,
    UnusableRepliesError,
)
from .llm import LLM, ConstrainMode, Constraint, LLMRequest, alternating
from .prompts import PromptLoader, dump_json, tool_view
from .protocol.canonical import format_tool_call
from .protocol.defuse import neutralise
from .protocol.parsed import ParsedTurn
from .protocol.stops import DEFAULT_STOPS, OBSERVATION_STOP, TOOL_STOP
from .tools.base import Tool, ToolContext, ToolOutcome
from .tools.bounded import run_bounded
from .tools.outputs import OutputCache, cut_middle
from .tools.registry import ToolRegistry
from .turn import ModelTurn, cut_mid_thought, stream_turn
from .types import (
    ContinueEvent,
    ErrorEvent,
    Event,
    FinalResponseEvent,
    FinishReason,
    IterationStartEvent,
    Message,
    Permission,
    RunResult,
    StepCompleteEvent,
    StepStartEvent,
    StopReason,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
    UsageEvent,
)

if TYPE_CHECKING:
    from .aio import AsyncAgentStream

logger = logging.getLogger("mylm.agent")
# A library's log is the application's to show: without this, Python's last-resort handler would print
# mylm's warnings on stderr in every program that has not configured logging.
logging.getLogger("mylm").addHandler(logging.NullHandler())

PermissionHook = Callable[[ToolCall, Tool], Permission]
#: Called with the model's final answer and the conversation so far; a message it returns sends the model back
#: to work (it is added as a user message), None lets the answer stand.
BeforeFinishHook = Callable[[str, Sequence[Message]], "str | None"]
#: `auto`, `none`, `required`, or the name of the one tool the model must call.
ToolChoice = str
TOOL_CHOICES = ("auto", "none", "required")

T = TypeVar("T")
#: A step of the loop: yields events as they happen, returns its outcome.
Steps = Generator[Event, None, T]

#: The answer given when the iteration limit is hit and even the summary call fails (seed 003 §6).
FALLBACK_ANSWER = "I could not finish the task within the allowed number of steps."
#: What the model is told about a tool the user interrupted.
TOOL_INTERRUPTED = "interrupted by the user before it finished; it may have done part of its work"


@dataclass
class _Run:
    """Mutable bookkeeping for one run; never shared between runs."""

    #: The conversation as it will be sent (after the system message): prior history, then this run's turns.
    messages: list[Message]
    cancel: CancelToken
    deadline: float
    #: Stop strings still sent to the server (dropped if they cut the model's reasoning).
    stops: tuple[str, ...]
    prompt: str = ""
    added: list[Message] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    usage: Usage = Usage()
    iteration: int = 0
    #: Every completion requested: loop turns, the retry without stops, compaction and the summary call.
    model_calls: int = 0
    failures: int = 0
    compacted: bool = False
    #: The calls of the current turn, and how many could not even be tried (unknown tool, invalid arguments).
    turn_calls: int = 0
    invalid_calls: int = 0
    #: The correction sent last, so a repeated mistake gets a different, more concrete one.
    last_problem: str = ""

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self.added.append(message)


class AgentStream:
    """The events of one run as they happen; `result` is set once the iteration is exhausted."""

    def __init__(self, events: Generator[Event, None, RunResult], cancel: CancelToken) -> None:
        self._events = events
        self._cancel = cancel
        self.result: RunResult | None = None

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> Event:
        if self.result is not None:
            raise StopIteration  # finished: iterating again yields nothing and keeps the result
        try:
            return next(self._events)
        except StopIteration as stop:
            self.result = stop.value
            raise

    def cancel(self) -> None:
        """Ask the run to stop as soon as possible (aborts an in-flight model stream or tool)."""
        self._cancel.cancel()

    def consume(self) -> RunResult:
        """Run to the end (events are kept in the result) and return the result."""
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
        constrain: ConstrainMode = "off",
        permission: PermissionHook | None = None,
        workspace: Path | None = None,
        max_consecutive_failures: int = 3,
        max_observation_chars: int = 30_000,
        output_cache: bool = True,
        context_budget: int | None = None,
        compaction_threshold: float = 0.8,
        keep_recent_messages: int = 6,
        tool_choice: ToolChoice = "auto",
        stop_strings: bool = True,
        before_finish: BeforeFinishHook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.llm = llm
        self.outputs = OutputCache() if output_cache else None
        self.tools = ToolRegistry(tools)
        advertised = list(self.tools)
        if tool_choice not in TOOL_CHOICES and tool_choice not in self.tools:
            known = ", ".join(t.name for t in advertised) or "none"
            raise ValueError(
                f"tool_choice must be auto, none, required or a tool's name; {tool_choice!r} is none of them "
                f"(tools: {known})"
            )
        self.tool_choice = tool_choice
        self.before_finish = before_finish
        #: With no tools at all, a call cannot be corrected into something useful: it ends the run.
        self._no_tools = not advertised
        if tool_choice == "none":
            advertised = []
        elif tool_choice not in TOOL_CHOICES:
            advertised = [t for t in advertised if t.name == tool_choice]
        if self.outputs is not None and "read_output" not in self.tools:
            # Callable, but not listed in the system prompt: the observation that cuts an output says exactly
            # how to call it, and every listed tool costs tokens on every call.
            self.tools.add(self.outputs.tool())
        self.max_iterations = max_iterations
        self.timeout = timeout
        self.prompts = prompts or PromptLoader.default()
        self.max_tokens = max_tokens
        self.multiple_calls = multiple_calls
        self.constrain = constrain
        #: The grammars requests carry (compiled once per agent): every turn, and the summary at the limit.
        self.constraint, self.answer_constraint = _constraints(
            self.tools, constrain, multiple_calls, max_tokens, tool_choice
        )
        self.permission = permission
        self.workspace = workspace or Path.cwd()
        self.max_consecutive_failures = max_consecutive_failures
        self.max_observation_chars = max_observation_chars
        self.estimator = TokenEstimator()
        self.compactor = (
            Compactor(llm, self.prompts, self.estimator, budget=context_budget, threshold=compaction_threshold,
                      keep_recent=keep_recent_messages, max_tokens=max_tokens)
            if context_budget is not None else None
        )
        self._clock = clock
        # One system prompt for the agent's life: no timestamps or counters, so server prompt caches hit.
        self.system_prompt = self.prompts.render(
            "system.j2",
            tools=tool_view(advertised),
            multiple_calls=multiple_calls,
            final_answer_tag=constrain != "off",
            instructions=clean_text(instructions)[0],
            platform=platform.system() or "unknown",
            cwd=clean_text(str(self.workspace))[0],
            tool_choice=tool_choice,
        )
        self.prompts.check(self._templates())
        # Without several calls per turn, the end of the first call can stop generation at the server. Models
        # whose API refuses stop strings get none: the parser still ends the turn at the call.
        self.stops: tuple[str, ...] = DEFAULT_STOPS if not multiple_calls else (OBSERVATION_STOP,)
        if not stop_strings:
            self.stops = ()
        #: Whether this endpoint's chat template opens `<think>` for the model, as its replies have shown so far
        #: (None: not known yet, so the parser holds calls until a reply shows it; see docs/parser.md).
        self.opens_reasoning: bool | None = None

    def _templates(self) -> list[str]:
        """Every template a run can render: checked before the first request, so a broken one is reported
        before any tool has run."""
        names = ["observation.j2", "tool_error.j2", "denied.j2", "format_error.j2", "truncated.j2",
                 "unrun_block.j2", "summary.j2"]
        if self.tool_choice not in ("auto", "none"):
            names.append("tool_required.j2")
        if self.compactor is not None:
            names += ["compaction.j2", "compacted.j2"]
        return names

    # --------------------------------------------------------------------------------------------- API

    def stream(
        self, prompt: str | None, *, history: Sequence[Message] = (), cancel: CancelToken | None = None
    ) -> AgentStream:
        """Start a run on `prompt` after `history`; iterate the returned stream for events, then read `.result`."""
        token = cancel or CancelToken()
        # Text from outside (argv, stdin, a saved session) may carry undecodable bytes as lone surrogates,
        # which no request encoder accepts: they become U+FFFD here, once, instead of failing every request.
        history = [Message(m.role, clean_text(m.content)[0]) for m in history]
        prompt = clean_text(prompt)[0] if prompt is not None else None
        run = _Run(history, token, self._clock() + self.timeout, self.stops, prompt or "")
        if prompt is not None:
            run.add(Message("user", prompt))
        return AgentStream(self._recorded(run), token)

    def run(
        self, prompt: str | None, *, history: Sequence[Message] = (), cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to the end and return the result."""
        return self.stream(prompt, history=history, cancel=cancel).consume()

    def astream(
        self, prompt: str | None, *, history: Sequence[Message] = (), cancel: CancelToken | None = None
    ) -> AsyncAgentStream:
        """The asyncio form of `stream`: `async for event in agent.astream(...)`, then `.result`."""
        from .aio import AsyncAgentStream

        return AsyncAgentStream(self.stream(prompt, history=history, cancel=cancel))

    async def arun(
        self, prompt: str | None, *, history: Sequence[Message] = (), cancel: CancelToken | None = None
    ) -> RunResult:
        """The asyncio form of `run`; cancelling the awaiting task cancels the run."""
        return await self.astream(prompt, history=history, cancel=cancel).consume()

    # ---------------------------------------------------------------------------------------- the loop

    def _recorded(self, run: _Run) -> Steps[RunResult]:
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
            logger.warning("Run timed out after %g s", self.timeout)
            timeout = RunTimeoutError(f"the run took longer than its {self.timeout:g} s timeout")
            return self._result(run, "", StopReason.TIMEOUT, timeout)
        except MylmError as error:
            return (yield from self._fail(run, error))
        finally:
            loop.close()

    def _fail(self, run: _Run, error: MylmError) -> Steps[RunResult]:
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
            model_calls=run.model_calls,
            timed_out=reason is StopReason.TIMEOUT,
            history_delta=tuple(run.added),
            events=tuple(run.events),
            usage=run.usage,
            error=error,
            history=tuple(run.messages),
            compacted=run.compacted,
        )

    def _loop(self, run: _Run) -> Steps[tuple[str, StopReason]]:
        for iteration in range(1, self.max_iterations + 1):
            self._check(run)
            yield from self._maybe_compact(run)
            run.iteration = iteration
            logger.info("Agentic iteration %d/%d", iteration, self.max_iterations)
            yield IterationStartEvent(iteration, self.max_iterations)
            turn = yield from self._model_turn(run, self._messages(run))
            logger.info("Model turn ended: %s", turn.finish.value)
            problem = _unusable(turn.parsed)
            if problem is not None:
                yield from self._reject_turn(run, turn, problem)
                continue
            if not turn.parsed.tool_calls:
                if self.tool_choice not in ("auto", "none"):
                    yield from self._require_call(run, turn)
                    continue
                run.failures = 0
                logger.info("Final response received (no tool calls)")
                run.add(Message("assistant", turn.parsed.thought or turn.parsed.text.strip()))
                answer = turn.parsed.final_answer or ""
                if (yield from self._sent_back(run, answer)):
                    continue
                # An answer that ran into the token limit is kept, but never passed off as complete.
                cut = turn.finish is FinishReason.MAX_TOKENS
                reason = StopReason.MAX_TOKENS if cut else StopReason.FINAL_ANSWER
                yield FinalResponseEvent(answer, reason)
                return answer, reason
            unknown = {c.name for c in turn.parsed.tool_calls if c.name not in self.tools}
            if self._no_tools and unknown:
                names = ", ".join(sorted(unknown))
                run.add(Message("assistant", turn.parsed.text.strip()))
                raise NoToolsError(
                    f"the model called a tool ({names}), but this agent has no tools; give it tools, or tell "
                    "it to answer directly"
                )
            done = yield from self._act(run, turn.parsed)
            if done is not None:
                yield FinalResponseEvent(done, StopReason.DONE_TOOL)
                return done, StopReason.DONE_TOOL
            # A turn whose every call was invalid is as unusable as an unreadable one: repeated, the run ends.
            run.failures = run.failures + 1 if run.invalid_calls == run.turn_calls > 0 else 0
            if run.failures >= self.max_consecutive_failures:
                raise MylmError(f"the model gave {run.failures} unusable replies in a row; last problem: "
                                f"{run.last_problem}")
        logger.warning("Max agentic iterations reached without final response")
        answer = yield from self._summarise(run)
        yield FinalResponseEvent(answer, StopReason.MAX_ITERATIONS)
        return answer, StopReason.MAX_ITERATIONS

    def _require_call(self, run: _Run, turn: ModelTurn) -> Steps[None]:
        """tool_choice `required` or a tool's name: a reply without a call is corrected, not taken as the
        answer."""
        run.add(Message("assistant", turn.parsed.text.strip() or "(empty reply)"))
        tool_name = None if self.tool_choice == "required" else self.tool_choice
        which = f"a call of {tool_name}" if tool_name else "a tool call"
        yield ErrorEvent(f"the reply had no tool call; {which} is required (tool_choice)", "tool_choice")
        run.add(Message("user", self.prompts.render("tool_required.j2", tool=tool_name)))

    def _sent_back(self, run: _Run, answer: str) -> Steps[bool]:
        """Ask the `before_finish` hook about the answer; True when it sent the model back to work."""
        if self.before_finish is None:
            return False
        try:
            message = self.before_finish(answer, tuple(run.messages))
        except (CancelledError, KeyboardInterrupt):
            raise
        except Exception as error:  # noqa: BLE001 - an application's hook must not lose the answer
            logger.warning("The before_finish hook failed: %r", error)
            problem = f"the before_finish hook failed: {type(error).__name__}: {error}"
            yield ErrorEvent(problem, "before_finish")
            return False
        if not message or not message.strip():
            return False
        logger.info("before_finish sent the model back to work")
        run.add(Message("user", message))
        yield ContinueEvent(answer, message)
        return True

    def _check(self, run: _Run) -> None:
        run.cancel.raise_if_cancelled()
        if self._clock() >= run.deadline:
            raise RunTimeoutError("deadline passed")

    def _messages(self, run: _Run, *extra: Message) -> tuple[Message, ...]:
        return (Message("system", self.system_prompt), *run.messages, *extra)

    # ----------------------------------------------------------------------------------- model turns

    def _model_turn(
        self, run: _Run, messages: tuple[Message, ...], *, summary: bool = False
    ) -> Steps[ModelTurn]:
        """One completion; redone once without stop strings if a server stop cut the model's reasoning."""
        constraint = self.answer_constraint if summary else self.constraint
        turn = yield from self._complete(run, messages, constraint)
        if run.stops and cut_mid_thought(turn):
            # Models draft calls inside <think>; a server honouring our stops then ends the turn mid-thought.
            # Ask again without stops for the rest of the run: the parser still ends the turn at a real call.
            logger.warning("The endpoint stopped inside the model's reasoning; retrying without stop strings")
            yield ErrorEvent("the reply stopped inside the reasoning; asking again without stop strings", "retry")
            run.stops = ()
            turn = yield from self._complete(run, messages, constraint)
        return turn

    def _deadline(self, run: _Run) -> float:
        """The run's deadline on the clock HTTP reads and tools compare against (the run's clock may be a fake)."""
        return time.monotonic() + (run.deadline - self._clock())

    def _request(
        self,
        run: _Run,
        messages: Sequence[Message],
        stops: tuple[str, ...],
        constraint: Constraint | None = None,
    ) -> LLMRequest:
        """The request for `messages`, with roles alternating as strict chat templates require."""
        return LLMRequest(
            alternating(messages), stops, self.max_tokens, self._deadline(run), run.cancel, constraint
        )

    def _complete(
        self, run: _Run, messages: tuple[Message, ...], constraint: Constraint | None = None
    ) -> Steps[ModelTurn]:
        stops = run.stops
        if self.opens_reasoning is not False:
            # Unless replies have shown that the template does not open <think>, a call may be a draft that a later
            # lone </think> turns into reasoning: let the model go on past it (docs/parser.md, "Reasoning").
            stops = tuple(s for s in stops if s != TOOL_STOP)
        request = self._request(run, messages, stops, constraint)
        run.model_calls += 1
        shown: list[str] = []
        try:
            turn: ModelTurn = yield from stream_turn(
                self.llm, request, multiple_calls=self.multiple_calls, shown=shown, tools=self._tool_names(),
                reasoning_open=self.opens_reasoning,
            )
        except BaseException:
            # Keep what the user already saw: the conversation so far is never lost.
            if "".join(shown).strip():
                run.add(Message("assistant", "".join(shown).rstrip() + "\n[interrupted]"))
            raise
        if turn.opens_reasoning is not None:
            self.opens_reasoning = turn.opens_reasoning
        if turn.usage is not None:
            run.usage = run.usage + turn.usage
            if turn.usage.prompt_tokens:
                self.estimator.calibrate(messages, turn.usage.prompt_tokens)
            yield UsageEvent(turn.usage, run.usage)
        return turn

    def _tool_names(self) -> dict[str, tuple[str, ...]]:
        """The tools in play and their argument names: the parser reads drifted calls against them."""
        return {t.name: tuple(dict(t.parameters).get("properties") or ()) for t in self.tools}

    def _reject_turn(self, run: _Run, turn: ModelTurn, message: str) -> Steps[None]:
        """Record an unusable turn and tell the model exactly what to fix (or give up after repeated failures)."""
        run.add(Message("assistant", turn.parsed.text.strip() or "(empty reply)"))
        run.failures += 1
        yield ErrorEvent(message, "format")
        if run.failures >= self.max_consecutive_failures:
            raise UnusableRepliesError(
                f"the model gave {run.failures} unusable replies in a row; last problem: {message}"
            )
        if turn.finish is FinishReason.MAX_TOKENS:
            observation = self.prompts.render("truncated.j2", max_tokens=self.max_tokens)
        else:
            observation = self.prompts.render("format_error.j2", message=neutralise(_escalated(run, message)))
        run.add(Message("user", observation))

    # ------------------------------------------------------------------------------------------ tools

    def _act(self, run: _Run, parsed: ParsedTurn) -> Steps[str | None]:
        """Run the turn's calls in order; return the done tool's final message, if one ended the run."""
        calls = parsed.tool_calls if self.multiple_calls else parsed.tool_calls[:1]
        calls = tuple(replace(c, id=f"call_{run.iteration}_{i}") for i, c in enumerate(calls, 1))
        run.turn_calls, run.invalid_calls = len(calls), 0
        # History records the canonical form, so the next prompt is an exact extension of this one.
        canonical = "\n".join(format_tool_call(c) for c in calls)
        run.add(Message("assistant", f"{parsed.thought}\n{canonical}" if parsed.thought else canonical))
        logger.info("Executing %d tool call(s)", len(calls))
        observations: list[str] = []
        final: str | None = None
        try:
            for call in calls:
                outcome = yield from self._step(run, call, observations)
                if outcome.final_message is not None:
                    final = outcome.final_message
                    break
                run.cancel.raise_if_cancelled()  # after recording: what the tool did is not lost
            if final is None:
                for warning in parsed.warnings:
                    # A block that could not be run next to ones that did: the model must still hear of it.
                    yield ErrorEvent(warning, "format")
                    observations.append(self.prompts.render("unrun_block.j2", message=neutralise(warning)))
        finally:
            # Even when cancelled part-way, the observations already made stay in the conversation.
            if observations:
                run.add(Message("user", "\n".join(observations)))
        return final

    def _step(self, run: _Run, call: ToolCall, observations: list[str]) -> Steps[ToolOutcome]:
        """Handle one call: validate, ask the permission hook, run; its observation goes to `observations`."""
        yield StepStartEvent(call.id, run.iteration, call.name)
        tool_ = self.tools.get(call.name)
        status: Literal["completed", "error", "denied"] = "error"
        if tool_ is None:
            yield ToolCallEvent(call)
            outcome = ToolOutcome(_escalated(run, self.tools.unknown_tool_message(call.name)), True, 0.0)
            run.invalid_calls += 1
        else:
            arguments, problems = tool_.validate(call.arguments)
            call = replace(call, arguments=arguments)
            yield ToolCallEvent(call)
            refusal = self._refused_by_choice(call.name)
            skip = bool(problems) or refusal is not None
            verdict = Permission.allow() if skip else (yield from self._permit(run, call, tool_))
            if refusal is not None:
                outcome, status = ToolOutcome(refusal, True, 0.0), "denied"
            elif problems:
                outcome = ToolOutcome(_escalated(run, _invalid_arguments(tool_, problems), tool_), True, 0.0)
                run.invalid_calls += 1
            elif not verdict.allowed:
                outcome, status = ToolOutcome(verdict.reason or "the user refused it", True, 0.0), "denied"
            else:
                self._check(run)
                context = ToolContext(
                    deadline=self._deadline(run), cancel=run.cancel, workspace=self.workspace, grant=verdict.grant,
                )
                started = time.monotonic()
                try:
                    # In a thread the run can abandon: an overrunning tool must not hold the run past its
                    # deadline.
                    outcome = run_bounded(tool_, arguments, context)
                except (CancelledError, KeyboardInterrupt):
                    # Record that it was cut short, so the model (and a resumed chat) knows, then stop.
                    interrupted = ToolOutcome(TOOL_INTERRUPTED, True, time.monotonic() - started)
                    yield from self._report(call, interrupted, "error", observations)
                    raise
                status = "error" if outcome.is_error else "completed"
        output, replaced = clean_text(outcome.output)
        if replaced:
            logger.warning("%s returned text that is not valid UTF-8; replaced it with U+FFFD", call.name)
            outcome = replace(outcome, output=output)
        yield from self._report(call, outcome, status, observations)
        return outcome

    def _refused_by_choice(self, name: str) -> str | None:
        """Why tool_choice forbids calling `name`, or None."""
        if self.tool_choice == "none":
            return "tools are turned off for this run (tool_choice none): answer without calling any tool"
        if self.tool_choice not in TOOL_CHOICES and name not in (self.tool_choice, "read_output"):
            return f"only {self.tool_choice} may be called in this run (tool_choice)"
        return None

    def _permit(self, run: _Run, call: ToolCall, tool_: Tool) -> Steps[Permission]:
        """Ask the permission hook; a hook that fails refuses the call (fail closed) instead of ending the run."""
        if self.permission is None:
            return Permission.allow()
        # The hook's own checks (the policy asks git about the repository) stop at the run's deadline.
        token = hook_deadline.set(self._deadline(run))
        try:
            return self.permission(call, tool_)
        except (CancelledError, KeyboardInterrupt):
            raise
        except Exception as error:  # noqa: BLE001 - an application's hook must not crash the loop
            failure = error
        finally:
            hook_deadline.reset(token)
        logger.warning("The permission hook failed on %s: %r", call.name, failure)
        yield ErrorEvent(f"the permission hook failed: {type(failure).__name__}: {failure}", "permission")
        return Permission.deny(f"the approval check failed ({type(failure).__name__}), so it was not run")

    def _report(
        self, call: ToolCall, outcome: ToolOutcome, status: Literal["completed", "error", "denied"],
        observations: list[str],
    ) -> Steps[None]:
        yield ToolResultEvent(call.id, call.name, outcome.output, outcome.is_error, outcome.duration)
        yield StepCompleteEvent(call.id, status)
        observations.append(self._observe(call.name, outcome, status))

    def _observe(self, name: str, outcome: ToolOutcome, status: Literal["completed", "error", "denied"]) -> str:
        # Neutralised here, not only by the template's filter: a customised template that drops the filter
        # still cannot let tool output close the observation or open a call.
        if status == "denied":
            return self.prompts.render("denied.j2", tool=name, reason=neutralise(outcome.output))
        if outcome.is_error:
            return self.prompts.render("tool_error.j2", tool=name, message=neutralise(outcome.output))
        output = outcome.output.rstrip("\n")
        if self.outputs is not None:
            excerpt = self.outputs.excerpt(output, self.max_observation_chars)
            text, cut, handle = excerpt.text, excerpt.cut, excerpt.handle
        else:
            (text, cut), handle = cut_middle(output, self.max_observation_chars), None
        return self.prompts.render("observation.j2", tool=name, output=neutralise(text), cut=cut, handle=handle)

    # ------------------------------------------------------------------------- context and the summary

    def _maybe_compact(self, run: _Run) -> Steps[None]:
        """Summarise older turns when the prompt nears the context budget (seed 003)."""
        if self.compactor is None:
            return
        try:
            outcome = self.compactor.compact(
                self.system_prompt, run.messages, task=run.prompt, deadline=run.deadline, cancel=run.cancel
            )
        except (CancelledError, LLMTimeoutError, KeyboardInterrupt):
            raise
        except MylmError as error:
            run.model_calls += 1
            logger.warning("Compaction failed: %s", error)
            yield ErrorEvent(f"could not compact the conversation: {error}", "compaction")
            return
        if outcome is None:
            return
        run.model_calls += 1
        if outcome.usage is not None:
            run.usage = run.usage + outcome.usage
        run.messages[:] = outcome.messages
        run.compacted = True
        yield outcome.event

    def _summarise(self, run: _Run) -> Steps[str]:
        """At the iteration limit: one last call asking for an answer without tools (seed 003 §6)."""
        request = Message("user", self.prompts.render("summary.j2", max_iterations=self.max_iterations))
        self._check(run)
        # Recorded first (unlike seed 003's temporary list), so whatever the model says next, even cut short,
        # is an answer to a request the history shows.
        run.add(request)
        try:
            turn = yield from self._model_turn(run, self._messages(run), summary=True)
        except (CancelledError, RunTimeoutError, KeyboardInterrupt):
            raise
        except MylmError as error:
            if isinstance(error, LLMTimeoutError) and self._clock() >= run.deadline:
                raise
            logger.warning("Summary call failed: %s", error)
            if run.messages[-1].role != "assistant":
                run.add(Message("assistant", FALLBACK_ANSWER))
            return FALLBACK_ANSWER
        answer = (turn.parsed.final_answer or turn.parsed.thought).strip() or FALLBACK_ANSWER
        run.add(Message("assistant", answer))
        return answer


def _constraints(
    tools: ToolRegistry, mode: ConstrainMode, multiple_calls: bool, max_tokens: int, tool_choice: str = "auto"
) -> tuple[Constraint | None, Constraint | None]:
    """The turn and summary constraints for `mode` (`auto`: where the endpoint can; `grammar`: insist), with
    `tool_choice` mapped onto the grammar: `none` offers no call, a tool's name only that tool (and
    `read_output`), `required` and a name leave no answer branch.

    Thought and answer are sized to the output token limit (a token is rarely under two characters), so a
    model under the grammar closes its answer itself rather than being cut off mid-turn."""
    if mode == "off":
        return None, None
    if mode not in ("auto", "grammar"):
        raise ValueError(f"constrain must be auto, grammar or off, not {mode!r}")
    from .constrain import TRIGGER, ToolSpec, compile_protocol
    from .constrain.protocol import ANSWER_CHARS, THOUGHT_CHARS

    offered = [t for t in tools if tool_choice in TOOL_CHOICES or t.name in (tool_choice, "read_output")]
    grammar = compile_protocol(
        [] if tool_choice == "none" else [ToolSpec(t.name, t.parameters) for t in offered],
        multiple_calls=multiple_calls,
        thought_chars=min(THOUGHT_CHARS, max_tokens // 2),
        answer_chars=min(ANSWER_CHARS, max_tokens),
        require_call=tool_choice not in ("auto", "none"),
    )
    required = mode == "grammar"
    return (
        Constraint(grammar.turn, grammar.call, TRIGGER, required),
        Constraint(grammar.answer, required=required),
    )


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


def _escalated(run: _Run, message: str, tool_: Tool | None = None) -> str:
    """The correction for `message`; when it repeats the last one (which evidently did not help), a different one:
    a ready-made block to copy, with the tool's real argument names."""
    repeated = message == run.last_problem
    run.last_problem = message
    if not repeated:
        return message
    if tool_ is not None:
        names = list(dict(tool_.parameters).get("required") or dict(tool_.parameters).get("properties") or ())
        arguments = {str(n): "VALUE" for n in names}
        block = format_tool_call(ToolCall(tool_.name, arguments))
        return (f"{message}\nThis is the same mistake as in your previous call, so that correction did not help. "
                "Do not copy the schema. Copy this block exactly and replace each VALUE with the value you "
                f"mean:\n{block}")
    return (f"{message}\nThis is the same problem as in your previous reply. Reply with nothing but one block "
            "in exactly this form (or, to answer, with plain text and no tags):\n"
            + format_tool_call(ToolCall("TOOL_NAME", {"ARGUMENT": "VALUE"})))


def _invalid_arguments(tool_: Tool, problems: list[str]) -> str:
    listed = "; ".join(problems)
    return f"invalid arguments: {listed}. The parameters schema is {dump_json(dict(tool_.parameters))}"
