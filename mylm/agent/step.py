"""One model turn on its own: render the request, stream it, parse it with the tools' names, and decide whether
the turn is usable and, if not, which correction to send. No tool runs here: the agent's loop runs the calls a
step returns, and `mylm serve` returns them to its client.

Use it with any tool descriptions (anything with `name`, `description` and `parameters`, e.g. `ToolDefinition`)::

    import time
    from mylm import Message
    from mylm.agent.step import ModelStep, StepConfig, ToolDefinition, drain
    from mylm.testing import ScriptedLLM

    weather = ToolDefinition("get_weather", "The weather in a city.",
                             {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    llm = ScriptedLLM(["", '<tool_code>\\n<name>get_weather</name>\\n<parameters>\\n{"city": "Oslo"}\\n'
                           '</parameters>\\n</tool_code>'])
    step = ModelStep(llm, [weather], StepConfig(max_tokens=512))
    messages = [Message("system", step.system_prompt(instructions="Be brief.")),
                Message("user", "What is the weather in Oslo?")]
    corrections = step.corrections()  # one per conversation: a repeated mistake gets a more concrete one
    for attempt in range(3):
        events, outcome = drain(step.turn(messages, deadline=time.monotonic() + 60, corrections=corrections))
        if outcome.usable:
            break
        messages += [*([outcome.reply] if outcome.reply.content else []), Message("user", outcome.correction or "")]
    assert outcome.turn.parsed.tool_calls[0].arguments == {"city": "Oslo"}

`turn` is a generator: it yields the events of the turn as they happen (text, reasoning, usage, a retry) and
returns a `StepOutcome`. A step keeps what it learns about its endpoint (whether the chat template opens
`<think>`; that stop strings cut the model's reasoning, so none are sent any more) for every later turn.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from ..constrain.select import TOOL_CHOICES, ConstrainMode, select_constraints, thought_cap
from ..core.cancel import CancelToken
from ..core.decoding import clean_text
from ..core.errors import HTTPStatusError
from ..core.types import ErrorEvent, Event, FinishReason, Message, ModelCallEvent, ToolCall, Usage, UsageEvent
from ..llm import LLM, Constraint, LLMRequest, Sampling, TextChunk, alternating
from ..prompts import PromptLoader, prompt_schema, tool_view
from ..protocol import dialects
from ..protocol.defuse import defuse_special_tokens, neutralise
from ..protocol.examples import example_arguments, example_tool
from ..protocol.repetition import LONG_UNIT
from ..protocol.tags import FINAL_OPEN, with_markers
from ..tools.validation import validate
from .context import TokenEstimator
from .corrections import ECHOED, TEMPLATES, Corrections
from .fit import (
    FIT_TEMPLATES,
    FIT_TOKENS,
    count_constraint,
    count_messages,
    fit_constraint,
    fit_messages,
    says_no,
    says_one,
)
from .grounding import code_call, grounded, heard, made_up, mostly_mentioned, placeholder_host
from .turn import ModelTurn, cut_mid_thought, stream_turn
from .unread import reads_named_file
from .unwritten import ahead_of_results

logger = logging.getLogger("mylm.agent")

#: The end of a call in every dialect: a stop string that a draft call inside `<think>` could end the turn at.
_CALL_ENDS = frozenset(close for _, close in dialects.CALL_TAGS.values())

#: The question the fit check restates is cut to this many characters.
_QUESTION_CHARS = 600
#: Working cut at the cap is corrected naming the first of this many listed tools the model says does the task.
_FITTING_TRIED = 3
#: Answers to questions asked apart kept per step (`ModelStep.probed`); past this, forgotten all at once.
_PROBES_KEPT = 512

T = TypeVar("T")
#: A step of the loop: yields events as they happen, returns its outcome.
Steps = Generator[Event, None, T]
#: `auto`, `none`, `required`, or the name of the one tool the model must call.
ToolChoice = str


class ToolSchema(Protocol):
    """What a step needs of a tool: a mylm `Tool` has it, and so has a `ToolDefinition` built from JSON."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the model sees it, without a function to run (a server's client runs it)."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class StepConfig:
    """How a model turn is asked for."""

    #: The output token limit of every completion.
    max_tokens: int = 4096
    #: Whether one turn may call several tools (they run in order); otherwise only the first call counts.
    multiple_calls: bool = False
    #: `auto`: sample under the protocol grammar where the endpoint can; `grammar`: insist; `off`: never.
    constrain: ConstrainMode = "off"
    #: `auto`: call or answer; `none`: no tools; `required`: every turn calls one; a tool's name: that tool.
    tool_choice: ToolChoice = "auto"
    #: Send stop strings (the end of a call, an observation) where the endpoint accepts them.
    stop_strings: bool = True
    #: More reasoning dialects as `(open, close)` pairs, beyond `protocol.tags.REASONING_DIALECTS`.
    reasoning_markers: tuple[tuple[str, str], ...] = ()
    #: The form of call the prompt teaches and the grammar allows (`protocol.dialects`): `mylm` (`<tool_code>`),
    #: `hermes` (`<tool_call>{"name", "arguments"}`, Qwen2.5's own), or `auto`: the model registry's dialect for
    #: the endpoint's model where it knows one, else `mylm`. The parser reads both whatever this says.
    tool_dialect: str = "mylm"
    #: Sampling settings sent with every completion of the step (corrections and retries too), over the
    #: endpoint's configured `options` (a server's client asks for them per request).
    sampling: Sampling = field(default_factory=Sampling)


