"""Running a turn's tool calls: act (each call in order), permit (the permission hook), run (bounded), observe
(what the model reads back) and report (the events), with the guard against a call repeated to no effect."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ..constrain.select import TOOL_CHOICES
from ..core.cancel import hook_deadline
from ..core.decoding import clean_text
from ..core.errors import CancelledError
from ..core.jsontext import sorted_json
from ..core.types import (
    ApprovalEvent,
    ErrorEvent,
    Message,
    Permission,
    StepCompleteEvent,
    StepStartEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
)
from ..prompts import PromptLoader
from ..protocol.defuse import neutralise
from ..protocol.dialects import format_call
from ..protocol.parsed import ParsedTurn
from ..tools.base import Tool, ToolContext, ToolOutcome
from ..tools.bounded import run_bounded
from ..tools.outputs import OutputCache, cut_middle
from ..tools.registry import ToolRegistry
from .config import AgentConfig
from .run_state import RunState
from .step import Steps

logger = logging.getLogger("mylm.agent")

Status = Literal["completed", "error", "denied", "interrupted"]
#: What the model is told about a tool the user interrupted.
TOOL_INTERRUPTED = "interrupted by the user before it finished; it may have done part of its work"


@dataclass(frozen=True)
class Acted:
    """What a turn's calls came to."""

    #: A done tool's final message: the run ends with it as the answer.
    final: str | None = None
    #: Every call was invalid (an unknown tool, bad arguments): as unusable as an unreadable turn.
    all_invalid: bool = False
    #: The tool the model kept calling with the same arguments, to the same result: the run ends.
    repeated: str | None = None


