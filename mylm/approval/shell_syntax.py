"""A shell lexer for the approval policy: splits a command line into simple commands, words and redirects.

It does not run or expand anything. It records what the shell *would* do that matters for safety: operators
between commands, quoting, `$` expansions, command substitutions (their inner text, to be checked as well),
globs, redirects and here-documents. Anything it cannot follow is a `ShellSyntaxError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Words that open or close compound commands; at command position they are syntax, not programs.
RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in",
     "select", "function", "{", "}", "!", "[[", "]]", "time", "coproc"}
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_REDIRECTS = ("<<<", "<<-", "&>>", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")


class ShellSyntaxError(ValueError):
    """The command line cannot be split reliably (an unterminated quote or substitution)."""


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal, with what the shell would still do to it."""

    text: str
    #: Some part was quoted or escaped.
    quoted: bool = False
    #: Contains `$…` (parameters, arithmetic, ANSI-C `$'…'`), a command substitution or brace expansion
    #: outside single quotes: its final value is only known when it runs.
    expands: bool = False
    #: Contains an unquoted `*`, `?` or `[`: the shell replaces it with matching file names.
    glob: bool = False
    #: Starts with an unquoted `~`: the shell puts a home directory there.
    tilde: bool = False


@dataclass(frozen=True)
class Redirect:
    """A redirection such as `2>&1`, `> out.txt` or `<< EOF`."""

    op: str
    fd: str
    target: Word


@dataclass
class SimpleCommand:
    """One command between operators: leading assignments, the argument words, and its redirects."""

    assignments: list[str] = field(default_factory=list)
    argv: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    #: The operator that connects this command to the previous one ('' for the first).
    after: str = ""


