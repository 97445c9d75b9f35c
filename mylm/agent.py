"""The agent loop: ask the model, parse its turn, run the tool it called, observe, repeat (seeds 000–004)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Generator, Iterable, Literal, Sequence

from .cancel import CancelToken, hook_deadline
from .constrain.select import TOOL_CHOICES
from .context import Compactor
from .corrections import Corrections
from .decoding import clean_text
from .errors import (
    CancelledError,
    LLMTimeoutError,
    MylmError,
    NoToolsError,
    RunTimeoutError,
    UnusableRepliesError,
)
from .llm import LLM, ConstrainMode, Constraint
from .outputs import OutputCache, cut_middle
from .prompts import PromptLoader
from .protocol.canonical import format_tool_call
from .protocol.defuse import neutralise
from .protocol.parsed import ParsedTurn
from .step import Meter, ModelStep, StepConfig, StepOutcome, Steps, ToolChoice
from .tools.base import Tool, ToolContext, ToolOutcome
from .tools.bounded import run_bounded
from .tools.registry import ToolRegistry
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
    #: The corrections sent so far, so a repeated mistake gets a different, more concrete one.
    corrections: Corrections
    prompt: str = ""
    added: list[Message] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: Every completion requested (loop turns, the retry without stops, compaction, the summary) and its cost.
    meter: Meter = field(default_factory=Meter)
    iteration: int = 0
    failures: int = 0
    compacted: bool = False
    #: The calls of the current turn, and how many could not even be tried (unknown tool, invalid arguments).
    turn_calls: int = 0
    invalid_calls: int = 0

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
        self.outputs = OutputCache() if output_cache else None
        self.tools = ToolRegistry(tools)
        listed = list(self.tools)
        self.tool_choice = tool_choice
        self.before_finish = before_finish
        #: With no tools at all, a call cannot be corrected into something useful: it ends the run.
        self._no_tools = not listed
        unlisted: list[Tool] = []
        if self.outputs is not None and "read_output" not in self.tools:
            # Callable, but not listed in the system prompt: the observation that cuts an output says exactly
            # how to call it, and every listed tool costs tokens on every call.
            unlisted.append(self.outputs.tool())
        self.max_iterations = max_iterations
        self.timeout = timeout
        self.prompts = prompts or PromptLoader.default()
        self.max_tokens = max_tokens
        self.multiple_calls = multiple_calls
        self.constrain = constrain
        config = StepConfig(max_tokens, multiple_calls, constrain, tool_choice, stop_strings)
        self.step = ModelStep(llm, listed, config, prompts=self.prompts, unlisted=unlisted)
        for tool_ in unlisted:
            self.tools.add(tool_)
        self.permission = permission
        self.workspace = workspace or Path.cwd()
        self.max_consecutive_failures = max_consecutive_failures
        self.max_observation_chars = max_observation_chars
        self.estimator = self.step.estimator
        self.compactor = (
            Compactor(llm, self.prompts, self.estimator, budget=context_budget, threshold=compaction_threshold,
                      keep_recent=keep_recent_messages, max_tokens=max_tokens)
            if context_budget is not None else None
        )
        self._clock = clock
        # One system prompt for the agent's life: no timestamps or counters, so server prompt caches hit.
        self.system_prompt = self.step.system_prompt(instructions=instructions, cwd=str(self.workspace))
        self.prompts.check(self._templates())

    @property
    def llm(self) -> LLM:
        """The model endpoint every turn goes to (replaceable, e.g. by a wrapper that rate-limits it)."""
        return self.step.llm

    @llm.setter
    def llm(self, llm: LLM) -> None:
        self.step.llm = llm

    @property
    def constraint(self) -> Constraint | None:
        """The grammar every turn is sampled under (None: unconstrained)."""
        return self.step.constraint

    @property
    def answer_constraint(self) -> Constraint | None:
        """The grammar of the summary turn at the iteration limit (None: unconstrained)."""
        return self.step.answer_constraint

    @property
    def opens_reasoning(self) -> bool | None:
        """Whether the endpoint's chat template opens `<think>`, as its replies have shown (None: not known)."""
        return self.step.opens_reasoning

    @opens_reasoning.setter
    def opens_reasoning(self, value: bool | None) -> None:
        self.step.opens_reasoning = value

    def _templates(self) -> list[str]:
        """Every template a run can render: checked before the first request, so a broken one is reported
        before any tool has run."""
        names = ["observation.j2", "tool_error.j2", "denied.j2", "unrun_block.j2", "summary.j2",
                 *self.step.templates()]
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
        run = _Run(history, token, self._clock() + self.timeout, self.step.corrections(), prompt or "")
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
            model_calls=run.meter.calls,
            timed_out=reason is StopReason.TIMEOUT,
            history_delta=tuple(run.added),
            events=tuple(run.events),
            usage=run.meter.usage,
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
            outcome = yield from self._model_turn(run, self._messages(run))
            turn = outcome.turn
            logger.info("Model turn ended: %s", turn.finish.value)
            if not outcome.usable:
                yield from self._reject_turn(run, outcome)
                continue
            if not turn.parsed.tool_calls:
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
                                f"{run.corrections.last}")
        logger.warning("Max agentic iterations reached without final response")
        answer = yield from self._summarise(run)
        yield FinalResponseEvent(answer, StopReason.MAX_ITERATIONS)
        return answer, StopReason.MAX_ITERATIONS

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

    def _model_turn(self, run: _Run, messages: tuple[Message, ...], *, summary: bool = False) -> Steps[StepOutcome]:
        """One completion through the step; what the user saw of one cut short stays in the conversation."""
        try:
            return (yield from self.step.turn(
                messages, deadline=self._deadline(run), cancel=run.cancel, corrections=run.corrections,
                meter=run.meter, answer_only=summary,
            ))
        except BaseException:
            partial, run.meter.partial = run.meter.partial, ""
            if partial.strip():
                run.add(Message("assistant", partial.rstrip() + "\n[interrupted]"))
            raise

    def _deadline(self, run: _Run) -> float:
        """The run's deadline on the clock HTTP reads and tools compare against (the run's clock may be a fake)."""
        return time.monotonic() + (run.deadline - self._clock())

    def _reject_turn(self, run: _Run, outcome: StepOutcome) -> Steps[None]:
        """Record an unusable turn and tell the model exactly what to fix (or give up after repeated failures)."""
        assert outcome.problem is not None and outcome.correction is not None
        run.add(outcome.reply)
        yield ErrorEvent(outcome.problem, outcome.kind)
        if outcome.kind == "format":
            run.failures += 1
            if run.failures >= self.max_consecutive_failures:
                raise UnusableRepliesError(
                    f"the model gave {run.failures} unusable replies in a row; last problem: {outcome.problem}"
                )
        run.add(Message("user", outcome.correction))

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
            outcome = ToolOutcome(run.corrections.escalated(self.tools.unknown_tool_message(call.name)), True, 0.0)
            run.invalid_calls += 1
        else:
            arguments, problems = tool_.validate(call.arguments)
            call = replace(call, arguments=arguments)
            yield ToolCallEvent(call)
            refusal = self._refused_by_choice(run, call.name)
            skip = bool(problems) or refusal is not None
            verdict = Permission.allow() if skip else (yield from self._permit(run, call, tool_))
            if refusal is not None:
                outcome, status = ToolOutcome(refusal, True, 0.0), "denied"
            elif problems:
                outcome = ToolOutcome(run.corrections.invalid_arguments(tool_, problems), True, 0.0)
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

    def _refused_by_choice(self, run: _Run, name: str) -> str | None:
        """Why tool_choice forbids calling `name`, or None."""
        choice = self.tool_choice
        if choice == "none" or (choice not in TOOL_CHOICES and name not in (choice, "read_output")):
            return run.corrections.refused_by_choice(name, choice)
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
            run.meter.calls += 1
            logger.warning("Compaction failed: %s", error)
            yield ErrorEvent(f"could not compact the conversation: {error}", "compaction")
            return
        if outcome is None:
            return
        run.meter.calls += 1
        if outcome.usage is not None:
            run.meter.usage = run.meter.usage + outcome.usage
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
            turn = (yield from self._model_turn(run, self._messages(run), summary=True)).turn
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

