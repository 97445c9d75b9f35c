"""The files a client's question names and the client's tools that read them, where there is no workspace to
ask (`mylm serve`, `mylm eval`): an answer given before the file was read is sent back once (the server's side
of the agent's `unlooked` correction), and a call that reads it (a reading tool on it, a shell command naming it)
is never doubted by the fit probe.

The agent asks the file system which words of a task are paths; a server has none, so here a word counts as a
file's name by its shape (`notes.txt`, `src/app.py`), and only where the client offers a tool that reads one: a
tool named for reading (`read`, `cat`, else `view`, `open`; never one for images or the web) with a path parameter (`path`, `file_path`, `filePath`,
...), or else a shell tool (`exec_command`, `shell`, `bash`) with a command parameter (`cmd`, `command`), given
`cat --` and the quoted name. Clients with neither (BFCL's functions) are never sent back.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: A file's name as written in a question: a stem with a letter, a dot, an extension of one to five characters
#: starting with a letter, optionally after directories (`notes.txt`, `src/app.py`, `.env.local`). Not a version
#: (`v1.5`), a decimal or an abbreviation's dots (`e.g.`: a one-character stem is not a name).
_FILE_NAME = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*\.?[\w-]*[A-Za-z_][\w-]+\.[A-Za-z][A-Za-z0-9]{0,4})(?![\w/-])")
#: The parameter names a file-reading tool takes its path in, compared without `_` and case.
_PATH_PARAMETERS = frozenset({"path", "filepath", "file", "filename", "absolutepath", "targetfile", "relativepath"})
#: Words in a tool's name that say it reads a file: first `read` and `cat`, then `view` and `open`.
_READS = re.compile(r"read|cat(?![a-z])", re.IGNORECASE)
_SHOWS = re.compile(r"view|open", re.IGNORECASE)
#: Words in a tool's name that say it is for something else than a text file (Codex's `view_image`, offered the
#: code name in notes.txt, was the 1.5B's first choice once told to look).
_MEDIA = re.compile(r"image|img|photo|picture|screenshot|pdf|url|web|browser|http", re.IGNORECASE)
#: Words in a tool's name that say it runs a shell command, and that command's parameter names.
_SHELL = re.compile(r"exec|shell|bash|terminal|run_command", re.IGNORECASE)
_COMMAND_PARAMETERS = ("cmd", "command")


@dataclass(frozen=True)
class Unread:
    """The file a question names, and the call that would read it: `value` in the tool's `parameter`."""

    path: str
    tool: str
    parameter: str
    value: str | list[str]


class _Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Any: ...


#: Extensions that make a bare word a web address, not a file (`example.com`; a path `site/example.com` stays).
_DOMAINS = frozenset({"com", "org", "net", "io", "dev", "ai", "gov", "edu", "co"})


def named_files(question: str) -> list[str]:
    """The words of `question` shaped as files' names, in order. Not a bare web address (`example.com`), nor a
    name written with a capitalised extension of two letters or more (`ASP.NET`, `Socket.IO`: products, while
    files' extensions are lower case); `Node.js` still counts, as `App.js` must."""
    names = []
    for word in (found.rstrip(".") for found in _FILE_NAME.findall(question)):
        extension = word.rsplit(".", 1)[1]
        if ("/" not in word and extension.lower() in _DOMAINS) or (len(extension) > 1 and extension.isupper()):
            continue
        names.append(word)
    return names


def _reading_rank(tool: _Tool) -> int | None:
    """0 for a tool named for reading files, 1 for one named for viewing or opening them, else None."""
    if _MEDIA.search(tool.name):
        return None
    return 0 if _READS.search(tool.name) else 1 if _SHOWS.search(tool.name) else None


def path_property(tool: _Tool, names: frozenset[str] = _PATH_PARAMETERS) -> str | None:
    """The string parameter of `tool` named as a path (`path`, `file_path`, `filePath`, ...; `names` compared
    without `_` and case), or None."""
    properties = dict(tool.parameters).get("properties") or {}
    for name, schema in properties.items():
        typed = schema.get("type", "string") if isinstance(schema, dict) else None
        if str(name).replace("_", "").lower() in names and typed == "string":
            return str(name)
    return None


def path_parameter(tool: _Tool) -> str | None:
    """The parameter `tool` takes a file's path in, if it is a tool that reads files; else None."""
    return None if _reading_rank(tool) is None else path_property(tool)


def _shell_parameter(tool: _Tool) -> tuple[str, bool] | None:
    """The parameter a shell tool takes its command in, and whether as an argv list; None for other tools."""
    if not _SHELL.search(tool.name):
        return None
    properties = dict(tool.parameters).get("properties") or {}
    for name in _COMMAND_PARAMETERS:
        schema = properties.get(name)
        if isinstance(schema, dict) and schema.get("type", "string") in ("string", "array"):
            return name, schema.get("type") == "array"
    return None