class ToolRunner:
    """Runs the calls the model makes, one at a time, and tells it what came of each."""

    def __init__(
        self, tools: ToolRegistry, prompts: PromptLoader, config: AgentConfig, outputs: OutputCache | None,
        workspace: Path,
    ) -> None:
        self.tools, self.prompts, self.config, self.outputs, self.workspace = tools, prompts, config, outputs, workspace

    def templates(self) -> list[str]:
        """The templates the runner renders (the corrections' are the step's)."""
        return ["observation.j2", "tool_error.j2", "denied.j2", "unrun_block.j2"]

    def act(self, run: RunState, parsed: ParsedTurn) -> Steps[Acted]:
        """Run the turn's calls in order; the call and every observation made go into the conversation."""
        calls = parsed.tool_calls if self.config.multiple_calls else parsed.tool_calls[:1]
        calls = tuple(replace(c, id=f"call_{run.iteration}_{i}") for i, c in enumerate(calls, 1))
        # History records the canonical form (in the conversation's tool dialect), so the next prompt is an exact
        # extension of this one.
        canonical = "\n".join(format_call(c, run.corrections.dialect) for c in calls)
        run.add(Message("assistant", f"{parsed.thought}\n{canonical}" if parsed.thought else canonical))
        logger.info("Executing %d tool call(s)", len(calls))
        observations: list[str] = []
        invalid = 0
        run.corrections.said = ""  # a new turn acted on: the corrections an answer may not echo start afresh
        try:
            for call in calls:
                outcome, valid = yield from self._call(run, call, observations)
                invalid += not valid
                if outcome.final_message is not None:
                    return Acted(final=outcome.final_message)
                if self._stuck(run):
                    return Acted(repeated=call.name)
                run.cancel.raise_if_cancelled()  # after recording: what the tool did is not lost
            for warning in parsed.warnings:
                # A block that could not be run next to ones that did: the model must still hear of it.
                yield ErrorEvent(warning, "format")
                observations.append(self.prompts.render("unrun_block.j2", message=neutralise(warning)))
        finally:
            # Even when cancelled part-way, the observations already made stay in the conversation.
            if observations:
                run.add(Message("user", "\n".join(observations)))
        return Acted(all_invalid=invalid == len(calls) > 0)

    def _call(self, run: RunState, call: ToolCall, observations: list[str]) -> Steps[tuple[ToolOutcome, bool]]:
        """Validate one call, ask the permission hook, run it; its observation goes to `observations`. Returns
        the outcome and whether the call was valid (a known tool, arguments that fit its schema)."""
        yield StepStartEvent(call.id, run.iteration, call.name)
        tool_ = self.tools.get(call.name)
        status: Status = "error"
        valid = ran = False
        correction: str | None = None  # the observation of a call that cannot run, with its block to copy
        if tool_ is None:
            yield ToolCallEvent(call)
            names = [t.name for t in self.tools]
            outcome = ToolOutcome(run.corrections.unknown_tool(call.name, names), True, 0.0)
            correction = self._correction(run, call.name, outcome.output)
        else:
            arguments, problems = tool_.validate(call.arguments)
            call = replace(call, arguments=arguments)
            yield ToolCallEvent(call)
            refusal = self._refused_by_choice(run, call.name)
            valid = not problems
            if refusal is not None:
                outcome, status = ToolOutcome(refusal, True, 0.0), "denied"
            elif problems:
                message = run.corrections.invalid_arguments(tool_, problems, call.arguments)
                outcome = ToolOutcome(message, True, 0.0)
                correction = self._correction(run, call.name, message)
            else:
                verdict = yield from self._permit(run, call, tool_)
                yield ApprovalEvent(call.id, verdict.allowed, verdict.grant if verdict.allowed else None, verdict.reason)
                if not verdict.allowed:
                    outcome, status = ToolOutcome(verdict.reason or "the user refused it", True, 0.0), "denied"
                else:
                    outcome = yield from self._run(run, call, tool_, verdict, observations)
                    status, ran = ("error" if outcome.is_error else "completed"), True
        output, replaced = clean_text(outcome.output)
        if replaced:
            logger.warning("%s returned text that is not valid UTF-8; replaced it with U+FFFD", call.name)
            outcome = replace(outcome, output=output)
        # A refused call counts like one that ran: repeated with the same refusal, it is the same doom loop (a tiny
        # model re-sending a command no one can approve). An invalid one is a new mistake each time.
        repeated = self._repeated(run, call, outcome) if ran or status == "denied" else self._forget(run)
        observation = (run.corrections.repeated_call(call.name, outcome.output, previous=run.repeats > 1)
                       if repeated else correction)
        if status == "denied" and observation is None:
            # mylm's words, not a tool's result: a reply that only copies the refusal is no answer. The quick
            # start's 1.5B, its `remember` refused (no terminal to ask), answered with that message word for word.
            observation = run.corrections.told(self._observe(call.name, outcome, status))
        yield from self._report(call, outcome, status, observations, observation)
        return outcome, valid

    def _correction(self, run: RunState, name: str, message: str) -> str:
        """The observation for a call that cannot run: the message defused like any tool output, and the block
        to copy, if the correction has one, as written."""
        example = run.corrections.take_example()
        return self.prompts.render("tool_error.j2", tool=name, message=neutralise(message), example=example)

    def _refused_by_choice(self, run: RunState, name: str) -> str | None:
        """Why tool_choice forbids calling `name`, or None."""
        choice = self.config.tool_choice
        if choice == "none" or (choice not in TOOL_CHOICES and name not in (choice, "read_output")):
            return run.corrections.refused_by_choice(name, choice)
        return None

    def _permit(self, run: RunState, call: ToolCall, tool_: Tool) -> Steps[Permission]:
        """Ask the permission hook; a hook that fails refuses the call (fail closed) instead of ending the run."""
        if self.config.permission is None:
            return Permission.allow()
        # The hook's own checks (the policy asks git about the repository) stop at the run's deadline.
        token = hook_deadline.set(run.monotonic_deadline())
        try:
            return self.config.permission(call, tool_)
        except (CancelledError, KeyboardInterrupt):
            raise
        except Exception as error:  # noqa: BLE001 - an application's hook must not crash the loop
            failure = error
        finally:
            hook_deadline.reset(token)
        logger.warning("The permission hook failed on %s: %r", call.name, failure)
        yield ErrorEvent(f"the permission hook failed: {type(failure).__name__}: {failure}", "permission")
        return Permission.deny(f"the approval check failed ({type(failure).__name__}), so it was not run")

    def _run(
        self, run: RunState, call: ToolCall, tool_: Tool, verdict: Permission, observations: list[str]
    ) -> Steps[ToolOutcome]:
        """Run an allowed call in a thread the run can abandon: an overrunning tool must not hold the run past
        its deadline."""
        run.check()
        context = ToolContext(
            deadline=run.monotonic_deadline(), cancel=run.cancel, workspace=self.workspace, grant=verdict.grant,
        )
        started = time.monotonic()
        try:
            return run_bounded(tool_, call.arguments, context)
        except (CancelledError, KeyboardInterrupt):
            # Record that it was cut short, so the model (and a resumed chat) knows, then stop.
            interrupted = ToolOutcome(TOOL_INTERRUPTED, True, time.monotonic() - started)
            yield from self._report(call, interrupted, "interrupted", observations)
            raise

    def _report(
        self, call: ToolCall, outcome: ToolOutcome, status: Status, observations: list[str],
        observation: str | None = None,
    ) -> Steps[None]:
        """Tell the application (events) and the model (an observation, by default of the outcome) how a call
        ended."""
        yield ToolResultEvent(call.id, call.name, outcome.output, outcome.is_error, outcome.duration)
        yield StepCompleteEvent(call.id, status)
        observations.append(observation or self._observe(call.name, outcome, status))

    def _observe(self, name: str, outcome: ToolOutcome, status: Status) -> str:
        """The observation the model reads for a call."""
        # Neutralised here, not only by the template's filter: a customised template that drops the filter
        # still cannot let tool output close the observation or open a call.
        if status == "denied":
            return self.prompts.render("denied.j2", tool=name, reason=neutralise(outcome.output))
        if outcome.is_error:
            return self.prompts.render("tool_error.j2", tool=name, message=neutralise(outcome.output))
        output = outcome.output.rstrip("\n")
        if self.outputs is not None:
            excerpt = self.outputs.excerpt(output, self.config.max_observation_chars)
            text, cut, handle = excerpt.text, excerpt.cut, excerpt.handle
        else:
            (text, cut), handle = cut_middle(output, self.config.max_observation_chars), None
        return self.prompts.render("observation.j2", tool=name, output=neutralise(text), cut=cut, handle=handle)

    def _repeated(self, run: RunState, call: ToolCall, outcome: ToolOutcome) -> bool:
        """Count a call that ran; True when the run already made it, arguments and result alike (the call
        before it, or any earlier one)."""
        arguments = sorted_json(call.arguments)
        key = (call.name, arguments, outcome.output, outcome.is_error)
        run.repeats = run.repeats + 1 if key == run.last_call else 1
        run.last_call = key
        run.seen_calls[key] = run.seen_calls.get(key, 0) + 1
        return self.config.max_repeated_calls > 0 and run.seen_calls[key] > 1

    def _stuck(self, run: RunState) -> bool:
        """Whether the model is stuck: the last call gave the same result `max_repeated_calls` times in a row, or
        twice that many times in the run (in a cycle with other calls, which a capable model fixing code may
        make a few times on purpose: run the tests, edit, run them again)."""
        limit = self.config.max_repeated_calls
        return bool(limit) and run.last_call is not None and (
            run.repeats >= limit or run.seen_calls.get(run.last_call, 0) >= 2 * limit
        )

    def _forget(self, run: RunState) -> bool:
        """A call that did not run breaks a run of repeats."""
        run.last_call, run.repeats = None, 0
        return False
