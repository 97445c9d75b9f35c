"""What the model is told when a turn or a call cannot be used: every such message rendered from a template in
prompts/, so users change them like the rest; a mistake made twice in a row gets a more concrete correction."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..core.types import FinishReason, ToolCall
from ..prompts import PromptLoader, dump_json
from ..protocol import dialects
from ..protocol.defuse import defuse_correction, neutralise
from ..protocol.examples import example_arguments, example_tool

if TYPE_CHECKING:
    from ..protocol.parsed import ParsedTurn
    from .turn import ModelTurn

#: The templates a conversation's corrections may render; checked before a run starts.
TEMPLATES = (
    "format_error.j2", "truncated.j2", "unusable_reply.j2", "repeated_mistake.j2", "invalid_arguments.j2",
    "tool_choice_refused.j2", "repeated_call.j2", "unknown_tool.j2", "degenerate.j2", "echoed.j2", "capped.j2",
    "made_up.j2", "unfit.j2", "unlooked.j2", "unwritten.j2", "unread_overwrite.j2", "repeated_answer.j2",
    "code_call.j2",
)

#: A reply at least this long that shares this much (or 60% of itself) with the corrections just sent echoes them.
ECHO_CHARS = 24
#: The problem of a reply that only repeated mylm's last correction.
ECHOED = "the reply repeated mylm's correction instead of answering"
#: The task, as an echo correction restates it, is cut to this many characters.
_TASK_CHARS = 600


class ParametersTool(Protocol):
    """What a correction needs of a tool: its name and its parameters' JSON Schema."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


#: A canonical block inside a message (the parser's messages end with the form to write).
_BLOCK = re.compile(
    r"\n?<tool_code>\n<name>(.*?)</name>\n<parameters>\n(.*?)\n</parameters>\n</tool_code>", re.DOTALL
)

#: Words that start a shell command, not a tool's name: a model that writes `<name>python3 x.py</name>` meant to
#: run it. (Only for the wording of the correction: nothing is run on this guess.)
_COMMAND_WORDS = frozenset(
    "python python3 pip pip3 node npm npx bash sh ls cat grep find head tail wc echo git make pytest cd mkdir "
    "rm cp mv sed awk sort uniq diff curl go cargo java ruby perl touch chmod".split()
)


