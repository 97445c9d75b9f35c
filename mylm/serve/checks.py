"""The server's side of the agent's checks, each sent back once a request:

- **An answer given before the file the question names was read** (`looked`; `agent/unread.py` says which words
  are files and which tool reads them). The Agents SDK's agent answered "Release1.0" for the code name in
  notes.txt with its `read_file` unused. The retry must call the reader (the server makes it the request's
  `tool_choice`): told to, the 1.5B at the client's temperature still answered without reading.
- **A call the client's conversation already holds, made again** (`repeated`). The agent runs its tools and sees
  a call give the same result; a server only sees the history its client sends back, so a call counts as
  repeated when the conversation holds it (same tool, same arguments) at least `TIMES` times, the last two with
  the same result. Codex in front of the 1.5B sent `write_stdin {session_id: 1}` back eight times, each answered
  "Unknown process id 1". Made again after that, the call goes out: the client decides. A call that writes a file
  (a tool named for writing or editing, with a path) is a repeat the first time it comes back with the same
  arguments: the file holds what it held. The llm CLI's model wrote release.txt, read it back and wrote the same
  again until the client's chain limit failed a finished task.
- **An answer to a task that asks for a file to be written, while nothing was written** (`written`;
  `agent/unwritten.py` says which file and which tool). The Agents SDK's agent, asked to write the code name from
  notes.txt into release.txt, read notes.txt and answered the code name. The retry must call the writer.
- **An answer naming a file nothing has shown, before any tool ran** (`made_up`): asked which file of the project
  defines parse_release, all six framework agents in front of the 1.5B answered a name (`parse_release.py`,
  `functions.py`) without listing anything. The retry must call the client's lister.
- **An answer naming a file the conversation listed but never opened, to a question asking which file holds
  something** (`opened`): asked which file defines parse_release, five of six framework agents in front of the
  1.5B listed the files and answered `release.py` (which only imports it) without reading it. The retry must read
  the file it named.
- **A write nothing asked for** (`overwrites`): a file the conversation shows is there and no call has read
  (asked which file defines parse_release, smolagents' 1.5B wrote a made-up `def parse_release` into release.py,
  the user's own file, five times over; writing it would replace what it holds, unseen, and Claude Code's own
  Write tool refuses a file it has not read), or any file, where the task is a question asking for nothing to be
  made or changed (the llm CLI's 1.5B read release.py, then wrote a new parse_release.py and answered its name).
  The call is sent back once; made again, it goes out.
- **An answer copied from what the client wrote around the question** (`copied`): its system prompt, or a block it
  wrapped into a user message (`<system-reminder>`, `<environment_context>`). Claude Code in front of the 1.5B got
  its own reminder back as the answer. The agent's echo check knows only mylm's corrections; these are the client's.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..agent.corrections import Corrections
from ..agent.step import ModelStep, StepOutcome
from ..agent.turn import call_key
from ..agent.unread import (
    _READS,
    _SHOWS,
    asks_which_file,
    lister,
    named_files,
    names_file,
    path_property,
    quoted_lines,
    unread,
    unseen_file,
)
from ..agent.unwritten import change_target, replaces_whole, unwritten, write_target, writes_file
from ..core.types import ToolCall
from .wire import ChatRequest

#: Made this many times with the same last two results, a call is sent back once before it goes out again.
TIMES = 2
#: An answer this long or longer (in characters, spaces collapsed) is judged a copy when this share of its
#: `_PIECE`-character pieces appear word for word in what the client wrote around the question. Shorter answers
#: are left alone: "Today is 2026-11-29." may rightly repeat a reminder's date.
COPY_CHARS = 120
COPY_SHARE = 0.8
_PIECE = 40
#: Words of a task that ask about the user's own project, whose files only a tool can show.
_ABOUT_PROJECT = re.compile(r"\b(?:files?|project|repo(?:sitory)?|director(?:y|ies)|folders?|codebase|workspace|"
                            r"modules?|here)\b", re.IGNORECASE)
#: A question about what the user's own project holds ("How many Python files does this project have?", "What
#: is in this directory?"): nothing but a look can answer it.
_PROJECT_QUESTION = re.compile(
    r"\b(?:this|the|my|our|current)\s+(?:project|repo(?:sitory)?|director(?:y|ies)|folders?|codebase|workspace)\b",
    re.IGNORECASE)
#: A task that asks for a file to be written whole again ("Rewrite release.py so that it prints hello"): nothing
#: of it needs reading first.
_WHOLE = re.compile(r"\b(?:re|over)-?writ(?:e|ing)\b", re.IGNORECASE)
#: A block a client wraps around the user's words: a tag joining words with `-` or `_` (`<system-reminder>`,
#: `<environment_context>`, `<user_instructions>`), which markup a user writes in a question (`<b>`) does not.
CLIENT_BLOCK = re.compile(r"<([a-z][a-z0-9]*(?:[-_][a-z0-9]+)+)(?:\s[^>]*)?>.*?</\1>", re.DOTALL)


@dataclass(frozen=True)
class Repeat:
    """A call the conversation already holds: its result, and whether the model's previous call was this one
    (`wrote`: the call writes a file, and one identical call before it is a repeat)."""

    tool: str
    output: str
    previous: bool
    wrote: bool = False
    #: How many times the conversation holds the call.
    times: int = 0


def repeated(request: ChatRequest, name: str, arguments: Mapping[str, Any]) -> Repeat | None:
    """The repeat a call of `name` with `arguments` would be in `request`'s conversation, or None."""
    key = call_key(ToolCall(name, dict(arguments)))
    results = {m.call_id: m.content for m in request.messages if m.role == "tool" and m.call_id}
    outputs: list[str | None] = []
    last = ""
    for message in request.messages:
        for call in message.calls if message.role == "assistant" else ():
            last = call_key(ToolCall(call.name, dict(call.arguments)))
            if last == key:
                outputs.append(results.get(call.id))
    # A file written with the same arguments again holds what it held: the llm CLI's model wrote release.txt, read
    # it back, and wrote the same again until the client's chain limit failed the run with the file done.
    tool = next((t for t in request.tools if t.name == name), None)
    if tool is not None and writes_file(tool) and outputs and outputs[-1] is not None:
        return Repeat(name, outputs[-1], previous=last == key, wrote=True, times=len(outputs))
    if len(outputs) < TIMES or outputs[-1] is None or outputs[-2] is None or _volatile(outputs[-1]) != _volatile(
            outputs[-2]):
        return None
    return Repeat(name, outputs[-1], previous=last == key, times=len(outputs))


