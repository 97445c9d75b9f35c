"""The file a client's task asks to be written, and the client's tool that writes it, where there is no workspace
to look at (`mylm serve`): an answer given while no call has written that file is sent back once. The Agents SDK's
agent, asked to write the code name from notes.txt into release.txt, read notes.txt and answered the code name:
nothing was written.

A task asks for a file by its words: a sentence that opens with a writing verb (`write`, `save`, `create`, ...,
after an optional `please` or `can you`) and names a file after it, the one after `into`, `to`, `named`, `called`
or `as` first (`notes.txt` in "from notes.txt" is where the text comes from). The tool that writes it is one named
for writing (`write`, `create`, `save`, `append`, never one for images or the web) with a path parameter, or else a
shell tool. The check is loose on purpose: any call of a tool named for writing or editing counts as the write
(the words of a task can point at the wrong name: "Create a Node.js server in server.js"), and so does any other
call whose arguments name the file (a shell command or a patch holding it as a word).

A task may also ask for a file that is there to be changed ("In greet.py, change the greeting to Hi"): a sentence
opening with a changing verb (`change`, `edit`, `fix`, `rename`, ...) names it, after the verb or in an opening "In
FILE,". Through pydantic-ai the 1.5B read greet.py and answered its greeting unchanged. Such a file is not a
`write_target`: it must be read before it is changed, so the check that the named file was read still covers it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.types import ToolCall
from .unread import (
    _FILE_NAME,
    _MEDIA,
    _READS,
    _SHOWS,
    _shell_parameter,
    _Tool,
    named_files,
    names_file,
    path_property,
)

#: A writing verb opening a sentence or a request ("Write ...", "Please save ...", "Can you create ...").
_ASKS = re.compile(r"(?:^|[.!?;\n]\s*)(?:(?:please|now|then|also|and)\s+|(?:can|could|would|will)\s+you\s+)*"
                   r"(write|save|create|make|put|store|dump|output|generate|append|record|copy|add)\b",
                   re.IGNORECASE)
#: A changing verb opening a sentence, after an optional "In FILE," naming the file it changes ("In greet.py,
#: change the greeting to Hi", "Please fix the typo in notes.txt").
_CHANGE_ASKS = re.compile(r"(?:^|[.!?;\n]\s*)(?:in\s+(\S+?),?\s+)?"
                          r"(?:(?:please|now|then|also|and)\s+|(?:can|could|would|will)\s+you\s+)*"
                          r"(change|edit|modify|update|fix|rename|replace|rewrite|refactor|remove|delete|insert|"
                          r"correct|convert)\b", re.IGNORECASE)
#: The words before a file's name that make it the one written, and those that make it where the text comes from.
_INTO = frozenset({"into", "to", "named", "called", "as"})
_FROM = frozenset({"from", "of", "in", "inside", "using"})
#: Words in a tool's name that say it writes a file, and those that say it changes one.
_WRITES = re.compile(r"write|create|save|append|put(?![a-z])", re.IGNORECASE)
_CHANGES = re.compile(r"write|create|save|append|put(?![a-z])|edit|patch|replace|insert|update|modify",
                      re.IGNORECASE)


@dataclass(frozen=True)
class Unwritten:
    """The file a task asks to be written, and the tool to write it with (`parameter` its path parameter; empty
    for a shell tool, whose command the model must write)."""

    path: str
    tool: str
    parameter: str
    #: The task asks for a file that exists to be changed ("In greet.py, change ..."), not written anew.
    change: bool = False


def write_target(task: str) -> str | None:
    """The file `task` asks to be written, or None."""
    for asked in _ASKS.finditer(task):
        rest = task[asked.end():]
        sentence = re.split(r"[.!?](?:\s|$)|\n", rest, maxsplit=1)[0]
        chosen: str | None = None
        for found in _FILE_NAME.finditer(sentence):
            name = found.group(1).rstrip(".")
            if name not in named_files(name):  # a web address or a product (`example.com`, `ASP.NET`)
                continue
            before = sentence[:found.start()].split()
            word = before[-1].casefold() if before else ""
            if word in _INTO:
                return name
            if chosen is None and word not in _FROM:
                chosen = name
        if chosen is not None:
            return chosen
    return None


def change_target(task: str) -> str | None:
    """The file `task` asks to be changed (an edit of a file that is there), or None: the file a changing verb's
    sentence names, after the verb or in an opening "In FILE,"."""
    for asked in _CHANGE_ASKS.finditer(task):
        sentence = re.split(r"[.!?](?:\s|$)|\n", task[asked.end():], maxsplit=1)[0]
        opening = [asked.group(1).rstrip(",.")] if asked.group(1) else []
        for name in [*(found.group(1).rstrip(".") for found in _FILE_NAME.finditer(sentence)), *opening]:
            if name in named_files(name):  # not a web address or a product (`example.com`, `ASP.NET`)
                return name
    return None


#: Words in a tool's name that say it edits a file in place.
_EDITS = re.compile(r"edit|patch|replace|str_replace|modify", re.IGNORECASE)


def replaces_whole(name: str) -> bool:
    """Whether a tool called `name` writes a file whole (`write_file`, `Write`), not part of one (`Edit`,
    `str_replace`, `append_file`)."""
    return bool(_WRITES.search(name)) and not _EDITS.search(name) and not _PART.search(name)


#: Words in a tool's name that say it adds to a file rather than replacing it.
_PART = re.compile(r"append|insert", re.IGNORECASE)


def _writer(tools: Sequence[_Tool], change: bool = False) -> tuple[str, str] | None:
    """The client's tool that writes a file and its path parameter ("" for a shell tool), or None; for a `change`,
    one that edits a file in place first (Claude Code's Edit, OpenCode's edit), where the client has one."""
    if change:
        for tool in tools:
            if _EDITS.search(tool.name) and not _MEDIA.search(tool.name) and (path := path_property(tool)):
                return tool.name, path
    for tool in tools:
        if _WRITES.search(tool.name) and not _MEDIA.search(tool.name) and (path := path_property(tool)):
            return tool.name, path
    for tool in tools:
        if _shell_parameter(tool) is not None:
            return tool.name, ""
    return None


def wrote(name: str, arguments: Mapping[str, Any], path: str) -> bool:
    """Whether a call of tool `name` with `arguments` may have written `path`: any call of a tool named for
    writing or editing, or one whose arguments name the file (a shell command, a patch)."""
    if _CHANGES.search(name) and not _MEDIA.search(name):
        return True
    return names_file(json.dumps(dict(arguments), ensure_ascii=False), path)


def unwritten(task: str, tools: Sequence[_Tool],
              calls: Iterable[tuple[str, Mapping[str, Any]]]) -> Unwritten | None:
    """The file `task` asks to be written and the tool to write it, where none of `calls` (the tools' names and
    arguments of the calls made since the task was given) may have written it (`wrote`); None when one may have,
    or there is no such file or tool."""
    path, change = write_target(task), False
    if path is None:
        path, change = change_target(task), True
    if path is None:
        return None
    writer = _writer(tools, change)
    # A reader's call naming the file wrote nothing: a file to change is read first, and a model may look for the
    # file it is to write before writing it (AutoGen's 1.5B read release.txt twice, got "no file named
    # 'release.txt'" twice, and answered in words; taken for a write, the answer went out).
    made = [(name, arguments) for name, arguments in calls
            if not ((_READS.search(name) or _SHOWS.search(name)) and not _CHANGES.search(name))]
    if writer is None or any(wrote(name, arguments, path) for name, arguments in made):
        return None
    return Unwritten(path, *writer, change=change)


#: A client's tool that takes the answer as a call (smolagents' `final_answer`, pydantic-ai's `final_result`).
_ANSWER_TOOL = re.compile(r"final[_-]?(?:answer|result|response)|submit[_-]?(?:answer|result)|answer",
                          re.IGNORECASE)


def ahead_of_results(calls: Sequence[ToolCall], tools: Sequence[_Tool]) -> tuple[ToolCall, ...]:
    """`calls` (one reply's) less those written before the results they depend on could be known: the call of an
    answer tool beside other calls, and a write to a file that an earlier call of the same reply reads. Asked for
    the code name in notes.txt through smolagents, Qwen2.5-Coder-1.5B called list_files, read_file(notes.txt),
    write_file(notes.txt, "release_code: 1.0.0") and final_answer in one reply: the client ran the first three,
    overwriting the user's notes with a made-up line, and refused the step for the answer beside them. The
    dropped calls cost a round trip: the model sees the results and can make them then."""
    if len(calls) < 2:
        return tuple(calls)
    answers = [bool(_ANSWER_TOOL.fullmatch(call.name)) for call in calls]
    paths = {tool.name: path_property(tool) for tool in tools}
    kept: list[ToolCall] = []
    for call, answer in zip(calls, answers, strict=True):
        if answer and not all(answers):
            continue
        parameter = paths.get(call.name)
        target = call.arguments.get(parameter) if parameter else None
        if isinstance(target, str) and target.strip() and _CHANGES.search(call.name) and any(
                not _CHANGES.search(earlier.name)
                and names_file(json.dumps(dict(earlier.arguments), ensure_ascii=False), target.strip().removeprefix("./"))
                for earlier in kept):
            continue
        kept.append(call)
    return tuple(kept)


def writes_file(tool: _Tool) -> bool:
    """Whether `tool` is named for writing or editing a file and takes its path (not `write_stdin`, which feeds a
    process, nor an image tool)."""
    return bool(_CHANGES.search(tool.name)) and not _MEDIA.search(tool.name) and path_property(tool) is not None