def unread(question: str, tools: Sequence[_Tool], *, written: str | None = None,
           mentioned: str = "") -> Unread | None:
    """The first file `question` names and the call that reads it (a file-reading tool's first, else a shell
    tool's `cat`), or None. Not `written`, the file the question asks to be written ("Create hello.py ...":
    there is nothing to read yet), nor a file `mentioned` holds as a word (the arguments of the calls made)."""
    files = [name for name in named_files(question) if name != written and not names_file(mentioned, name)]
    if not files:
        return None
    readers = [(rank, index, tool.name, parameter) for index, tool in enumerate(tools)
               if (parameter := path_parameter(tool)) is not None and (rank := _reading_rank(tool)) is not None]
    if readers:
        _, _, name, parameter = min(readers)
        return Unread(files[0], name, parameter, files[0])
    for tool in tools:
        shell = _shell_parameter(tool)
        if shell is not None:
            name, argv = shell
            # `--`: a name may start with `-` (the shape allows it), which cat would take for an option.
            command = ["cat", "--", files[0]] if argv else f"cat -- {shlex.quote(files[0])}"
            return Unread(files[0], tool.name, name, command)
    return None


def names_file(text: str, name: str) -> bool:
    """Whether `text` holds the file `name` as a word, after directories or not (`/work/p/notes.txt`)."""
    return re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w/-])", text) is not None


def reads_named_file(tool: _Tool, arguments: Mapping[str, Any], question: str) -> bool:
    """Whether a call of `tool` with `arguments` reads a file `question` names: a reading tool's path ending in
    its name (OpenCode asks for absolute paths), or a shell command holding its name as a word (`cat notes.txt`,
    Claude Code's Bash and Codex's exec_command)."""
    names = named_files(question)
    parameter = path_parameter(tool)
    if parameter is not None:
        value = arguments.get(parameter)
        return isinstance(value, str) and any(value == name or value.endswith("/" + name) for name in names)
    shell = _shell_parameter(tool)
    command = arguments.get(shell[0]) if shell else None
    if isinstance(command, list):
        command = " ".join(str(word) for word in command)
    if not isinstance(command, str):
        return False
    return any(re.search(r"(?<![\w.-])(?:[\w./-]*/)?" + re.escape(name) + r"(?![\w/-])", command) for name in names)


#: The parameter names a listing tool takes its directory in (compared as `_PATH_PARAMETERS` are).
_DIRECTORY_PARAMETERS = _PATH_PARAMETERS | {"dir", "directory", "dirpath"}
#: Words in a tool's name that say it lists or finds a project's files (`list_files`, `LS`, `Glob`, `find_files`).
_LISTS = re.compile(r"list|(?<![a-z])ls(?![a-z])|glob|find|tree|dir", re.IGNORECASE)


def lister(tools: Sequence[_Tool]) -> Unread | None:
    """The call that lists the project's files, as an `Unread` of "." (a tool named for listing or finding files
    whose required parameters are at most a path, given "."; else a shell tool's `ls`), or None."""
    for tool in tools:
        if not _LISTS.search(tool.name) or _MEDIA.search(tool.name):
            continue
        required = [str(name) for name in dict(tool.parameters).get("required") or ()]
        parameter = path_property(tool, _DIRECTORY_PARAMETERS)
        if not required or required == [parameter]:
            return Unread(".", tool.name, parameter or "", "." if parameter else "")
    for tool in tools:
        shell = _shell_parameter(tool)
        if shell is not None:
            name, argv = shell
            return Unread(".", tool.name, name, ["ls", "-a"] if argv else "ls -a")
    return None


def unseen_file(answer: str, seen: str) -> str | None:
    """The first file's name `answer` gives that `seen` (everything the conversation holds) never shows, or
    None: a name that can only have been made up."""
    return next((name for name in named_files(answer) if not names_file(seen, name)), None)


#: A question asking which file holds something: "Which file defines parse_release?", "In which file is the port
#: set?", "Where is main declared?". Not "Which files are there?": a list of names needs no file opened.
_WHICH_FILE = re.compile(
    r"\b(?:which|what)\s+(?:[\w-]+\s+)?file\b(?!s)[^.?!\n]*?\b(?:defines?|declares?|implements?|contains?|holds?|"
    r"has|mentions?|uses?|imports?|sets?|configures?|calls?|raises?|handles?|stores?|creates?|exports?)\b"
    r"|\bin\s+(?:which|what)\s+(?:[\w-]+\s+)?file\b(?!s)"
    r"|\bwhere\b[^.?!\n]*?\b(?:defined|declared|implemented|configured|set|called|used|raised|handled|stored|"
    r"mentioned|created|exported)\b", re.IGNORECASE)


def asks_which_file(question: str) -> bool:
    """Whether `question` asks which file holds something (its answer is a file to open, not only a name)."""
    return _WHICH_FILE.search(question) is not None


def quoted_lines(text: str, name: str) -> bool:
    """Whether `text` (tools' results) quotes lines of the file `name` as a search does (`tasks.py:3: def ...`,
    after directories or not): what it holds there has been seen, though no call opened it."""
    return re.search(r"(?<![\w.-])" + re.escape(name) + r":\d+[:-]", text) is not None