#: What a tool's result holds that differs from one run to the next with nothing changed: an ID of hex digits
#: (Codex's "Chunk ID: 78f568"; a bare hash, such as a new commit's, is a change) and a decimal (its "Wall time:
#: 0.0012 seconds", pytest's "in 0.12s"). Whole numbers count ("1 failed" is not "0 failed").
_VOLATILE = re.compile(r"(?<=\bid)(\W{1,3})[0-9a-f]{4,}\b|\b\d+\.\d+\b", re.IGNORECASE)


def _volatile(result: str) -> str:
    """`result` with what changes from run to run unchanged masked: two results equal so are the same result."""
    return _VOLATILE.sub(lambda found: (found.group(1) or "") + "#", result)


def looked(outcome: StepOutcome, request: ChatRequest, step: ModelStep,
           corrections: Corrections) -> tuple[StepOutcome, str | None]:
    """`outcome` (an answer to the client's task), or, where the task names a file that no call of the
    conversation names (read, searched or handed to a sub-agent: any call whose arguments hold its name counts) and
    the client offers a tool that reads one, the turn sent back with the `unlooked` correction, and the tool the
    retry must call; the made-up answer is left out (`kept`: kept, the model copied it after the look). Claude
    Code's 1.5B called its task tools, then answered "v5.3.4" for the code name in notes.txt, never read."""
    if step.config.tool_choice != "auto":
        return outcome, None
    task, _ = task_and_calls(request)
    mentioned = "\n".join(json.dumps(dict(call.arguments), ensure_ascii=False)
                          for message in request.messages for call in message.calls)
    found = unread(task, step.listed, written=write_target(task), mentioned=mentioned)
    if found is None:
        return outcome, None
    called = any(message.calls for message in request.messages)
    return dataclasses.replace(
        outcome, problem=f"answered without reading {found.path}", kind="tool_choice",
        correction=corrections.unlooked(found.tool, found.path, parameter=found.parameter, value=found.value,
                                        seen=False, others=called), kept=False), found.tool


