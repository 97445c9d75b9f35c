"""Run one agent task in a fresh workspace, with mylm's agent or the endpoint's own tool calling; score it turn by
turn: protocol validity, tools, tokens, time."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import RepeatedCallError
from ..core.types import ErrorEvent, RunResult, StopReason, ToolResultEvent
from ..llm import LLM, ConstrainMode, FinishChunk
from .recording import RecordingLLM
from .suite import Task

if TYPE_CHECKING:
    from ..approval import Approver
    from ..prompts import PromptLoader
    from ..sandbox import Sandbox
    from ..tools.base import Tool

#: Where a server does not report token counts, output tokens are estimated at this many characters each.
CHARS_PER_TOKEN = 4.0


def judge_turn(text: str, finish: FinishChunk | None, tools: Mapping[str, Tool]) -> tuple[bool, int]:
    """Whether a turn keeps the protocol (every call names a tool and its arguments pass the tool's schema,
    or there is a non-empty answer, and the output was not cut by the token limit), and its call count."""
    from ..protocol.parser import parse_completion

    parsed = parse_completion(text)
    if finish is not None and finish.reason in ("length", "max_tokens", "limit"):
        return False, len(parsed.tool_calls)
    if parsed.error is not None:
        return False, len(parsed.tool_calls)
    if parsed.tool_calls:
        for call in parsed.tool_calls:
            tool_ = tools.get(call.name)
            if tool_ is None or tool_.validate(call.arguments)[1]:
                return False, len(parsed.tool_calls)
        return True, len(parsed.tool_calls)
    return bool((parsed.final_answer or "").strip()), 0


@dataclass(frozen=True)
class TaskResult:
    """A scored run of one task."""

    task: str
    repeat: int
    constrain: str
    solved: bool
    stop_reason: str
    turns: int
    valid_turns: int
    called_tool: bool
    format_errors: int
    prompt_tokens: int
    completion_tokens: int
    #: True when the server sent no token counts and `completion_tokens` is estimated from the text.
    tokens_estimated: bool
    generation_seconds: float
    seconds: float
    answer: str
    error: str | None = None
    turn_log: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    #: The conversation after the system prompt, as the model saw it (role and content): what to read when a
    #: task fails ("look at the model's exact text").
    history: tuple[dict[str, str], ...] = field(default=(), repr=False)
    #: The mode it ran in (`protocol`, `protocol-nogrammar`, `native`, `serve`; see `modes.py`).
    mode: str = "protocol"
    #: Why the checks failed ("" when solved).
    reason: str = ""
    #: The answer holds calls written as text that nothing ran.
    in_text: bool = False
    #: Calls that could not run: malformed, an unknown tool, arguments that do not fit, refused.
    bad_calls: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.generation_seconds if self.generation_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tokens_per_second"] = round(self.tokens_per_second, 2)
        data["turn_log"] = list(self.turn_log)
        data["history"] = list(self.history)
        return data


@contextmanager
def workspace_for(task: Task, sandbox: Sandbox | None = None) -> Iterator[tuple[Path, list[Tool], Approver, Any]]:
    """A fresh temporary workspace holding the task's files, the builtin tools it may use confined to it, the
    permission hook (`--yes` inside the workspace: the approval policy's deny rules and the sandbox still
    hold), and the runner of its check command (in the same sandbox, as any approved command)."""
    from ..approval import ApprovalPolicy, Approver
    from ..sandbox import detect
    from ..tools import builtin_tools

    confinement = sandbox if sandbox is not None else detect()
    with tempfile.TemporaryDirectory(prefix="mylm-eval-") as tmp:
        root = Path(tmp).resolve()
        for rel, content in task.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        tools = [t for t in builtin_tools(workspace=root, memory=False, sandbox=confinement) if t.name in task.tools]
        permit = Approver(ApprovalPolicy(workspace=root, yes=True, command_sandbox=confinement.confines))
        yield root, tools, permit, partial(check_command, confinement)


def check_command(sandbox: Sandbox, command: str, workspace: Path, timeout: float = 60.0) -> int:
    """Run a task's check command in `workspace`, confined as an approved command is; its exit status (-1 when
    it timed out or was stopped)."""
    from ..tools.environment import child_environment
    from ..tools.shell import run_command

    env = child_environment()
    with sandbox.launch("workspace-write", workspace, env) as launch:
        result = run_command(command, cwd=workspace, timeout=timeout, env=env, launch=launch)
    return -1 if result.stopped or result.exit_code is None else result.exit_code


def run_task(
    llm: LLM,
    task: Task,
    *,
    constrain: ConstrainMode = "auto",
    max_iterations: int = 4,
    timeout: float = 300.0,
    max_tokens: int = 512,
    prompts: PromptLoader | None = None,
    repeat: int = 1,
    sandbox: Sandbox | None = None,
    mode: str | None = None,
    tool_dialect: str = "mylm",
) -> TaskResult:
    """Run `task` once in a fresh temporary workspace with mylm's agent (speaking `tool_dialect`), and score it."""
    from ..agent.loop import Agent
    from .modes import calls_in_text

    started = time.perf_counter()
    recorder = RecordingLLM(llm)
    with workspace_for(task, sandbox) as (root, tools, permit, run_check):
        agent = Agent(
            recorder, tools, max_iterations=max_iterations, timeout=timeout, prompts=prompts,
            max_tokens=max_tokens, constrain=constrain, workspace=root, permission=permit, tool_dialect=tool_dialect,
        )
        result = agent.run(task.prompt)
        reason = _scored(result, lambda answer: task.check(answer, root, run_check))
    callable_tools = {t.name: t for t in agent.tools}
    judged = [judge_turn(t.text, t.finish, callable_tools) for t in recorder.turns]
    prompt_tokens = sum(t.finish.usage.prompt_tokens for t in recorder.turns if t.finish and t.finish.usage)
    counted = [t.finish.usage.completion_tokens for t in recorder.turns if t.finish and t.finish.usage]
    estimated = not any(counted)
    completion = sum(counted) if not estimated else sum(
        math.ceil(len(t.text) / CHARS_PER_TOKEN) for t in recorder.turns
    )
    bad = sum(1 for e in result.events if isinstance(e, ErrorEvent) and e.kind in ("format", "call"))
    bad += sum(1 for e in result.events if isinstance(e, ToolResultEvent) and e.is_error)
    return TaskResult(
        task=task.name,
        repeat=repeat,
        constrain=constrain,
        solved=reason is None,
        stop_reason=result.stop_reason.value if isinstance(result.stop_reason, StopReason) else str(
            result.stop_reason),
        turns=len(recorder.turns),
        valid_turns=sum(1 for valid, _ in judged if valid),
        called_tool=any(isinstance(e, ToolResultEvent) for e in result.events),
        format_errors=sum(1 for e in result.events if isinstance(e, ErrorEvent) and e.kind == "format"),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion,
        tokens_estimated=estimated,
        generation_seconds=sum(t.seconds for t in recorder.turns),
        seconds=time.perf_counter() - started,
        answer=result.final_text,
        error=str(result.error) if result.error is not None else None,
        turn_log=tuple(
            {"text": t.text, "finish": t.finish.reason if t.finish else None, "valid": valid, "calls": calls}
            for t, (valid, calls) in zip(recorder.turns, judged, strict=True)
        ),
        history=tuple({"role": m.role, "content": m.content} for m in result.history if m.role != "system"),
        mode=mode or ("protocol-nogrammar" if constrain == "off" else "protocol"),
        reason=reason or "",
        in_text=calls_in_text(result.final_text, set(callable_tools)),
        bad_calls=bad,
    )


