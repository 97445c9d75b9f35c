"""One `mylm eval` run: BFCL questions and agent tasks asked in each mode, scored, and summed into one table.

`Session` owns the endpoint in every mode (it starts the in-process `mylm serve` on first use); `ask_question`
scores one BFCL question, `run_agent_task` one task; `summarise` groups the scored items by category and mode,
and `best_mode` picks what `--save` writes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..agent.step import ToolDefinition
from ..core.errors import LLMError
from .bfcl import Question, tool_docs
from .checker import Call, check, is_irrelevance
from .modes import (
    FATAL,
    MODES,
    Limits,
    Reply,
    ServedEndpoint,
    check_native,
    native_reply,
    protocol_mode,
    protocol_reply,
    served,
)

if TYPE_CHECKING:
    from ..llm import LLM
    from ..prompts import PromptLoader
    from ..sandbox import Sandbox
    from .suite import Task

#: What the agent reads for each mode (`--save`): the `constrain` setting. `native` has no agent equivalent.
CONSTRAIN_FOR = {"protocol": "auto", "serve": "auto", "protocol-nogrammar": "off"}


@dataclass(frozen=True)
class Item:
    """One scored question or task run."""

    suite: str
    category: str
    id: str
    mode: str
    passed: bool
    #: A call was written as text and not read as one.
    in_text: bool
    #: BFCL: the number of calls differs from the expected one. Tasks: some call could not run.
    wrong_count: bool
    seconds: float
    reason: str = ""
    error: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "item", **asdict(self)}


class Session:
    """One endpoint asked in any mode; a context manager (the `serve` mode's server stops on leaving)."""

    def __init__(self, llm: LLM, prompts: PromptLoader, limits: Limits, *, model: str | None = None,
                 constrain: str = "auto", sandbox: Sandbox | None = None, tool_dialect: str = "mylm") -> None:
        self.llm = llm
        #: The tool dialect of the `protocol`, `protocol-nogrammar` and `serve` modes (the `protocol-DIALECT`
        #: modes name their own).
        self.tool_dialect = tool_dialect
        self.prompts = prompts
        self.limits = limits
        self.model = model
        #: The grammar setting of the `protocol` and `serve` modes (`auto`, or `grammar` to insist).
        self.constrain = constrain
        self.sandbox = sandbox
        self._stack = ExitStack()
        self._served: ServedEndpoint | None = None
        self._served_llm: LLM | None = None

    def __enter__(self) -> Session:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def unavailable(self, mode: str) -> str | None:
        """Why `mode` cannot run against this endpoint, or None."""
        return check_native(self.llm) if mode == "native" else None

    def served(self) -> ServedEndpoint:
        """The in-process `mylm serve`, started on first use."""
        if self._served is None:
            self._served = self._stack.enter_context(
                served(self.llm, self.prompts, constrain=self.constrain, limits=self.limits, model=self.model,
                       tool_dialect=self.tool_dialect))
        return self._served

    def served_llm(self) -> LLM:
        """An OpenAI-compatible provider pointed at the in-process `mylm serve` (for agent tasks)."""
        if self._served_llm is None:
            from ..providers import Endpoint, create_llm

            served_ = self.served()
            self._served_llm = create_llm(Endpoint(provider="openai", base_url=served_.url + "/v1",
                                                   model=served_.model, max_tokens=self.limits.max_tokens))
        return self._served_llm

    def reply(self, mode: str, tools: Sequence[ToolDefinition], conversation: Sequence[Mapping[str, Any]]) -> Reply:
        """Ask one question in `mode`; an endpoint error that is not fatal to the run becomes the reply's error."""
        started = time.perf_counter()
        try:
            protocol = protocol_mode(mode, self.tool_dialect)
            if protocol is not None:
                grammar, dialect = protocol
                return protocol_reply(self.llm, self.prompts, tools, conversation,
                                      constrain=self.constrain if grammar else "off", limits=self.limits,
                                      dialect=dialect)
            if mode == "native":
                return native_reply(self.llm, tools, conversation, limits=self.limits)
            if mode == "serve":
                return self.served().reply(tools, conversation, limits=self.limits)
        except FATAL:
            raise
        except LLMError as error:
            return Reply((), "", False, time.perf_counter() - started, str(error))
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")


def ask_question(session: Session, question: Question, mode: str) -> Item:
    """Ask one BFCL question in `mode` and score the calls like BFCL's AST checker."""
    wire = mode in ("native", "serve")  # an OpenAI-shaped API takes no dots in names, as BFCL's handlers know
    docs, names = tool_docs(question, wire=wire)
    tools = [ToolDefinition(d["name"], d["description"], d["parameters"]) for d in docs]
    reply = session.reply(mode, tools, question.messages)
    calls = [Call(names.get(c.name, c.name), dict(c.arguments)) for c in reply.calls]
    verdict = check(question.category, question.functions, calls, question.answers)
    expected = 0 if is_irrelevance(question.category) else len(question.answers or ())
    return Item(
        suite="bfcl", category=question.category, id=question.id, mode=mode,
        passed=verdict.valid and reply.error is None, in_text=reply.in_text,
        wrong_count=reply.error is None and len(calls) != expected, seconds=reply.seconds,
        reason=verdict.reason if reply.error is None else "", error=reply.error,
        detail={"calls": [{"name": c.name, "arguments": dict(c.arguments)} for c in calls],
                "expected_calls": expected, "text": reply.text[:2000], "kind": verdict.kind,
                "refused": [{"name": c.name, "arguments": dict(c.arguments)} for c in reply.refused],
                "replies": list(reply.replies), "probes": list(reply.probes)},
    )


def run_agent_task(session: Session, task: Task, mode: str, *, max_iterations: int, repeat: int = 1) -> Item:
    """Run one agent task in `mode` (a fresh workspace, the builtin tools) and score it."""
    from .runner import run_task, run_task_native

    limits = session.limits
    common: dict[str, Any] = {"max_iterations": max_iterations, "timeout": limits.timeout,
                              "max_tokens": limits.max_tokens, "repeat": repeat, "sandbox": session.sandbox}
    if mode == "native":
        result = run_task_native(session.llm, task, **common)
    elif mode == "serve":
        result = run_task_native(session.served_llm(), task, mode="serve", **common)
    else:
        grammar, dialect = protocol_mode(mode, session.tool_dialect) or (mode == "protocol", session.tool_dialect)
        result = run_task(session.llm, task, constrain=session.constrain if grammar else "off",  # type: ignore[arg-type]
                          prompts=session.prompts, mode=mode, tool_dialect=dialect, **common)
    # The endpoint failing or the run's time running out is an error; the agent ending a run (a repeated call,
    # unusable replies) is the model failing the task, with that reason.
    failed_to_run = result.error is not None and result.stop_reason in ("error", "timeout")
    return Item(
        suite="tasks", category="tasks", id=task.name if repeat == 1 else f"{task.name}#{repeat}", mode=mode,
        passed=result.solved, in_text=result.in_text, wrong_count=result.bad_calls > 0, seconds=result.seconds,
        reason="" if failed_to_run else result.reason, error=result.error if failed_to_run else None,
        detail={"answer": result.answer[:2000], "stop_reason": result.stop_reason, "turns": result.turns,
                "bad_calls": result.bad_calls, "completion_tokens": result.completion_tokens,
                "tokens_estimated": result.tokens_estimated,
                # every reply as written, and the conversation (protocol modes): `--output` keeps them to read
                "replies": [t.get("text", "") for t in result.turn_log], "history": list(result.history)},
    )


@dataclass(frozen=True)
class Row:
    """One line of the table: a category asked in a mode (`category` "all" for the mode's total)."""

    category: str
    mode: str
    items: int
    passed: int
    in_text: int
    wrong_count: int
    errors: int
    median_seconds: float

    @property
    def accuracy(self) -> float:
        return self.passed / self.items if self.items else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "row", **asdict(self), "accuracy": round(self.accuracy, 4)}