def again(outcome: StepOutcome, request: ChatRequest, corrections: Corrections) -> StepOutcome:
    """`outcome` (calls), or, where its first call repeats one the conversation holds (`repeated`), the turn
    sent back with the `repeated_call` correction (the result it already has, the task restated)."""
    call = outcome.calls[0]
    found = repeated(request, call.name, call.arguments)
    if found is None:
        return outcome
    return dataclasses.replace(
        outcome, problem=f"{found.tool} again, with the same arguments and the same result", kind="call",
        correction=corrections.repeated_call(found.tool, found.output, previous=found.previous, wrote=found.wrote))


def _given(request: ChatRequest) -> Iterator[str]:
    """What the client itself wrote to the model, as opposed to its user's words and its tools' results: the
    system messages and the blocks it wrapped into user messages."""
    for message in request.messages:
        if message.role == "system":
            yield message.content
        elif message.role == "user":
            yield from (found.group(0) for found in CLIENT_BLOCK.finditer(message.content))


def _flat(text: str) -> str:
    return " ".join(text.split()).casefold()


def copied(answer: str, request: ChatRequest) -> bool:
    """Whether `answer` is mostly a word-for-word copy of what the client wrote around the question (`_given`):
    at least `COPY_SHARE` of its pieces found there. Pieces, not one longest match, so a copy stitched from two
    places counts, and a 30 kB system prompt costs a few substring searches."""
    reply = _flat(answer)
    if len(reply) < COPY_CHARS:
        return False
    given = "\n".join(_flat(text) for text in _given(request))
    if not given:
        return False
    pieces = [reply[start:start + _PIECE] for start in range(0, len(reply) - _PIECE + 1, _PIECE)]
    return sum(piece in given for piece in pieces) >= COPY_SHARE * len(pieces)


def copy_sent_back(outcome: StepOutcome, corrections: Corrections) -> StepOutcome:
    """`outcome`, an answer `copied` from the client's own text, sent back with the task restated; the copy is
    left out of the conversation (kept, a small model copies it again)."""
    return dataclasses.replace(
        outcome, problem="the answer copied the client's own instructions or reminders", kind="format",
        correction=corrections.echoed(corrections.task, given=True), kept=False)


def task_and_calls(request: ChatRequest) -> tuple[str, list[tuple[str, Mapping[str, Any]]]]:
    """The client's task, its last user message with words of its own (the blocks it wrapped around them left
    out: a message of reminders alone, as Claude Code sends beside a tool's result, is not a task), and the calls
    made since, as (tool, arguments)."""
    calls: list[tuple[str, Mapping[str, Any]]] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            calls[:0] = [(call.name, call.arguments) for call in message.calls]
        elif message.role == "user" and (words := CLIENT_BLOCK.sub("", message.content).strip()):
            return words, calls
    return "", calls


def written(outcome: StepOutcome, request: ChatRequest, step: ModelStep,
            corrections: Corrections) -> tuple[StepOutcome, str | None]:
    """`outcome` (an answer), or, where the task asks for a file to be written and no call since may have
    written it, the turn sent back with the `unwritten` correction, and the tool the retry must call; the answer is
    left out (kept, the model would take it for done)."""
    if step.config.tool_choice != "auto":
        return outcome, None
    task, calls = task_and_calls(request)
    found = unwritten(task, step.listed, calls)
    if found is None:
        return outcome, None
    return dataclasses.replace(
        outcome, problem=f"answered without {'changing' if found.change else 'writing'} {found.path}", kind="tool_choice",
        correction=corrections.unwritten(found.tool, found.path, found.parameter, change=found.change),
        kept=False), found.tool