def _scored(result: RunResult, check: Callable[[str], str | None]) -> str | None:
    """Why a run failed its task (None: it passed). A run stuck on one call was asked for its answer without tools,
    as one at the iteration limit is, and is scored by that answer (the user sees it); what stopped it is kept in
    the reason when the answer is wrong too."""
    if result.error is not None and not isinstance(result.error, RepeatedCallError):
        return str(result.error)
    reason = check(result.final_text)
    if reason is not None and result.error is not None:
        return f"{result.error}; {reason}"
    return reason


def run_task_native(
    llm: LLM,
    task: Task,
    *,
    max_iterations: int = 4,
    timeout: float = 300.0,
    max_tokens: int = 512,
    repeat: int = 1,
    sandbox: Sandbox | None = None,
    mode: str = "native",
) -> TaskResult:
    """Run `task` once in a fresh temporary workspace with the endpoint's own tool calling
    (`native_agent.run_native`), and score it like `run_task`."""
    from .native_agent import run_native

    started = time.perf_counter()
    with workspace_for(task, sandbox) as (root, tools, permit, run_check):
        run = run_native(llm, tools, task.prompt, root, permit=permit, max_iterations=max_iterations,
                         timeout=timeout, max_tokens=max_tokens)
        reason = task.check(run.answer, root, run_check) if run.error is None else run.error
    estimated = run.completion_tokens == 0
    completion = run.completion_tokens or sum(
        math.ceil(len(t["text"]) / CHARS_PER_TOKEN) for t in run.log)
    return TaskResult(
        task=task.name, repeat=repeat, constrain="native", solved=reason is None, stop_reason=run.stop_reason,
        turns=run.turns, valid_turns=run.turns, called_tool=run.tool_results > 0, format_errors=0,
        prompt_tokens=run.prompt_tokens, completion_tokens=completion, tokens_estimated=estimated,
        generation_seconds=run.generation_seconds, seconds=time.perf_counter() - started, answer=run.answer,
        error=run.error, turn_log=tuple(run.log), mode=mode, reason=reason or "", in_text=run.in_text > 0,
        bad_calls=run.bad_calls,
    )


@dataclass(frozen=True)
class Totals:
    """The scorecard's bottom line over several task runs."""

    runs: int
    solved: int
    turns: int
    valid_turns: int
    runs_with_tool: int
    format_errors: int
    prompt_tokens: int
    completion_tokens: int
    tokens_estimated: bool
    generation_seconds: float
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.generation_seconds if self.generation_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tokens_per_second"] = round(self.tokens_per_second, 2)
        return data


def totals(results: Sequence[TaskResult]) -> Totals:
    """Sum the results."""
    return Totals(
        runs=len(results),
        solved=sum(r.solved for r in results),
        turns=sum(r.turns for r in results),
        valid_turns=sum(r.valid_turns for r in results),
        runs_with_tool=sum(r.called_tool for r in results),
        format_errors=sum(r.format_errors for r in results),
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        tokens_estimated=any(r.tokens_estimated for r in results),
        generation_seconds=sum(r.generation_seconds for r in results),
        seconds=sum(r.seconds for r in results),
    )