class Corrections:
    """The corrections of one conversation. It remembers the problem it reported last: the same one again means
    the correction did not help, so the next one adds a ready-made block to copy.

    That block (`example`) is mylm's own text and must reach the model as written: a correction's message is
    defused like any observation (it quotes the model's and the tools' text), so the block is kept apart and
    placed after the message by the template (`format_error.j2`, `tool_error.j2`). Read it once with
    `take_example()` when rendering the correction it belongs to. It is written in the conversation's tool
    `dialect` (`protocol.dialects`), as the system prompt's example is."""

    def __init__(
        self, prompts: PromptLoader, *, max_tokens: int, tools: Sequence[ParametersTool] = (), dialect: str = "mylm"
    ) -> None:
        self.prompts = prompts
        #: The tool dialect ready-made blocks are written in.
        self.dialect = dialects.checked(dialect)
        self.max_tokens = max_tokens
        #: The tools the model was shown (the ones corrections may name and build examples from).
        self.tools = tuple(tools)
        #: The problem reported last (before any escalation), so a repeat is recognised.
        self.last = ""
        #: The ready-made block of the last correction, if it has one (see `take_example`).
        self.example = ""
        #: The call corrections (unknown tool, invalid arguments) sent since the model's last turn was acted on:
        #: a reply that only repeats them is not an answer (`echoes`). Cleared by whoever acts on a turn.
        self.said = ""
        #: The user's request, restated by the `echoed` correction (the agent sets it; else the first user
        #: message of the conversation judged).
        self.task = ""
        #: The loop the last `degenerate` correction was about: the same loop again after it is the model's way
        #: of answering (`step.said_once`).
        self.looped = ""
        #: Whether `capped` was sent: a second reply stopped at the prose cap is taken as it is.
        self.capped_sent = False
        #: Whether `made_up` was sent: a second call with values from nowhere is taken as it is.
        self.made_up_sent = False
        #: Whether `unfit` was sent: a tool called again after it goes out.
        self.unfit_sent = False
        #: Whether `unlooked` was sent: a second answer without a look is taken as it is.
        self.unlooked_sent = False
        #: Whether `code_call` was sent: a second reply with a call written as code is taken as it is.
        self.code_call_sent = False
        #: Whether the model has been told a tool it named is not there (`unknown_tool`): from then on the step
        #: samples its turns under a grammar that names only the tools given.
        self.unknown_sent = False
        #: Whether `unwritten` was sent: a second answer with the file still unwritten is taken as it is.
        self.unwritten_sent = False

    def echoes(self, answer: str, quoted: str = "") -> bool:
        """Whether `answer` is mostly a copy of the call corrections just sent (`said`), not the model's own
        answer: Qwen2.5-Coder-1.5B answered a task, and a BFCL question, with the unknown-tool correction word for
        word. An answer quoting a tool's output is the answer; this compares mylm's own words only: a copy of
        what a correction quotes from the conversation (`quoted`: its tools' results, one shown again) is not an
        echo. Through OpenCode the 1.5B, shown notes.txt again by the repeat correction, answered its line with the
        code name, and that answer was sent back twice as an echo."""
        if not self.said:
            return False
        reply, said = (" ".join(text.split()).casefold() for text in (answer, self.said))
        if len(reply) < ECHO_CHARS:
            return False
        match = difflib.SequenceMatcher(None, reply, said, autojunk=False).find_longest_match(
            0, len(reply), 0, len(said))
        if match.size < max(ECHO_CHARS, 0.6 * len(reply)):
            return False
        return reply[match.a:match.a + match.size] not in " ".join(quoted.split()).casefold()

    def take_example(self) -> str:
        """The block to copy that goes with the correction just made ("" if none), once."""
        example, self.example = self.example, ""
        return example

    def problem(self, parsed: ParsedTurn) -> str | None:
        """Why a turn can be neither run nor taken as the answer, or None if it can."""
        if not parsed.tool_calls and parsed.invented_observation:
            # It wrote a tool's result itself instead of calling the tool (a reply that opens with
            # <observation>, or prose then one): not an answer, and not "empty" either.
            return self.prompts.render(
                "unusable_reply.j2", unclosed_reasoning=False, invented=True, wrote=parsed.text.strip()[:200]
            )
        if parsed.error is not None:
            return parsed.error
        if parsed.tool_calls or (parsed.final_answer or "").strip():
            return None
        return self.prompts.render("unusable_reply.j2", unclosed_reasoning=parsed.unclosed_reasoning, invented=False,
                                   wrote="")

    def unusable(self, turn: ModelTurn, problem: str) -> str:
        """The user message answering an unusable turn: the token limit cut it, or `problem` (escalated)."""
        if turn.finish is FinishReason.MAX_TOKENS:
            return self.prompts.render("truncated.j2", max_tokens=self.max_tokens)
        message = self.escalated(problem)
        # The parser's messages end with the form to write; it must reach the model as a real call, as written.
        message, block, after = self._lifted_block(message)
        example = self.take_example() or block
        text = self.prompts.render(
            "format_error.j2", message=defuse_correction(message), example="\0" if example else "",
            after=defuse_correction(after),
        )
        # The parser's messages and the template name mylm's own tags; in another dialect they name its tags
        # (the block, already in the dialect, is put in after).
        return dialects.speak(text, self.dialect).replace("\0", example, 1)

    def _lifted_block(self, message: str) -> tuple[str, str, str]:
        """`message` split around the example block the parser's messages carry (before, block, after), the
        block made real: the tool it names (else a tool the model was shown) with the arguments it holds where
        they fit the schema, the rest filled from it. Placeholders (`TOOL_NAME`, `VALUE`) never reach the model."""
        found = _BLOCK.search(message)
        if found is None:
            return message, "", ""
        before, after = message[: found.start()].rstrip(), message[found.end():].strip()
        by_name = {t.name: t for t in self.tools}
        tool = by_name.get(found.group(1)) or example_tool(self.tools)
        if tool is None:
            return before, "", after
        try:
            given = json.loads(found.group(2))
        except ValueError:
            given = {}
        given = given if isinstance(given, dict) and tool.name == found.group(1) else {}
        return before, self._block(ToolCall(tool.name, example_arguments(dict(tool.parameters), given))), after

    def degenerate(self, problem: str) -> str:
        """The user message answering a turn cut short because it kept repeating itself (`problem`: what)."""
        self.looped = problem
        return self.prompts.render("degenerate.j2", message=neutralise(problem))

    def tool_required(self, tool: str | None) -> str:
        """The user message answering a turn without a call while tool_choice requires one (`tool`: the one)."""
        return dialects.speak(self.prompts.render("tool_required.j2", tool=tool), self.dialect)

    def invalid_arguments(
        self, tool: ParametersTool, problems: Sequence[str], given: Mapping[str, Any] | None = None
    ) -> str:
        """What is wrong with a call's arguments (`given`), with the schema (escalated when it is the same
        again)."""
        schema = dump_json(dict(tool.parameters))
        message = self.prompts.render("invalid_arguments.j2", tool=tool.name, problems=list(problems), schema=schema)
        self.said += message + "\n"
        return self.escalated(message, tool, given)

    def unknown_tool(self, name: str, tools: Sequence[str]) -> str:
        """That `name` is not a tool, naming the real ones (those the model was shown, when known) and the
        likeliest intended; a command written as a tool's name gets the call that runs it (escalated when
        repeated)."""
        self.unknown_sent = True
        shown = [t.name for t in self.tools] or list(tools)
        close = difflib.get_close_matches(name, shown, n=1, cutoff=0.6)
        suggestion = close[0] if close else None
        command = name.strip() if self._looks_like_command(name, shown) else None
        message = self.prompts.render(
            "unknown_tool.j2", name=name, tools=shown, suggestion=suggestion, command=command
        )
        self.said += message + "\n"
        by_name = {t.name: t for t in self.tools}
        if command is not None:
            self.last = message
            self.example = self._block(ToolCall("execute_command", {"command": command}))
            return message
        # Called again with no tool like it, the model wants a tool that is not there: a block of some real tool
        # would push it to call the wrong one (BFCL's irrelevance questions), so the escalation asks for the answer.
        return self.escalated(message, by_name.get(suggestion or ""), block=suggestion is not None)

    @staticmethod
    def _looks_like_command(name: str, tools: Sequence[str]) -> bool:
        words = name.strip().split()
        return "execute_command" in tools and bool(words) and (
            len(words) > 1 or "/" in name or words[0].lower() in _COMMAND_WORDS
        )

    def refused_by_choice(self, tool: str, tool_choice: str) -> str:
        """Why tool_choice (`none`, or one tool's name) does not allow calling `tool`."""
        return self.prompts.render("tool_choice_refused.j2", tool=tool, tool_choice=tool_choice)

    def capped(self, chars: int, tool: str = "", description: str = "") -> str:
        """The user message for a reply whose prose ran to the grammar's cap (`chars`) and stopped there without
        a call or an answer of its own (a small model working a tool's calculation out by hand); `tool` (and its
        `description`): the one the model says does the task, named."""
        self.capped_sent = True
        return self._told(self.prompts.render("capped.j2", chars=chars, tool=tool, description=neutralise(
            " ".join(description.split()[:60]))))

    def made_up(self, call: ToolCall, placeholder: str = "") -> str:
        """The user message for a call whose values all come from nowhere (`grounding.made_up`), or that goes to
        a reserved example host (`placeholder`, `grounding.placeholder_host`)."""
        self.made_up_sent = True
        arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
        return self._told(self.prompts.render("made_up.j2", tool=call.name, arguments=neutralise(arguments),
                                              placeholder=neutralise(placeholder)))

    def unfit(self, tool: str, description: str) -> str:
        """The user message for a call of a tool that, asked apart, the model said does not do what the task
        asks (`fit`)."""
        self.unfit_sent = True
        return self._told(self.prompts.render("unfit.j2", tool=tool, description=neutralise(" ".join(
            description.split()[:60]))))

    def unlooked(self, tool: str, path: str = "", *, parameter: str = "path", value: Any = None,
                 seen: bool = True, others: bool = False) -> str:
        """The user message for an answer given before any tool ran where it cannot come from what the model
        has seen: it announced `tool` and did not call it, or the task names `path`, unread (`seen`: the file
        system showed it is in the workspace; a server, which has none, only read the name in the task; `others`:
        other tools have run).
        `parameter` and `value`: the argument of the call that reads it (by default the path itself)."""
        self.unlooked_sent = True
        schema = next((dict(t.parameters) for t in self.tools if t.name == tool), {})
        # The call to make is known whole (the tool and the path the task names): written out to copy, as a
        # repeated mistake's block is (told only "Call read_file on secret.txt", the 0.5B replied `read_file`).
        block = self._block(ToolCall(tool, {parameter: path if value is None else value})) if path and (
            parameter in (schema.get("properties") or {})) else ""
        text = self._told(self.prompts.render("unlooked.j2", tool=tool, path=neutralise(path), seen=seen,
                                              others=others, block="\0" if block else ""))
        return text.replace("\0", block, 1)

    def unwritten(self, tool: str, path: str, parameter: str = "", *, change: bool = False) -> str:
        """The user message for an answer to a task that asks for `path` to be written (`change`: changed), while
        nothing has written it (the agent's `_written`, the server's `checks.written`): `tool` writes files
        through its `parameter`, or is a client's shell (`parameter` empty)."""
        self.unwritten_sent = True
        return self._told(self.prompts.render("unwritten.j2", tool=tool, path=neutralise(path),
                                              parameter=parameter, change=change))

    def unread_overwrite(self, tool: str, path: str, reader: str = "", *, unasked: bool = False,
                         elsewhere: str = "", lost: tuple[int, int, int] | None = None) -> str:
        """The observation for a call of `tool` that would write `path` where nothing asked for it (`mylm serve`'s
        `checks.overwrites`): a file the conversation shows is there and no call has read, or (`unasked`) any file,
        the task being a question that asks for nothing to be changed, or (`elsewhere`: the file the task asks to
        change) a file the client said is not there, or (`lost`: the file's lines kept, its lines, the lines
        written) a file read and written whole with most of it lost; `reader`: the client's tool that reads
        files."""
        task = self.task if len(self.task) <= 300 else self.task[:300].rstrip() + " [...]"
        return self._told(self.prompts.render("unread_overwrite.j2", tool=tool, path=neutralise(path), reader=reader,
                                              task=defuse_correction(" ".join(task.split())), unasked=unasked,
                                              elsewhere=neutralise(elsewhere), lost=lost))

    def told(self, message: str) -> str:
        """`message` (an observation already in the conversation's form, such as a refusal) remembered as mylm's
        words: a reply that only copies it is no answer (`echoes`)."""
        self.said += message + "\n"
        return message

    def _told(self, message: str) -> str:
        """`message` in the step's dialect, remembered as said: a reply that only copies it is no answer (the
        1.5B answered BFCL irrelevance_0 with the made-up-values correction, word for word)."""
        self.said += message + "\n"
        return dialects.speak(message, self.dialect)

    def echoed(self, task: str, *, given: bool = False) -> str:
        """The user message for a reply that only repeated the correction before it (or, `given`, the
        instructions and reminders a client sent with the task: `serve.checks.copied`); `task` (the user's
        request, restated: the model lost track of it) is defused like any text the model did not write."""
        if len(task) > _TASK_CHARS:
            task = task[:_TASK_CHARS].rstrip() + " [...]"
        return self.prompts.render("echoed.j2", task=defuse_correction(task), given=given)

    def repeated_call(self, tool: str, output: str = "", *, previous: bool = True, wrote: bool = False) -> str:
        """The observation for a call the run already made and that gave the same result (`output`, which the
        model already has: shown again, shortened, since a small model loses track of it); `previous`: the
        call just before it was the same, else an earlier one was; `wrote`: the call writes a file, and was made
        once before (its result is that one's)."""
        if len(output) > 600:
            output = output[:600].rstrip() + " [...]"
        task = self.task if len(self.task) <= 300 else self.task[:300].rstrip() + " [...]"
        return self.prompts.render("repeated_call.j2", tool=tool, output=neutralise(output), previous=previous,
                                   task=defuse_correction(" ".join(task.split())), wrote=wrote)

    def stuck(self, tool: str, times: int) -> str:
        """The user message for a model that made the same call `times` times with the same result, corrected
        once already (`mylm serve`): no more tools, its answer from the results it has (as the agent's loop asks
        a model stuck repeating a call)."""
        return self._told(self.prompts.render("repeated_answer.j2", tool=tool, times=times))

    def escalated(
        self, message: str, tool: ParametersTool | None = None, given: Mapping[str, Any] | None = None, *,
        block: bool = True,
    ) -> str:
        """`message`; or, when it repeats the last problem (whose correction evidently did not help), a different
        one, with a ready-made block to copy (`take_example`): a call of `tool` (else of a tool the model was
        shown) whose arguments keep what the model wrote (`given`) and fill the rest from the schema (with
        `block` False, none: the escalation says how to answer instead). Never a placeholder: small models copy
        those literally."""
        repeated = message == self.last
        self.last = message
        self.example = ""
        if not repeated:
            return message
        target = tool if tool is not None else example_tool(self.tools) if block else None
        if target is not None:
            self.example = self._block(ToolCall(target.name, example_arguments(dict(target.parameters), given)))
        return self.prompts.render(
            "repeated_mistake.j2", message=message, tool=tool.name if tool is not None else None,
            block=bool(self.example),
        )

    def code_call(self, call: ToolCall) -> str:
        """The user message for a reply that wrote `call` as code in a code block (`grounding.code_call`)."""
        self.code_call_sent = True
        return self._told(self.prompts.render("code_call.j2", tool=call.name, block=self._block(call)))

    def _block(self, call: ToolCall) -> str:
        # Canonical JSON escapes `</` and reasoning markers; a special token in a value or a client's tool name
        # is broken like any data (the dialect's own tags stay whole).
        return dialects.example_block(call, self.dialect)