def made_up(outcome: StepOutcome, answer: str, request: ChatRequest, step: ModelStep,
            corrections: Corrections) -> tuple[StepOutcome, str | None]:
    """`outcome` (an answer, before any call of the conversation), or, where it names a file that nothing in the
    conversation shows, or answers a question about what the project holds, and the client offers a tool that
    lists files, the turn sent back with the `unlooked` correction for the working directory, and the tool the
    retry must call."""
    if step.config.tool_choice != "auto" or any(message.calls for message in request.messages):
        return outcome, None
    task, _ = task_and_calls(request)
    if not _ABOUT_PROJECT.search(task):  # "How do I set up eslint?" may rightly name a file to create
        return outcome, None
    seen = "\n".join(message.content for message in request.messages)
    name = unseen_file(answer, seen)
    # Or any answer to a question about what the project holds: through pydantic-ai the 1.5B answered "How many
    # Python files does this project have?" with "2", no tool run.
    asked = name is None and "?" in task and _PROJECT_QUESTION.search(task) is not None
    found = lister(step.listed) if name is not None or asked else None
    if found is None:
        return outcome, None
    what = f"answered {name}, which nothing has shown," if name is not None else "answered a question about the project"
    return dataclasses.replace(
        outcome, problem=f"{what} before any tool ran", kind="tool_choice",
        correction=corrections.unlooked(found.tool, ".", parameter=found.parameter or "path",
                                        value=found.value or None), kept=False), found.tool


def opened(outcome: StepOutcome, answer: str, request: ChatRequest, step: ModelStep,
           corrections: Corrections) -> tuple[StepOutcome, str | None]:
    """`outcome` (an answer), or, where the question asks which file holds something and the answer names a file
    that no call of the conversation has named (read, searched), the turn sent back with the `unlooked` correction
    for that file, and the tool the retry must call (its reader)."""
    if step.config.tool_choice != "auto":
        return outcome, None
    task, _ = task_and_calls(request)
    if not asks_which_file(task):
        return outcome, None
    mentioned = "\n".join(json.dumps(dict(call.arguments), ensure_ascii=False)
                          for message in request.messages for call in message.calls)
    # Only names the conversation shows (a listing's): one nothing shows is made up, and "X is in the workspace"
    # would be the server's guess.
    shown = "\n".join(message.content for message in request.messages if message.role == "tool")
    unopened = [name for name in named_files(answer) if not names_file(mentioned, name) and names_file(shown, name)
                and not quoted_lines(shown, name)]
    found = unread(unopened[0], step.listed) if unopened else None
    if found is None:
        return outcome, None
    return dataclasses.replace(
        outcome, problem=f"answered {found.path} without opening it", kind="tool_choice",
        correction=corrections.unlooked(found.tool, found.path, parameter=found.parameter, value=found.value,
                                        seen=True, others=True), kept=False), found.tool


#: A question: it opens with a question word, or ends with a question mark.
_QUESTION = re.compile(r"^\s*(?:which|what|where|who|whom|whose|when|why|how|is|are|was|were|does|do|did|can|could|"
                       r"should|would|will|has|have)\b|\?\s*(?:$|[A-Z])", re.IGNORECASE)
#: Words that ask for something to be made or changed (a question holding one may well want a file written:
#: "Can you add a test?").
_CHANGE_WORDS = re.compile(
    r"\b(?:write|writes|create|save|edit|fix|change|update|add|implement|refactor|rename|delete|remove|make|"
    r"generate|put|append|modify|replace|patch|move|copy|convert|format|build|install|set\s+up|store|record|"
    r"insert|rewrite|overwrite|translate|apply|port|migrate|clean)\b", re.IGNORECASE)


def asks_no_change(task: str) -> bool:
    """Whether `task` is a question that asks for nothing to be made or changed ("Which file defines
    parse_release?"): no call of it needs to write a file."""
    return bool(_QUESTION.search(task)) and not _CHANGE_WORDS.search(task)