@dataclass
class Script:
    """A parsed command line."""

    commands: list[SimpleCommand] = field(default_factory=list)
    operators: set[str] = field(default_factory=set)
    #: The inner text of every `$(…)`, `` `…` ``, `<(…)` and `>(…)`, parsed again by the policy.
    substitutions: list[str] = field(default_factory=list)
    heredoc: bool = False


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.script = Script()
        self.command = SimpleCommand()
        self.pending_redirect: tuple[str, str] | None = None
        self.heredocs: list[tuple[str, bool]] = []
        self._reset_word()

    def _reset_word(self) -> None:
        self.buf: list[str] = []
        self.in_word = False
        self.quoted = self.expands = self.glob = self.tilde = False

    # ---------------------------------------------------------------------------------- word boundaries

    def finish_word(self) -> None:
        if not self.in_word:
            return
        word = Word("".join(self.buf), self.quoted, self.expands, self.glob, self.tilde)
        self._reset_word()
        if self.pending_redirect is not None:
            op, fd = self.pending_redirect
            self.pending_redirect = None
            self.command.redirects.append(Redirect(op, fd, word))
            if op in ("<<", "<<-"):
                self.heredocs.append((word.text, op == "<<-"))
            return
        if not self.command.argv and _ASSIGNMENT.match(word.text) and not word.text.startswith("="):
            self.command.assignments.append(word.text)
            return
        self.command.argv.append(word)

    def finish_command(self, operator: str) -> None:
        self.finish_word()
        if self.pending_redirect is not None:
            raise ShellSyntaxError(f"a redirection '{self.pending_redirect[0]}' has no target")
        if self.command.argv or self.command.assignments or self.command.redirects:
            self.script.commands.append(self.command)
        self.command = SimpleCommand(after=operator)
        if operator:
            self.script.operators.add(operator)

    def start_word(self) -> None:
        self.in_word = True

    # --------------------------------------------------------------------------------------- the scan

    def run(self) -> Script:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t":
                self.finish_word()
                self.i += 1
            elif c == "\n":
                self.finish_command("\n")
                self.i += 1
                self.skip_heredocs()
            elif c == "#" and not self.in_word:
                end = s.find("\n", self.i)
                self.i = n if end == -1 else end
            elif c in ";&|()":
                self.operator()
            elif c in "<>":
                self.redirect()
            elif c == "\\":
                self.start_word()
                if self.i + 1 < n and s[self.i + 1] == "\n":
                    self.i += 2  # line continuation
                    continue
                self.quoted = True
                self.buf.append(s[self.i + 1] if self.i + 1 < n else "")
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end == -1:
                    raise ShellSyntaxError("unterminated single quote")
                self.start_word()
                self.quoted = True
                self.buf.append(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self.start_word()
                self.quoted = True
                self.double_quoted()
            elif c == "$":
                self.start_word()
                self.dollar()
            elif c == "`":
                self.start_word()
                self.backtick()
            else:
                if not self.in_word and c == "~":
                    self.tilde = True
                if c in "*?[":
                    self.glob = True
                if c in "{}" and (self.in_word or c == "{") and self._is_brace_expansion():
                    self.expands = True
                self.start_word()
                self.buf.append(c)
                self.i += 1
        self.finish_command("")
        return self.script

    def _is_brace_expansion(self) -> bool:
        # `{a,b}` and `{1..5}` become several words: `{rm,-rf,~}` is `rm -rf ~`.
        close = self.s.find("}", self.i)
        inner = self.s[self.i : close] if close != -1 else ""
        return "," in inner or ".." in inner

    def operator(self) -> None:
        s, i = self.s, self.i
        two = s[i : i + 2]
        if two == "&>":
            self.redirect()
            return
        if two in ("&&", "||", ";;", "|&"):
            op, self.i = two, i + 2
        else:
            op, self.i = s[i], i + 1
        if op in ("(", ")"):
            self.finish_command(op)
            return
        self.finish_command(op)

    def redirect(self) -> None:
        s = self.s
        if s.startswith(("<(", ">("), self.i):
            self.start_word()
            self.expands = True
            self.script.operators.add("process substitution")
            self.i += 1
            self.script.substitutions.append(self.balanced("(", ")"))
            return
        fd = ""
        if self.in_word and not self.quoted and not self.expands and self.buf and "".join(self.buf).isdigit():
            fd = "".join(self.buf)
            self._reset_word()
        else:
            self.finish_word()
        for op in _REDIRECTS:
            if s.startswith(op, self.i):
                self.i += len(op)
                break
        if self.pending_redirect is not None:
            raise ShellSyntaxError("two redirections in a row")
        if op in ("<<", "<<-"):
            self.script.heredoc = True
        self.pending_redirect = (op, fd)

    def double_quoted(self) -> None:
        s, n = self.s, len(self.s)
        self.i += 1
        while self.i < n:
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < n:
                nxt = s[self.i + 1]
                if nxt == "\n":
                    self.i += 2
                    continue
                self.buf.append(nxt if nxt in '$`"\\' else "\\" + nxt)
                self.i += 2
            elif c == "$":
                self.dollar(in_quotes=True)
            elif c == "`":
                self.backtick()
            else:
                self.buf.append(c)
                self.i += 1
        raise ShellSyntaxError("unterminated double quote")

    def dollar(self, *, in_quotes: bool = False) -> None:
        s, i = self.s, self.i
        nxt = s[i + 1] if i + 1 < len(s) else ""
        if nxt == "(":
            self.expands = True
            self.i += 1
            inner = self.balanced("(", ")")
            if inner.startswith("(") and inner.endswith(")"):
                return  # $(( arithmetic )): no command runs
            self.script.substitutions.append(inner)
            self.script.operators.add("$(")
        elif nxt == "{":
            self.expands = True
            self.i += 1
            inner = self.balanced("{", "}")
            if "$(" in inner or "`" in inner:
                self.script.substitutions.append(inner)
                self.script.operators.add("$(")
        elif nxt == "'" and not in_quotes:
            end = s.find("'", i + 2)
            while end != -1 and s[end - 1] == "\\":
                end = s.find("'", end + 1)
            if end == -1:
                raise ShellSyntaxError("unterminated $'...' quote")
            self.expands = self.quoted = True  # escapes such as \x72 can spell anything
            self.buf.append(s[i + 2 : end])
            self.i = end + 1
        elif nxt == '"' and not in_quotes:
            self.i += 1  # $"..." is a translated string: the same as "..."
        elif nxt and (nxt.isalnum() or nxt in "_@*#?$!-"):
            self.expands = True
            self.buf.append("$")
            self.i += 1
        else:
            self.buf.append("$")
            self.i += 1

    def backtick(self) -> None:
        s = self.s
        j = self.i + 1
        while j < len(s) and s[j] != "`":
            j += 2 if s[j] == "\\" else 1
        if j >= len(s):
            raise ShellSyntaxError("unterminated backtick")
        self.expands = True
        self.script.substitutions.append(s[self.i + 1 : j].replace("\\`", "`"))
        self.script.operators.add("`")
        self.i = j + 1

    def balanced(self, open_: str, close: str) -> str:
        """Consume from an opening bracket at `self.i` to its match, skipping quotes; return the inside."""
        s, start, depth, j = self.s, self.i + 1, 0, self.i
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                end = s.find("'", j + 1)
                if end == -1:
                    raise ShellSyntaxError("unterminated single quote")
                j = end + 1
                continue
            if c == '"':
                j = self._skip_double(j)
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    self.i = j + 1
                    return s[start:j]
            j += 1
        raise ShellSyntaxError(f"unterminated '{'$' if open_ != '(' else ''}{open_}'")

    def _skip_double(self, j: int) -> int:
        s = self.s
        j += 1
        while j < len(s):
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == '"':
                return j + 1
            j += 1
        raise ShellSyntaxError("unterminated double quote")

    def skip_heredocs(self) -> None:
        """After a newline, skip the bodies of the here-documents opened on the previous line."""
        for delimiter, strip_tabs in self.heredocs:
            while self.i < len(self.s):
                end = self.s.find("\n", self.i)
                line = self.s[self.i : end if end != -1 else len(self.s)]
                self.i = len(self.s) if end == -1 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs.clear()


def parse(command: str) -> Script:
    """Split `command` into simple commands; raises `ShellSyntaxError` when it cannot be split reliably."""
    return _Lexer(command).run()