def summarise(items: Iterable[Item]) -> list[Row]:
    """A row per category and mode (in the order first seen), then a total per mode when there are several
    categories."""
    groups: dict[tuple[str, str], list[Item]] = {}
    for item in items:
        groups.setdefault((item.category, item.mode), []).append(item)
    rows = [_row(category, mode, group) for (category, mode), group in groups.items()]
    if len({category for category, _ in groups}) > 1:
        modes = list(dict.fromkeys(mode for _, mode in groups))
        rows += [_row("all", mode, [i for (_, m), g in groups.items() if m == mode for i in g]) for mode in modes]
    return rows


def _row(category: str, mode: str, group: Sequence[Item]) -> Row:
    return Row(category, mode, len(group), sum(i.passed for i in group), sum(i.in_text for i in group),
               sum(i.wrong_count for i in group), sum(i.error is not None for i in group),
               statistics.median(i.seconds for i in group) if group else 0.0)


def best_mode(rows: Sequence[Row]) -> tuple[str, Row] | None:
    """The mode to save: the best total accuracy among the modes the agent can run (`CONSTRAIN_FOR`); on a
    tie the default `protocol` first, then the faster one. None when no such mode ran."""
    totals = {r.mode: r for r in rows if r.category == "all"} or {r.mode: r for r in rows}
    ranked = [r for mode, r in totals.items() if mode in CONSTRAIN_FOR]
    if not ranked:
        return None
    best = max(ranked, key=lambda r: (r.accuracy, r.mode == "protocol", -r.median_seconds))
    return best.mode, best


def table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table."""
    head = ("category", "mode", "accuracy", "passed", "in text", "wrong #", "errors", "median s")
    body = [(r.category, r.mode, f"{r.accuracy:.2f}", f"{r.passed}/{r.items}", str(r.in_text), str(r.wrong_count),
             str(r.errors), f"{r.median_seconds:.1f}") for r in rows]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]
    lines = []
    for n, line in enumerate((head, *body)):
        if n == 1 + len([r for r in rows if r.category != "all"]) and any(r.category == "all" for r in rows):
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(line, widths))).rstrip())
    return "\n".join(lines)