def overwrites(outcome: StepOutcome, request: ChatRequest, corrections: Corrections) -> StepOutcome:
    """`outcome` (calls), or, where one of its calls would write a file nothing asked for, the turn sent back with
    the `unread_overwrite` correction: a file that a tool's result of the conversation names (a listing: it is
    there) and no call has named (nothing read it), or any file, where the task is a question that asks for
    nothing to be changed (`asks_no_change`). A file the task itself names is left to the model ("Create app.py"),
    except one it asks to change that a tool would replace whole unread ("Fix app.py" is read first)."""
    tools = {tool.name: tool for tool in request.tools}
    shown = "\n".join(message.content for message in request.messages if message.role == "tool")
    mentioned = "\n".join(json.dumps(dict(call.arguments), ensure_ascii=False)
                          for message in request.messages for call in message.calls)
    task, _ = task_and_calls(request)
    for call in outcome.calls:
        tool = tools.get(call.name)
        parameter = path_property(tool) if tool is not None and writes_file(tool) else None
        target = call.arguments.get(parameter) if parameter else None
        if not isinstance(target, str) or not target.strip():
            continue
        name = target.strip().removeprefix("./")
        read = names_file(mentioned, name)
        # A file the task asks to change, written at a path the client just said is not there: through the Agents
        # SDK (Responses) the 1.5B, asked to change greet.py's greeting, read a made-up src/greet.py, was told no
        # such file, and wrote a new one; greet.py was never changed.
        changed = change_target(task)
        if (changed is not None and name != changed.removeprefix("./") and not names_file(task, name)
                and replaces_whole(call.name) and _missing(request, name)):
            found = unread(changed, list(request.tools))
            return dataclasses.replace(
                outcome, problem=f"{call.name} on {name}, which is not there, for a task that changes {changed}",
                kind="call", calls=(), correction=corrections.unread_overwrite(
                    call.name, name, found.tool if found else "", elsewhere=changed))
        # A file the task names is the model's to write, but one the task asks to change is read before a tool
        # replaces it whole: through the llm CLI the 1.5B, asked to change greet.py's greeting, wrote greet.py
        # unread, with the greeting alone.
        blind = not read and changed == name and replaces_whole(call.name) and not _WHOLE.search(task)
        # A file the task asks to change or add to, read, then written whole with most of it gone.
        aimed = any(t is not None and (name == t.removeprefix("./") or name.endswith("/" + t.removeprefix("./")))
                    for t in (changed, write_target(task)))
        lost = _lost(request, call, parameter or "", name) if read and aimed and not _WHOLE.search(task) else None
        if lost is not None:
            return dataclasses.replace(
                outcome, problem=f"{call.name} would turn {name}'s {lost[1]} lines into {lost[2]}, keeping {lost[0]}",
                kind="call", calls=(), correction=corrections.unread_overwrite(call.name, name, lost=lost))
        if names_file(task, name) and not blind:
            continue
        unread_file = (names_file(shown, name) or names_file(task, name)) and not read
        unasked = not unread_file and asks_no_change(task)
        if not (unread_file or unasked):
            continue
        found = unread(name, list(request.tools))
        problem = f"{call.name} on {name}, which the question never asked for" if unasked else (
            f"{call.name} would overwrite {name}, never read")
        return dataclasses.replace(
            outcome, problem=problem, kind="call", calls=(),
            correction=corrections.unread_overwrite(call.name, name, found.tool if found else "", unasked=unasked))
    return outcome


#: What a client's tool answers for a file that is not there ("error: no file named 'src/greet.py'", "ENOENT",
#: "File does not exist", "No such file or directory").
_NOT_THERE = re.compile(r"no\s+such\s+file|\bnot\s+found\b|does\s*(?:not|n't)\s+exist|\bno\s+file\b|"
                        r"(?:can\s*not|can't|could\s*(?:not|n't))\s+(?:find|open|read)|\bENOENT\b|"
                        r"FileNotFound|\bnot\s+a\s+file\b|\bmissing\s+file\b", re.IGNORECASE)
#: A tool's result longer than this is content, not the one line of an error.
_ERROR_CHARS = 400


def _naming(request: ChatRequest, path: str, *, reading: bool = False) -> set[str]:
    """The ids of the conversation's calls whose arguments name `path` (`reading`: of a tool named for reading
    or showing a file, not for writing one)."""
    return {call.id for message in request.messages for call in message.calls
            if (not reading or (_READS.search(call.name) or _SHOWS.search(call.name)) and not replaces_whole(call.name))
            and names_file(json.dumps(dict(call.arguments), ensure_ascii=False), path)}


def _missing(request: ChatRequest, path: str) -> bool:
    """Whether the conversation shows `path` is not there: a call naming it was answered with an error saying so,
    and no other result shows it (a listing naming it, a read of it that worked)."""
    named = _naming(request, path)
    failed = False
    for message in request.messages:
        if message.role != "tool" or not names_file(message.content, path) and message.call_id not in named:
            continue
        text = message.content.strip()
        if message.call_id in named and len(text) <= _ERROR_CHARS and (
                _NOT_THERE.search(text) or message.is_error and names_file(text, path)):
            failed = True
        else:
            return False
    return failed