@dataclass
class Meter:
    """What a caller's completions cost, and what the user saw of one cut short; the caller owns it."""

    usage: Usage = field(default_factory=Usage)
    #: Completions requested, a stopless retry included.
    calls: int = 0
    #: The visible text of the completion that was interrupted last (an exception left the step), else "".
    partial: str = ""


def said_once(turn: ModelTurn, looped: str = "") -> ModelTurn | None:
    """An answer that fell into saying one paragraph again and again, as the answer said once (its first copy,
    ended at a sentence), or None. Corrected instead, the model writes the same loop again (Qwen2.5-Coder-1.5B at
    temperature 0 did, three times, and the run ended with an error); a short unit (`2000000...`) or a call is
    not an answer to keep. So is an answer written whole before a line began to repeat, once the same loop comes
    again after its correction (`looped`: the loop corrected last): through the Agents SDK the 1.5B reported its
    edit, closed the file's code block, then wrote ```` ```python ```` line after line, and was corrected into the
    same loop three times (the answer is kept up to the loop's first line, an opened code block with nothing in it
    left out). The first such loop is corrected: the prose before it may be a plan, not an answer."""
    loop, parsed = turn.loop, turn.parsed
    if loop is None or parsed.tool_calls:
        return None
    text = parsed.final_answer or parsed.thought or ""
    if loop.inline:
        if loop.period < LONG_UNIT:
            return None
        said = loop.first_copy(text).strip()
    else:
        if looped != turn.degenerate:
            return None
        before = loop.before(text)
        # A line or two of plan before the loop is not an answer: that reply is corrected as before.
        if len(before.strip()) < LONG_UNIT or not any(c.isalpha() for c in before):
            return None
        said = _without_empty_fence(loop.first_copy(text)).strip()
    if not said:
        return None
    return replace(turn, parsed=replace(parsed, final_answer=said, thought=said, text=said),
                   finish=FinishReason.END_TURN, degenerate="")


def _without_empty_fence(text: str) -> str:
    """`text` without a Markdown code fence opened on its last line (a block that holds nothing)."""
    lines = text.rstrip().split("\n")
    fences = [i for i, line in enumerate(lines) if line.lstrip().startswith(("```", "~~~"))]
    if len(fences) % 2 == 1 and fences[-1] == len(lines) - 1:
        lines.pop()
    return "\n".join(lines)


@dataclass(frozen=True)
class StepOutcome:
    """A finished model turn, and whether it can be used: if not, why, and the correction to send."""

    turn: ModelTurn
    #: Why the turn can be neither run nor taken as the answer (None: usable).
    problem: str | None = None
    #: The user message that tells the model what to fix (None: usable).
    correction: str | None = None
    #: The problem's kind, as an `ErrorEvent` names it: `format`, `tool_choice` (an answer where a call is due),
    #: or `call` (with `check_calls`: a call to an unknown or refused tool, or with arguments that do not fit).
    kind: str = ""
    #: The calls to run: the first only, unless `multiple_calls`; with `check_calls`, checked against their
    #: tools' schemas, arguments coerced where unambiguous.
    calls: tuple[ToolCall, ...] = ()
    #: Whether the reply goes into the conversation before its correction. Not an answer made up before any look:
    #: kept, it was copied (Qwen2.5-Coder-0.5B listed the directory, then answered the `main.py` of its first
    #: reply, a file that does not exist).
    kept: bool = True

    @property
    def usable(self) -> bool:
        """Whether the turn's calls can be run, or its answer taken."""
        return self.problem is None

    @property
    def reply(self) -> Message:
        """The assistant message that records the turn in the conversation, before its correction; its content
        is empty when the turn showed nothing (leave it out: a placeholder such as "(empty reply)" was copied by
        a small model as its next answer)."""
        return Message("assistant", self.turn.parsed.text.strip())


