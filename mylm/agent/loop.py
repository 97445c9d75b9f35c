"""The agent loop: ask the model for a turn (`step`), then take its answer, correct it or run its calls (a
`ToolRunner`), and repeat; every knob is in `AgentConfig`."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.cancel import CancelToken
from ..core.decoding import clean_text
from ..core.errors import (
    CancelledError,
    LLMTimeoutError,
    MylmError,
    NoToolsError,
    RepeatedCallError,
    RunTimeoutError,
    UnusableRepliesError,
)
from ..core.types import (
    ContinueEvent,
    ErrorEvent,
    FinalResponseEvent,
    FinishReason,
    IterationStartEvent,
    Message,
    RunResult,
    StopReason,
)
from ..llm import LLM, Constraint
from ..prompts import PromptLoader
from ..protocol.tags import answer_shown
from ..tools.outputs import OutputCache
from ..tools.registry import ToolRegistry
from .config import AgentConfig, BeforeFinishHook, PermissionHook
from .context import Compactor
from .corrections import ECHOED
from .grounding import announced, named_paths
from .run_state import RunState
from .step import ModelStep, StepOutcome, Steps
from .streams import AgentStream
from .tool_runner import ToolRunner
from .turn import ModelTurn
from .unread import asks_which_file, named_files, names_file, quoted_lines
from .unwritten import change_target, write_target

if TYPE_CHECKING:
    from ..tools.base import Tool
    from .aio import AsyncAgentStream

logger = logging.getLogger("mylm.agent")
# A library's log is the application's to show: without this, Python's last-resort handler would print
# mylm's warnings on stderr in every program that has not configured logging.
logging.getLogger("mylm").addHandler(logging.NullHandler())

__all__ = ["FALLBACK_ANSWER", "Agent", "AgentConfig", "AgentStream", "BeforeFinishHook", "PermissionHook"]

#: The longest a paced timeout (`AgentConfig.pace_timeout`) lets a run last, in seconds.
MAX_PACED_TIMEOUT = 1800.0

#: The answer given when the iteration limit is hit and even the summary call fails (seed 003 §6).
FALLBACK_ANSWER = "I could not finish the task within the allowed number of steps."


class Agent:
    """A ReAct agent over the text protocol; the model and the tools are injected, the knobs are `AgentConfig`'s
    (`config=`, or its fields as keyword arguments)."""

    def __init__(
        self, llm: LLM, tools: Iterable[Tool] = (), config: AgentConfig | None = None, **options: Any
    ) -> None:
        self.config = config = replace(config or AgentConfig(), **options)
        self.max_iterations, self.timeout = config.max_iterations, config.timeout
        self.prompts = config.prompts or PromptLoader.default()
        self.workspace = config.workspace or Path.cwd()
        self.tools = ToolRegistry(tools)
        #: With no tools at all, a call cannot be corrected into something useful: it ends the run.
        self._no_tools = not len(self.tools)
        outputs = OutputCache() if config.output_cache else None
        # read_output is callable but not listed in the system prompt: the observation that cuts an output says
        # exactly how to call it, and every listed tool costs tokens on every call.
        unlisted = [outputs.tool()] if outputs is not None and "read_output" not in self.tools else []
        self.step = ModelStep(llm, list(self.tools), config.step(), prompts=self.prompts, unlisted=unlisted)
        for tool_ in unlisted:
            self.tools.add(tool_)
        self.runner = ToolRunner(self.tools, self.prompts, config, outputs, self.workspace)
        self.estimator = self.step.estimator
        self.compactor = None if config.context_budget is None else Compactor(
            llm, self.prompts, self.estimator, budget=config.context_budget, threshold=config.compaction_threshold,
            keep_recent=config.keep_recent_messages, max_tokens=config.max_tokens,
        )
        # One system prompt for the agent's life: no timestamps or counters, so server prompt caches hit.
        self.system_prompt = self.step.system_prompt(instructions=config.instructions, cwd=str(self.workspace))
        # Every template a run can render, checked now: a broken one is reported before any tool has run.
        compaction = ["compaction.j2", "compacted.j2"] if self.compactor is not None else []
        self.prompts.check([
            *self.runner.templates(), *self.step.templates(), "summary.j2", "repeated_answer.j2", *compaction
        ])

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
        clock = self.config.clock
        now = clock()
        run = RunState(history, token, now + self.timeout, clock, self.step.corrections(), prompt or "", started=now)
        run.corrections.task = prompt or ""
        run.changing = self._before_change(run.corrections.task)
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

    def _loop(self, run: RunState) -> Steps[tuple[str, StopReason]]:
        """Until an answer, a done tool, a call repeated to no effect or the iteration limit: ask, then act."""
        for iteration in range(1, self.max_iterations + 1):
            run.check()
            yield from self._maybe_compact(run)
            run.iteration = iteration
            logger.info("Agentic iteration %d/%d", iteration, self.max_iterations)
            yield IterationStartEvent(iteration, self.max_iterations)
            began = run.clock()
            outcome = yield from self._model_turn(run)
            if self.config.pace_timeout:
                # One more turn for the summary at the limit, and one for each iteration left.
                run.pace(run.clock() - began, self.max_iterations - iteration + 1, floor=self.timeout,
                         cap=MAX_PACED_TIMEOUT)
            parsed = outcome.turn.parsed
            if outcome.usable and not parsed.tool_calls:
                outcome = self._looked(run, outcome)
            if outcome.usable and not parsed.tool_calls:
                outcome = self._written(run, outcome)
            if outcome.usable and not parsed.tool_calls:
                outcome = self._opened(run, outcome)
            if not outcome.usable:
                yield from self._correct(run, outcome)
            elif not parsed.tool_calls:
                run.failures = 0
                run.add(Message("assistant", parsed.thought or parsed.text.strip()))
                if not (yield from self._sent_back(run, parsed.final_answer or "")):
                    return (yield from self._answer(outcome.turn))
            else:
                self._refuse_without_tools(run, outcome.turn)
                acted = yield from self.runner.act(run, parsed)
                if acted.final is not None:
                    yield FinalResponseEvent(acted.final, StopReason.DONE_TOOL)
                    return acted.final, StopReason.DONE_TOOL
                if acted.repeated is not None:
                    # Stuck, but not without something to say: ask for the answer it can give from what it has
                    # (no tools), so the run ends with an answer instead of nothing.
                    in_a_row = run.repeats >= self.config.max_repeated_calls
                    times = run.repeats if in_a_row else run.seen_calls.get(run.last_call or ("", "", "", False), 0)
                    answer = yield from self._summarise(run, "repeated_answer.j2", tool=acted.repeated, times=times)
                    yield FinalResponseEvent(answer, StopReason.REPEATED_CALL)
                    how = "in a row" if in_a_row else "in this run, in a cycle with other calls,"
                    raise RepeatedCallError(f"the model called {acted.repeated} {times} times {how} with the "
                                            "same arguments and got the same result each time", answer=answer)
                # A turn whose every call was invalid is as unusable as an unreadable one: repeated, the run ends.
                run.failures = run.failures + 1 if acted.all_invalid else 0
                if run.failures >= self.config.max_consecutive_failures:
                    raise MylmError(f"the model gave {run.failures} unusable replies in a row; last problem: "
                                    f"{run.corrections.last}")
        logger.warning("Max agentic iterations reached without final response")
        answer = yield from self._summarise(run)
        yield FinalResponseEvent(answer, StopReason.MAX_ITERATIONS)
        return answer, StopReason.MAX_ITERATIONS

    def _model_turn(self, run: RunState, *, summary: bool = False) -> Steps[StepOutcome]:
        """One turn through the step; what the user saw of one cut short stays in the conversation."""
        messages = (Message("system", self.system_prompt), *run.messages)
        due, run.call_due = run.call_due and not summary, False
        try:
            return (yield from self.step.turn(
                messages, deadline=run.monotonic_deadline(), cancel=run.cancel, corrections=run.corrections,
                meter=run.meter, answer_only=summary, call_due=due,
            ))
        except BaseException:
            partial, run.meter.partial = run.meter.partial, ""
            if partial.strip():
                run.add(Message("assistant", partial.rstrip() + "\n[interrupted]"))
            raise

    def _correct(self, run: RunState, outcome: StepOutcome) -> Steps[None]:
        """Record an unusable turn and send its correction (or give up after too many in a row)."""
        assert outcome.problem is not None and outcome.correction is not None
        if outcome.kept and outcome.reply.content:
            run.add(outcome.reply)
        # Only the echo correction is kept to compare with: the others may quote the model's own reply.
        run.corrections.said = outcome.correction if outcome.problem == ECHOED else ""
        yield ErrorEvent(outcome.problem, outcome.kind)
        run.call_due = outcome.kind == "tool_choice"  # an answer where a call is due: the retry can only call
        if outcome.kind == "format":  # a missing call (tool_choice) is corrected without counting as a failure
            run.failures += 1
            if run.failures >= self.config.max_consecutive_failures:
                raise UnusableRepliesError(
                    f"the model gave {run.failures} unusable replies in a row; last problem: {outcome.problem}"
                )
        run.add(Message("user", outcome.correction))

    def _looked(self, run: RunState, outcome: StepOutcome) -> StepOutcome:
        """`outcome` (an answer), or, once in a run that starts a conversation and before any tool has run, the
        turn sent back with the `unlooked` correction where the answer cannot come from anything the model has
        seen: it announced a tool and wrote no call, or the task names a file or directory of the workspace that
        nothing has read."""
        if run.seen_calls or run.corrections.unlooked_sent or self._no_tools or len(run.messages) > len(run.added):
            return outcome  # a tool ran, it was said once, or a conversation before this run may hold the look
        listed = {t.name for t in self.step.listed}
        tool, shown = announced(outcome.turn.parsed.text, listed), ""
        if tool is None:
            for path in named_paths(run.corrections.task, self.workspace):
                tool = "list_dir" if path.is_dir() else "read_file"
                if tool in listed:
                    shown = path.relative_to(self.workspace.resolve()).as_posix()  # "." for the directory itself
                    break
                tool = None
        if tool is None:
            return outcome
        # Shown to the user as it goes back: "without listing the directory", not "without ." (the quick start).
        looked = "the directory" if shown == "." else shown
        problem = (f"answered before any tool ran, without {'listing' if tool == 'list_dir' else 'reading'} {looked}"
                   if shown else f"answered before any tool ran, without calling {tool}")
        return replace(outcome, problem=problem, correction=run.corrections.unlooked(tool, shown), kind="tool_choice",
                       kept=False)

    def _opened(self, run: RunState, outcome: StepOutcome) -> StepOutcome:
        """`outcome` (an answer), or, once a run, the turn sent back with the `unlooked` correction where the task
        asks which file holds something (`unread.asks_which_file`) and the answer names a file of the workspace that
        no call of the run has named: asked which file defines parse_release, the 1.5B listed the project and
        answered release.py, which only imports it, unread. The file system says the file is there."""
        if run.corrections.unlooked_sent or "read_file" not in self.tools or not asks_which_file(run.corrections.task):
            return outcome
        called = "\n".join(f"{name} {arguments}" for name, arguments, _, _ in run.seen_calls)
        results = "\n".join(output for _, _, output, _ in run.seen_calls)
        parsed = outcome.turn.parsed
        root = self.workspace.resolve()
        for name in named_files(parsed.final_answer or parsed.thought):
            target = (root / name).resolve()
            if names_file(called, name) or quoted_lines(results, name) or not target.is_relative_to(root) or (
                    not target.is_file()):
                continue
            shown = target.relative_to(root).as_posix()
            return replace(outcome, problem=f"answered {shown} without opening it", kind="tool_choice", kept=False,
                           correction=run.corrections.unlooked("read_file", shown, others=bool(run.seen_calls)))
        return outcome

    def _written(self, run: RunState, outcome: StepOutcome) -> StepOutcome:
        """`outcome` (an answer), or, once a run, the turn sent back with the `unwritten` correction where the
        task asks for a file of the workspace to be written (`unwritten.write_target`) and the file system shows
        no such file: the 1.5B, asked to write a code name into release.txt, answered the code name. A file that
        was there when the run began must have changed since (`_changed`), whoever changed it."""
        if run.corrections.unwritten_sent or "write_file" not in self.tools:
            return outcome
        path = write_target(run.corrections.task)
        if path is None or run.changing is not None:  # a file that was there: was it changed?
            return self._changed(run, outcome)
        root = self.workspace.resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root) or target.exists():
            return outcome
        shown = target.relative_to(root).as_posix()
        return replace(outcome, problem=f"answered without writing {shown}", kind="tool_choice", kept=False,
                       correction=run.corrections.unwritten("write_file", shown, "path"))

    def _before_change(self, task: str) -> tuple[str, str] | None:
        """The file of the workspace `task` asks to be changed ("In greet.py, change ...", or "Add a line to
        README.md" where README.md is there) and what it holds now, or None (no such task or file, or no tool to
        change it with)."""
        if "write_file" not in self.tools:
            return None
        path = write_target(task) or change_target(task)
        if path is None:
            return None
        root = self.workspace.resolve()
        target = (root / path).resolve()
        digest = _digest(target) if target.is_relative_to(root) else None
        return None if digest is None else (target.relative_to(root).as_posix(), digest)

    def _changed(self, run: RunState, outcome: StepOutcome) -> StepOutcome:
        """`outcome` (an answer), or, once a run, the turn sent back with the `unwritten` correction for a change
        where the file the task asks to be changed holds what it held when the run began: through pydantic-ai the
        1.5B read greet.py and answered its greeting unchanged (the same check as `mylm serve`'s)."""
        if run.changing is None:
            return outcome
        shown, before = run.changing
        if _digest((self.workspace.resolve() / shown).resolve()) != before:
            return outcome
        tool = "edit_file" if "edit_file" in self.tools else "write_file"
        return replace(outcome, problem=f"answered without changing {shown}", kind="tool_choice", kept=False,
                       correction=run.corrections.unwritten(tool, shown, "path", change=True))

    def _answer(self, turn: ModelTurn) -> Steps[tuple[str, StopReason]]:
        """End the run with the turn's answer; one that ran into the token limit is kept, but never passed off
        as complete."""
        logger.info("Final response received (no tool calls)")
        # As the user sees it: no `< observation>` the grammar made of the model's own `<observation>` (the history
        # keeps the reply as written, so the next request still extends this one byte for byte).
        answer = turn.parsed.final_answer or ""
        answer = answer_shown(answer) or answer
        reason = StopReason.MAX_TOKENS if turn.finish is FinishReason.MAX_TOKENS else StopReason.FINAL_ANSWER
        yield FinalResponseEvent(answer, reason)
        return answer, reason

    def _refuse_without_tools(self, run: RunState, turn: ModelTurn) -> None:
        """An agent without any tool cannot correct a call into something useful: the run ends."""
        unknown = {c.name for c in turn.parsed.tool_calls if c.name not in self.tools}
        if self._no_tools and unknown:
            run.add(Message("assistant", turn.parsed.text.strip()))
            raise NoToolsError(
                f"the model called a tool ({', '.join(sorted(unknown))}), but this agent has no tools; give it "
                "tools, or tell it to answer directly"
            )

    def _sent_back(self, run: RunState, answer: str) -> Steps[bool]:
        """Ask the `before_finish` hook about the answer; True when it sent the model back to work."""
        if self.config.before_finish is None:
            return False
        try:
            message = self.config.before_finish(answer, tuple(run.messages))
        except (CancelledError, KeyboardInterrupt):
            raise
        except Exception as error:  # noqa: BLE001 - an application's hook must not lose the answer
            logger.warning("The before_finish hook failed: %r", error)
            yield ErrorEvent(f"the before_finish hook failed: {type(error).__name__}: {error}", "before_finish")
            return False
        if not message or not message.strip():
            return False
        logger.info("before_finish sent the model back to work")
        run.add(Message("user", message))
        yield ContinueEvent(answer, message)
        return True

    # ------------------------------------------------------------------- the run's ends, context, summary

    def _recorded(self, run: RunState) -> Steps[RunResult]:
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
        except RepeatedCallError as error:
            logger.warning("Run stopped: %s", error)
            return self._result(run, error.answer, StopReason.REPEATED_CALL, error)
        except (RunTimeoutError, LLMTimeoutError) as error:
            if isinstance(error, LLMTimeoutError) and run.clock() < run.deadline:
                return (yield from self._fail(run, error))
            allowed = run.deadline - run.started
            logger.warning("Run timed out after %g s", allowed)
            paced = f" (extended to {allowed:.0f} s at this model's pace)" if allowed > self.timeout + 0.5 else ""
            timeout = RunTimeoutError(f"the run took longer than its {self.timeout:g} s timeout{paced}")
            return self._result(run, "", StopReason.TIMEOUT, timeout)
        except MylmError as error:
            return (yield from self._fail(run, error))
        finally:
            loop.close()

    def _fail(self, run: RunState, error: MylmError) -> Steps[RunResult]:
        event = ErrorEvent(str(error), type(error).__name__, fatal=True)
        run.events.append(event)
        yield event
        return self._result(run, "", StopReason.ERROR, error)

    def _result(self, run: RunState, text: str, reason: StopReason, error: MylmError | None) -> RunResult:
        logger.info("Run ended: %s after %d iteration(s)", reason.value, run.iteration)
        return RunResult(
            final_text=text, stop_reason=reason, iterations_used=run.iteration, model_calls=run.meter.calls,
            timed_out=reason is StopReason.TIMEOUT, history_delta=tuple(run.added), events=tuple(run.events),
            usage=run.meter.usage, error=error, history=tuple(run.messages), compacted=run.compacted,
        )

    def _maybe_compact(self, run: RunState) -> Steps[None]:
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

    def _summarise(self, run: RunState, template: str = "summary.j2", **variables: Any) -> Steps[str]:
        """At the iteration limit (or when the model is stuck repeating a call): one last call asking for an
        answer without tools (seed 003 §6); `template` says why."""
        variables.setdefault("max_iterations", self.max_iterations)
        request = Message("user", self.prompts.render(template, **variables))
        run.check()
        # Recorded first (unlike seed 003's temporary list), so whatever the model says next, even cut short,
        # is an answer to a request the history shows.
        run.add(request)
        try:
            turn = (yield from self._model_turn(run, summary=True)).turn
        except (CancelledError, RunTimeoutError, KeyboardInterrupt):
            raise
        except MylmError as error:
            if isinstance(error, LLMTimeoutError) and run.clock() >= run.deadline:
                raise
            logger.warning("Summary call failed: %s", error)
            if run.messages[-1].role != "assistant":
                run.add(Message("assistant", FALLBACK_ANSWER))
            return FALLBACK_ANSWER
        answer = (turn.parsed.final_answer or turn.parsed.thought).strip()
        answer = answer_shown(answer) or answer
        if turn.loop is not None:  # the answer said once, not the loop it fell into (there is no next turn)
            answer = turn.loop.first_copy(answer)
        answer = answer or FALLBACK_ANSWER
        run.add(Message("assistant", answer))
        return answer


#: The largest file whose content is compared for `_changed` (a larger one is compared by its size and time).
_DIGEST_BYTES = 8 << 20


def _digest(path: Path) -> str | None:
    """What `path` holds, as a digest (None: not a regular file, or unreadable)."""
    try:
        info = path.stat()
        if not path.is_file():
            return None
        if info.st_size > _DIGEST_BYTES:
            return f"{info.st_size}:{info.st_mtime_ns}"
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