#: The number a reading tool puts before each line of a file (Claude Code's `     1→`, OpenCode's `00001| `,
#: `cat -n`'s tab).
_NUMBERED = re.compile(r"^\s*\d+(?:→|\|\s?|:\s|\t)")


def _file_lines(shown: str) -> list[str]:
    """The lines of a file as a reading tool's result shows it, spaces stripped, blank lines left out: only the
    numbered lines where most are numbered (the tool's wrapping, `<file>` or "(End of file)", left out)."""
    lines = [line for line in shown.splitlines() if line.strip()]
    numbered = [line for line in lines if _NUMBERED.match(line)]
    if len(numbered) * 2 >= len(lines) > 0:
        lines = [_NUMBERED.sub("", line, count=1) for line in numbered]
    return [line.strip() for line in lines if line.strip()]


def _lost(request: ChatRequest, call: ToolCall, parameter: str, name: str) -> tuple[int, int, int] | None:
    """Where the whole-file write `call` of `name` (a file the task asks to change or add to, shown by a read)
    would lose most of it: (the file's lines it keeps, the file's lines, the lines written), else None. Through the
    llm CLI the 1.5B, asked to change one word of greet.py, wrote greet.py as "Hi" alone."""
    if not replaces_whole(call.name):
        return None
    content = max((value for key, value in call.arguments.items() if key != parameter and isinstance(value, str)),
                  key=len, default=None)
    if content is None:
        return None
    readers = _naming(request, name, reading=True)
    shown = next((m.content for m in reversed(request.messages) if m.role == "tool" and m.call_id in readers
                  and not m.is_error), None)
    if shown is None or (len(shown.strip()) <= _ERROR_CHARS and _NOT_THERE.search(shown)):
        return None
    lines = _file_lines(shown)
    written = {line.strip() for line in content.splitlines() if line.strip()}
    kept = sum(line in written for line in lines)
    # Fewer than half of its lines kept, and fewer lines written than it had: a change of one line of two, or of
    # two lines of three, keeps enough; a change written alone does not.
    if len(lines) >= 2 and kept * 2 < len(lines) and len(written) < len(lines):
        return kept, len(lines), len(written)
    return None


#: The optional arguments of a reading tool that read only part of a file (OpenCode's `offset` and `limit`, and
#: the names other clients give them).
_PAGING = re.compile(r"offset|limit|(?:start|end|first|last)(?:_line)?|lines?|line_count|max_lines|head|tail|count|"
                     r"length|max_bytes|bytes", re.IGNORECASE)
#: Words of a task that ask for part of a file ("the first line", "lines 10 to 20", "the end of the log").
_PART = re.compile(r"\b(?:lines?|first|last|top|bottom|head|tail|beginning|end|part|section|page|offset|limit|"
                   r"bytes?|chars?|characters?)\b", re.IGNORECASE)


def whole_reads(outcome: StepOutcome, request: ChatRequest) -> StepOutcome:
    """`outcome` (calls), with a reading tool's optional paging arguments left out where the task asks for no part
    of a file: the client then reads the file whole, by its own defaults. Through OpenCode the 1.5B read notes.txt
    with `offset: 1, limit: 1`, saw its first line ("Release notes, draft.") and answered "Release"; the code name
    was on the second. Values nobody asked for, not the model's reading of the task."""
    task, _ = task_and_calls(request)
    if _PART.search(task):
        return outcome
    tools = {tool.name: tool for tool in request.tools}
    calls: list[ToolCall] = []
    for call in outcome.calls:
        tool = tools.get(call.name)
        if tool is not None and (_READS.search(call.name) or _SHOWS.search(call.name)) and not writes_file(tool):
            required = set(dict(tool.parameters).get("required") or ())
            kept = {k: v for k, v in call.arguments.items() if k in required or not _PAGING.fullmatch(k)}
            if len(kept) < len(call.arguments):
                call = dataclasses.replace(call, arguments=kept)
        calls.append(call)
    return dataclasses.replace(outcome, calls=tuple(calls))