class ModelStep:
    """Asks the model for one turn at a time over given messages; see the module docstring."""

    def __init__(
        self,
        llm: LLM,
        tools: Iterable[ToolSchema],
        config: StepConfig = StepConfig(),
        *,
        prompts: PromptLoader | None = None,
        unlisted: Iterable[ToolSchema] = (),
    ) -> None:
        """`tools` are listed in the system prompt; `unlisted` ones may be called too, whatever the tool choice,
        but cost no prompt tokens (a correction or an observation tells the model how to call them)."""
        self.llm = llm
        self.config = config
        self.prompts = prompts or PromptLoader.default()
        self.tools: tuple[ToolSchema, ...] = tuple(tools)
        self.unlisted: tuple[ToolSchema, ...] = tuple(unlisted)
        choice = config.tool_choice
        if choice not in TOOL_CHOICES and choice not in {t.name for t in self.tools}:
            known = ", ".join(t.name for t in self.tools) or "none"
            raise ValueError(
                f"tool_choice must be auto, none, required or a tool's name; {choice!r} is none of them "
                f"(tools: {known})"
            )
        if choice == "none":
            self.listed: tuple[ToolSchema, ...] = ()
        else:
            self.listed = tuple(t for t in self.tools if choice in TOOL_CHOICES or t.name == choice)
        callable_ = (*self.tools, *self.unlisted)
        #: The tool dialect this step speaks (`auto` resolved for the endpoint's model).
        self.dialect: dialects.ToolDialect = dialects.resolve(
            config.tool_dialect, getattr(getattr(llm, "endpoint", None), "model", None)
        )
        #: The grammars requests carry (compiled once per step): every turn, and an answer-only turn.
        self.constraint, self.answer_constraint = select_constraints(
            callable_, mode=config.constrain, multiple_calls=config.multiple_calls, max_tokens=config.max_tokens,
            tool_choice=choice, always={t.name for t in self.unlisted}, dialect=self.dialect,
        )
        self._callable = callable_
        #: The turn's grammar under other options (`_variant`), by the options changed.
        self._variants: dict[tuple[tuple[str, Any], ...], Constraint | None] = {}
        #: The tools in play and their argument names: the parser reads drifted calls against them.
        self.names = {t.name: tuple(dict(t.parameters).get("properties") or ()) for t in callable_}
        # Without several calls per turn, the end of the first call can stop generation at the server. Models
        # whose API refuses stop strings get none: the parser still ends the turn at the call.
        self.stops: tuple[str, ...] = dialects.stops(self.dialect, multiple_calls=config.multiple_calls)
        if not config.stop_strings:
            self.stops = ()
        #: Whether this endpoint's chat template opens `<think>` for the model, as its replies have shown so far
        #: (None: not known yet, so the parser holds calls until a reply shows it; see docs/parser.md).
        self.opens_reasoning: bool | None = None
        #: Characters per token, calibrated by the prompt token counts the endpoint reports.
        self.estimator = TokenEstimator()
        #: The answers to questions asked apart (`_probe`), by the exact request: greedy (temperature 0), the same
        #: question gets the same answer, so a client sending the same conversation again (a retry, a new session
        #: with the same first question, scripts/bench_serve.py's requests) is not made to wait for a second model
        #: call. Shared by the copies `mylm serve` makes of one prototype step (`copy.copy` keeps the dict).
        self.probed: dict[tuple[str, bool, tuple[Message, ...]], str] = {}

    def call_constraint(self) -> Constraint | None:
        """The grammar of a turn that owes a call (a correction has asked for one): the turn's, with no answer
        branch and no made-up tool. Told to list the directory first, with the very call written out, the 1.5B
        answered "There are 0 Python files" again (the quick start): a demand the grammar can enforce is not left
        to the model."""
        return self._variant(tool_choice="required")

    def known_constraint(self) -> Constraint | None:
        """The turn's grammar without the branch that lets a call name a tool not offered. That branch lets a
        model say which tool it wanted, so that it is told there is none and answers; once told, naming another
        is no longer allowed. Behind Cline the 1.5B called a made-up `extract_text`, then copied the unknown-tool
        message back twice, and the client got an empty answer."""
        return self._variant(other_tools=False)

    def _variant(self, **changed: Any) -> Constraint | None:
        """The turn's grammar with `changed` options for `select_constraints`, compiled on first use. Only under
        `tool_choice: auto`: `required`, a name or `none` already admit no answer branch or no made-up tool."""
        if self.constraint is None or self.config.tool_choice != "auto":
            return self.constraint
        key = tuple(sorted(changed.items()))
        if key not in self._variants:
            self._variants[key], _ = select_constraints(
                self._callable, mode=self.config.constrain, multiple_calls=self.config.multiple_calls,
                max_tokens=self.config.max_tokens, always={t.name for t in self.unlisted}, dialect=self.dialect,
                **changed)
        return self._variants[key]

    def templates(self) -> list[str]:
        """Every template a conversation with this step can render (check them before the first request)."""
        names = [*TEMPLATES, "tool_error.j2", "denied.j2", *FIT_TEMPLATES, "count.j2"]
        if self.config.tool_choice not in ("auto", "none"):
            names.append("tool_required.j2")
        return names

    def corrections(self) -> Corrections:
        """A fresh memory of corrections, for one conversation."""
        return Corrections(self.prompts, max_tokens=self.config.max_tokens, tools=self.listed, dialect=self.dialect)

    def system_prompt(self, *, instructions: str = "", cwd: str = "") -> str:
        """The system prompt listing the tools; keep it for the conversation (no timestamps, so caches hit)."""
        return self.prompts.render(
            dialects.SYSTEM_TEMPLATES[self.dialect],
            tools=tool_view(self.listed),
            # The hermes dialect lists each tool as the Qwen2.5 template does: one JSON signature a line.
            signatures=[dialects.signature(t.name, t.description, prompt_schema(dict(t.parameters)))
                        for t in self.listed] if self.dialect == "hermes" else [],
            multiple_calls=self.config.multiple_calls,
            final_answer_tag=self.config.constrain != "off",
            instructions=defuse_special_tokens(clean_text(instructions)[0]),  # project data: no turn forging
            platform=platform.system() or "unknown",
            cwd=clean_text(cwd)[0],
            tool_choice=self.config.tool_choice,
            example=self.example_call(),
        )

    def example_call(self) -> str:
        """The system prompt's example: a call of a listed tool (a harmless one where there is one) with
        arguments that fit its schema, never placeholders a small model would call literally."""
        tool = example_tool(self.listed)
        if tool is None:
            return ""
        call = ToolCall(tool.name, example_arguments(dict(tool.parameters)))
        return dialects.example_block(call, self.dialect)  # a client's tool name is data

    def turn(
        self,
        messages: Sequence[Message],
        *,
        deadline: float | None = None,
        cancel: CancelToken | None = None,
        corrections: Corrections | None = None,
        meter: Meter | None = None,
        answer_only: bool = False,
        check_calls: bool = False,
        question: str = "",
        quoted: str = "",
        call_due: bool = False,
    ) -> Steps[StepOutcome]:
        """One turn over `messages` (the system message first); redone once without stop strings if a server
        stop cut the model's reasoning. `deadline` is a `time.monotonic()` value; `answer_only` asks for an
        answer under the answer grammar, and such a turn is not judged. `check_calls` (for a caller that runs
        the calls elsewhere, such as a server's client) also rejects a turn whose calls cannot run. `question`:
        the user's question that no tool has answered yet; the first tool the model calls for it is checked
        against it in a request of its own (`fit`), once a conversation, when the model may choose. `quoted`: the
        words of a caller's conversation that its corrections may show again (a server's client's tools'
        results): an answer copying them is no echo of a correction. `call_due`: the conversation's last
        correction asked for a call, so the turn is sampled under `call_constraint`. Once `corrections` has told
        the model a tool is not there, its turns are sampled under `known_constraint`."""
        meter = meter if meter is not None else Meter()
        if answer_only:
            constraint = self.answer_constraint
        elif call_due:
            constraint = self.call_constraint()
        elif corrections is not None and corrections.unknown_sent:
            constraint = self.known_constraint()
        else:
            constraint = self.constraint
        turn = yield from self._complete(messages, deadline, cancel, constraint, meter)
        if self.stops and cut_mid_thought(turn):
            # Models draft calls inside <think>; a server honouring our stops then ends the turn mid-thought.
            # Ask again, and from now on, without stops: the parser still ends the turn at a real call.
            logger.warning("The endpoint stopped inside the model's reasoning; retrying without stop strings")
            yield ErrorEvent("the reply stopped inside the reasoning; asking again without stop strings", "retry")
            self.stops = ()
            turn = yield from self._complete(messages, deadline, cancel, constraint, meter)
        logger.info("Model turn ended: %s", turn.finish.value)
        if answer_only:
            return StepOutcome(turn)
        corrections = corrections or self.corrections()
        if not corrections.task:  # a server's or the eval's conversation: the question is its first user message
            corrections.task = next((m.content for m in messages if m.role == "user"), "")
        said = heard(messages)
        open_question = bool(question.strip()) and self.config.tool_choice == "auto"
        fitting = (lambda: self._fitting(question, deadline, cancel, meter)) if open_question else None
        outcome = self.judge(turn, corrections, check_calls=check_calls, said=said, fitting=fitting, quoted=quoted)
        if open_question and outcome.calls:
            if not corrections.unfit_sent:
                outcome = self._fit(outcome, question, corrections, deadline, cancel, meter)
            if outcome.usable and len(outcome.calls) > 1:
                outcome = self._chosen(outcome, question, deadline, cancel, meter)
        return outcome

    def _chosen(self, outcome: StepOutcome, question: str, deadline: float | None, cancel: CancelToken | None,
                meter: Meter) -> StepOutcome:
        """`outcome`, or only its first call when it calls several different tools and the model, asked apart,
        says `question` asks for one thing: it listed the tools it was offered instead of choosing (its first
        choice is kept; asked again, it can still call the rest)."""
        if len({c.name for c in outcome.calls}) < 2:
            return outcome
        messages = count_messages(self.prompts, _restated(question))
        answer = self._probe(messages, count_constraint() if self.constraint is not None else None, deadline,
                             cancel, meter, "count")
        if answer is None or not says_one(answer):
            return outcome
        logger.info("Asked apart, the model said the question asks for one thing: only its first call goes out")
        return replace(outcome, calls=outcome.calls[:1])

    def _probe(self, messages: tuple[Message, ...], constraint: Constraint | None, deadline: float | None,
               cancel: CancelToken | None, meter: Meter, purpose: str = "fit") -> str | None:
        """The model's short answer to a question asked apart (`fit`), or None where the endpoint refused it."""
        key = (purpose, constraint is not None, messages)
        known = self.probed.get(key)
        if known is not None:
            return known
        request = LLMRequest(messages, (), FIT_TOKENS, deadline, cancel, constraint, sampling=Sampling(temperature=0),
                             purpose=purpose)
        meter.calls += 1
        try:
            # Its usage is left out of the meter's: a client reads prompt tokens as how full its context is.
            answer = "".join(chunk.text for chunk in self.llm.stream(request) if isinstance(chunk, TextChunk))
        except HTTPStatusError as error:  # an endpoint that refuses the probe has not said no
            logger.warning("A question asked apart failed (%s); the calls go out", error)
            return None
        if len(self.probed) >= _PROBES_KEPT:
            self.probed.clear()
        self.probed[key] = answer
        return answer

    def _fit(self, outcome: StepOutcome, question: str, corrections: Corrections, deadline: float | None,
             cancel: CancelToken | None, meter: Meter) -> StepOutcome:
        """`outcome`, or, when the model asked apart says its first call's tool does not do what `question`
        asks, the turn made unusable with the `unfit` correction. No events: the probe is not a turn."""
        call = outcome.calls[0]
        tool = next((t for t in self.listed if t.name == call.name), None)
        # A call that reads the very file the question names does what it asks. Asked apart about OpenCode's
        # `read`, Claude Code's `Bash` or Codex's `exec_command` (descriptions of a dozen lines), the 1.5B said
        # no twice, and its call that read notes.txt was sent back.
        if tool is None or reads_named_file(tool, call.arguments, question) or not self._unfit(
                tool, question, deadline, cancel, meter):
            return outcome
        logger.info("Asked apart, the model said %s does not do what the question asks", call.name)
        return StepOutcome(outcome.turn, f"asked apart, the model said {call.name} does not do what the task asks",
                           corrections.unfit(call.name, tool.description), "call")

    def _fitting(self, question: str, deadline: float | None, cancel: CancelToken | None,
                 meter: Meter) -> ToolSchema | None:
        """The first of the (first three) listed tools that the model, asked apart, says does what `question`
        asks, or None."""
        return next((t for t in self.listed[:_FITTING_TRIED]
                     if not self._unfit(t, question, deadline, cancel, meter)), None)

    def _unfit(self, tool: ToolSchema, question: str, deadline: float | None, cancel: CancelToken | None,
               meter: Meter) -> bool:
        """Whether the model, asked apart in every wording of the fit probe, says `tool` does not do what
        `question` asks (an endpoint that refuses the probe has not said no)."""
        constraint = fit_constraint() if self.constraint is not None else None
        for template in FIT_TEMPLATES:
            messages = fit_messages(self.prompts, _restated(question), tool.name,
                                    neutralise(" ".join(tool.description.split())), template)
            answer = self._probe(messages, constraint, deadline, cancel, meter)
            if answer is None or not says_no(answer):
                return False
        return True

    def judge(self, turn: ModelTurn, corrections: Corrections, *, check_calls: bool = False,
              said: str = "", fitting: Callable[[], ToolSchema | None] | None = None,
              quoted: str = "") -> StepOutcome:
        """Whether `turn` can be used; if not, why and what to tell the model. `said`: the conversation's user
        messages (where the values of calls come from); `quoted`: see `turn`. `fitting`: asked only when the correction
        for working cut at the cap is due, the tool the model says does the task (named in it), if any."""
        if turn.degenerate:  # cut short while looping: whatever it parsed to is not what the model meant
            once = said_once(turn, corrections.looped)
            if once is not None:
                return StepOutcome(once)
            return StepOutcome(turn, turn.degenerate, corrections.degenerate(turn.degenerate), "format")
        problem = corrections.problem(turn.parsed)
        if problem is not None:
            return StepOutcome(turn, problem, corrections.unusable(turn, problem), "format")
        if self._capped(turn) and not corrections.capped_sent:
            # At the cap the grammar lets the prose only end: a model working a tool's calculation out by hand
            # (BFCL simple_python: an HCF, a final velocity) stopped mid-sentence ("- Div"), or was made to tag
            # an answer it had not reached (`<final_answer>0`). Asked again, it can call the tool.
            # Told only "if one of the tools does what the task asks, call it", the 1.5B answered from its working
            # instead (BFCL simple_python: roots, an HCF, a final velocity): the tool the model itself says fits,
            # asked apart, is named.
            cap, fits = thought_cap(self.config.max_tokens), fitting() if fitting else None
            return StepOutcome(turn, f"the reply's working ran to the {cap}-character limit",
                               corrections.capped(cap, *((fits.name, fits.description) if fits else ())), "format")
        if not turn.parsed.tool_calls and corrections.echoes(turn.parsed.final_answer or turn.parsed.thought,
                                                             quoted):
            # Not an answer: the model copied what it was just told (a small model's habit).
            return StepOutcome(turn, ECHOED, corrections.echoed(corrections.task), "format")
        written = None if turn.parsed.tool_calls or corrections.code_call_sent else code_call(
            turn.parsed.final_answer or turn.parsed.thought, self.names)
        if written is not None:
            # Its calls written as Python in a fenced block (the 1.5B behind Cline: "The final response will be the
            # tool calls for the above steps."): not an answer, and not run (code in a reply is shown, not run).
            return StepOutcome(turn, f"the reply wrote a call of {written.name} as code in a code block",
                               corrections.code_call(written), "format")
        choice = self.config.tool_choice
        if not turn.parsed.tool_calls and choice not in ("auto", "none"):
            tool = None if choice == "required" else choice
            which = f"a call of {tool}" if tool else "a tool call"
            problem = f"the reply had no tool call; {which} is required (tool_choice)"
            return StepOutcome(turn, problem, corrections.tool_required(tool), "tool_choice")
        calls = turn.parsed.tool_calls if self.config.multiple_calls else turn.parsed.tool_calls[:1]
        if len(calls) > 1:
            calls = ahead_of_results(calls, self.tools)
        if len(calls) > 1:
            # Before the check: a call the question did not ask for (`root_type: real` beside the `all` asked)
            # must not decide how the calls after it are judged.
            calls = grounded(calls, said)
        return self._checked(turn, calls, corrections, said) if check_calls else StepOutcome(turn, calls=calls)

    def _capped(self, turn: ModelTurn) -> bool:
        """Whether a turn sampled under the grammar stopped where the grammar's prose cap made it stop: no call,
        the prose at the cap and not ended as a sentence (then, at most a short answer forced after it)."""
        parsed = turn.parsed
        if self.constraint is None or parsed.tool_calls:
            return False
        cap = thought_cap(self.config.max_tokens)
        at = parsed.text.lower().find(FINAL_OPEN)
        prose = (parsed.text if at < 0 else parsed.text[:at]).rstrip()
        # Between cap-2 and cap: under a grammar no prose is longer; an endpoint that ignored the grammar rarely
        # ends an answer of its own at exactly that length, mid-sentence.
        if cap < 40 or not cap - 2 <= len(prose) <= cap or prose.endswith((".", "!", "?", ":", ")", "`", '"')):
            return False
        return at < 0 or len((parsed.final_answer or "").strip()) < 40

    def _checked(self, turn: ModelTurn, calls: tuple[ToolCall, ...], corrections: Corrections,
                 said: str = "") -> StepOutcome:
        """The turn with its calls checked as the agent's runner would before running them: the first that
        cannot run makes the turn unusable, with the observation the agent would send for it."""
        tools = {t.name: t for t in (*self.tools, *self.unlisted)}
        choice, unlisted = self.config.tool_choice, {t.name for t in self.unlisted}
        checked: list[ToolCall] = []
        for call in calls:
            tool = tools.get(call.name)
            if tool is None and checked and all(mostly_mentioned(c, said) for c in checked):
                # Real calls, then steps of a plan in tools that do not exist (Qwen2.5-Coder-1.5B: a right
                # `solve_quadratic`, then `calculate_discriminant`, `display_roots`...): the real ones go out, the
                # model sees their results and goes on from there. Correcting the whole reply lost the right call.
                # Only real calls whose values mostly come from the conversation: one with values from nowhere
                # before made-up tools is a model reaching for tools it does not have (BFCL irrelevance_0); one
                # that adds a constant (a permittivity, simple_python_41) to the question's values is not. Real
                # calls after it still go out: asked a circle's area and perimeter and a circumference, the 1.5B
                # called `circle.calculate_area`, a made-up `circle.calculate_perimeter`, then the real
                # `circle.calculate_circumference` (BFCL parallel_multiple_2).
                logger.info("Dropped the call of %s after %d usable ones: no such tool", call.name, len(checked))
                continue
            if tool is None:
                problem = corrections.unknown_tool(call.name, list(tools))
            elif choice == "none" or (choice not in TOOL_CHOICES and call.name not in (choice, *unlisted)):
                problem = corrections.refused_by_choice(call.name, choice)
                correction = self.prompts.render("denied.j2", tool=call.name, reason=neutralise(problem))
                return StepOutcome(turn, problem, correction, "call")
            else:
                value, problems = validate(tool.parameters, dict(call.arguments))
                host = None if problems or corrections.made_up_sent else placeholder_host(call, said)
                if host is not None:
                    return StepOutcome(turn, f"the {call.name} call goes to {host}, an address nothing gave",
                                       corrections.made_up(call, host), "call")
                if not problems and not checked and not corrections.made_up_sent and made_up(call, said):
                    # Served or scored, a call is handed out as it is: a call of the one tool at hand with
                    # values from nowhere answers a question that tool does not (BFCL irrelevance).
                    return StepOutcome(turn, f"the values of the {call.name} call come from nowhere",
                                       corrections.made_up(call), "call")
                if not problems:
                    checked.append(replace(call, arguments=value if isinstance(value, dict) else call.arguments))
                    continue
                problem = corrections.invalid_arguments(tool, problems, call.arguments)
            correction = self.prompts.render(
                "tool_error.j2", tool=call.name, message=neutralise(problem), example=corrections.take_example()
            )
            return StepOutcome(turn, problem, correction, "call")
        return StepOutcome(turn, calls=tuple(checked))

    def check_call(self, call: ToolCall, corrections: Corrections) -> tuple[ToolCall, str | None]:
        """For a caller that runs no tools itself (`mylm serve` hands calls to its client): `call` with its
        arguments validated against its tool's schema (and coerced where the schema says how), and, when it cannot
        be run as it is, the observation telling the model why: an unknown tool, one the tool choice refuses, or
        arguments that break the schema (escalated like every correction when the same mistake comes again)."""
        # Imported here: the tools package is heavy, and only a caller without tools of its own needs it.
        from ..tools.validation import validate

        tools = {t.name: t for t in (*self.tools, *self.unlisted)}
        tool = tools.get(call.name)
        if tool is None:
            message = corrections.unknown_tool(call.name, list(tools))
            return call, self.prompts.render(
                "tool_error.j2", tool=call.name, message=neutralise(message), example=corrections.take_example()
            )
        choice = self.config.tool_choice
        if tool not in self.unlisted and (choice == "none" or (choice not in TOOL_CHOICES and call.name != choice)):
            reason = corrections.refused_by_choice(call.name, choice)
            return call, self.prompts.render("denied.j2", tool=call.name, reason=neutralise(reason))
        arguments, problems = validate(dict(tool.parameters), dict(call.arguments))
        if problems:
            message = corrections.invalid_arguments(tool, problems, call.arguments)
            return call, self.prompts.render(
                "tool_error.j2", tool=call.name, message=neutralise(message), example=corrections.take_example()
            )
        return replace(call, arguments=arguments), None

    def _complete(
        self,
        messages: Sequence[Message],
        deadline: float | None,
        cancel: CancelToken | None,
        constraint: Constraint | None,
        meter: Meter,
    ) -> Steps[ModelTurn]:
        stops = self.stops
        if self.opens_reasoning is not False:
            # Unless replies have shown that the template does not open <think>, a call may be a draft that a later
            # lone </think> turns into reasoning: let the model go on past it (docs/parser.md, "Reasoning").
            stops = tuple(s for s in stops if s not in _CALL_ENDS)
        # Roles alternate in the request, as strict chat templates require; the caller's history is unchanged.
        request = LLMRequest(alternating(messages), stops, self.config.max_tokens, deadline, cancel, constraint,
                             sampling=self.config.sampling)
        meter.calls += 1
        shown: list[str] = []
        started = time.monotonic()
        try:
            turn: ModelTurn = yield from stream_turn(
                self.llm, request, multiple_calls=self.config.multiple_calls, shown=shown, tools=self.names,
                reasoning_open=self.opens_reasoning, reasoning=with_markers(self.config.reasoning_markers),
            )
        except BaseException:
            meter.partial = "".join(shown)  # what the user already saw: the caller keeps it in the conversation
            raise
        if turn.opens_reasoning is not None:
            self.opens_reasoning = turn.opens_reasoning
        if turn.usage is not None:
            meter.usage = meter.usage + turn.usage
            if turn.usage.prompt_tokens:
                self.estimator.calibrate(messages, turn.usage.prompt_tokens)
            yield UsageEvent(turn.usage, meter.usage)
        first = turn.first_chunk - started if turn.first_chunk is not None else None
        yield ModelCallEvent(turn.finish, time.monotonic() - started, first, turn.usage)
        return turn


def _restated(question: str) -> str:
    """`question` as a probe restates it: on one line, defused, cut to `_QUESTION_CHARS`."""
    if len(question) > _QUESTION_CHARS:
        question = question[:_QUESTION_CHARS].rstrip() + " [...]"
    return defuse_special_tokens(" ".join(question.split()))


def drain(steps: Generator[Event, None, T]) -> tuple[list[Event], T]:
    """Run a step to its end: the events it yielded, and what it returned."""
    events: list[Event] = []
    while True:
        try:
            events.append(next(steps))
        except StopIteration as stop:
            return events, stop.value


__all__ = [
    "Meter", "ModelStep", "StepConfig", "StepOutcome", "Steps", "ToolChoice", "ToolDefinition", "ToolSchema", "drain",
]
