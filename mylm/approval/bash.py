"""Admit only command lines that are provably plain: a character check, then tree-sitter-bash's parse tree.

A command can run without asking only when it is words, quoted strings without expansions, `|`, `|&`, `&&`,
`||`, `;` and newlines, and redirections to /dev/null or between the standard descriptors. Two independent
layers say so, and both must: first every character must come from a small set (no `$`, backtick, `\\`,
braces, brackets, parentheses, `!`, `~`, `#`, no `<<`), so no expansion, substitution, subscript, glob class,
here-document or subshell can even be written; then a real bash parser (tree-sitter-bash, kept by the
tree-sitter project) must produce a tree made only of the node types listed here, with no error node. The
argv it yields is compared with the policy's own lexer (shell_syntax.py): a disagreement asks, so a quirk of
either parser cannot open a hole on its own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .shell_syntax import Script

#: Longer commands ask without being parsed: nobody reviews 4 KiB of shell, and every check stays bounded.
MAX_COMMAND = 4096

#: Outside quotes: letters, digits, blanks and the few punctuation marks that are plain words or operators.
_ASCII_PLAIN = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" " \t\n" "_-./:=,+@%^*?|&;<>"
)
_DOUBLE_QUOTE_SPECIAL = frozenset("$`\\!")
#: After these a `~` is inside a word and means itself (not after `=`, `:`, a quote or a blank).
_MID_WORD = frozenset("._-^@%+/*?,~")
#: What each character outside the plain set would let a command do, for the reason shown to the user.
_WHY = {
    "$": "a $-expansion (variable, arithmetic or command substitution)",
    "`": "a command substitution",
    "\\": "a backslash escape",
    "{": "brace expansion or a command group",
    "}": "brace expansion or a command group",
    "[": "a glob character class or an array subscript",
    "]": "a glob character class or an array subscript",
    "(": "a subshell, process substitution or function",
    ")": "a subshell, process substitution or function",
    "!": "history expansion or negation",
    "~": "a home directory (~)",
    "#": "a comment",
}
#: Named node types of a plain command line, and the anonymous tokens (operators, quotes) allowed in it.
_NAMED = frozenset(
    {"program", "list", "pipeline", "command", "command_name", "word", "number", "raw_string", "string",
     "string_content", "concatenation", "redirected_statement", "file_redirect", "file_descriptor"}
)
_TOKENS = frozenset({"|", "|&", "&&", "||", ";", '"', ">", ">>", "<", "&>", "&>>", ">&", "<&"})
_SEPARATORS = frozenset({"|", "|&", "&&", "||", ";"})
#: Redirections that touch no file: to or from /dev/null, or joining standard descriptors (`2>&1`).
_NULL_OPS = frozenset({">", ">>", "&>", "&>>", "<"})
_DUP_OPS = frozenset({">&", "<&"})
_STD_FDS = frozenset({"0", "1", "2"})
#: `ls;` + newline: the parser reports the `;`, the lexer the newline; both just run the next command.
_SEQUENCE = {"\n": ";"}


class NotPlain(ValueError):
    """The command line uses syntax the policy does not positively understand; the message says which."""


@dataclass(frozen=True)
class PlainWord:
    """One argument after quote removal; `glob` when an unquoted `*` or `?` makes the shell expand it.
    `source` is the word as written (quotes included), which bash is given to say what a glob expands to."""

    text: str
    glob: bool = False
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class PlainCommand:
    """One simple command and the operator before it ('' for the first, '\\n' for a new line)."""

    argv: tuple[PlainWord, ...]
    after: str


@dataclass(frozen=True)
class PlainLine:
    """A plain command line: its simple commands, and every redirection in it as (fd, op, target)."""

    commands: tuple[PlainCommand, ...]
    redirects: tuple[tuple[str, str, str], ...]


def character_problem(command: str) -> str | None:
    """Why `command` holds a character outside the plain set, or None: one linear pass, before any parsing.

    Outside quotes only the plain set is allowed; inside single quotes everything is literal to bash, so
    anything visible is; inside double quotes everything but `$`, backtick, `\\` and `!`. No backslash is
    allowed outside single quotes, so where each quote begins and ends is never in doubt.
    """
    if len(command) > MAX_COMMAND:
        return f"it is {len(command):,} characters long (commands over {MAX_COMMAND:,} always ask)"
    quote = ""
    for i, ch in enumerate(command):
        if quote == "'":
            quote = "" if ch == "'" else quote
            continue
        if quote == '"':
            if ch == '"':
                quote = ""
            elif ch in _DOUBLE_QUOTE_SPECIAL:
                return f"it uses {_WHY[ch]} ({ch!r}) inside double quotes"
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "<" and command.startswith("<<", i):
            return "it uses a here-document or here-string ('<<')"
        elif ch in _ASCII_PLAIN or (ord(ch) > 127 and ch.isalnum()):
            continue
        elif ch == "~" and i and (command[i - 1].isalnum() or command[i - 1] in _MID_WORD):
            continue  # `HEAD~1`: only a `~` that starts a word, or follows `=` or `:`, is a home directory
        else:
            why = _WHY.get(ch)
            shown = repr(ch) if why else f"U+{ord(ch):04X} {ch!r}"
            return f"it uses {why or 'a character outside plain words'} ({shown})"
    return "an unterminated quote" if quote else None


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    # Imported on first use: `mylm --help` and runs without commands never load the parser.
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def parse_plain(command: str) -> PlainLine:
    """The plain structure of `command`, or `NotPlain` saying what is not plain about it."""
    problem = character_problem(command)
    if problem:
        raise NotPlain(problem)
    tree = _parser().parse(command.encode("utf-8"))
    walker = _Walker()
    walker.visit(tree.root_node)
    if not walker.commands:
        raise NotPlain("it runs no command")
    return PlainLine(tuple(walker.commands), tuple(walker.redirects))


class _Walker:
    def __init__(self) -> None:
        self.commands: list[PlainCommand] = []
        self.redirects: list[tuple[str, str, str]] = []
        self.pending = ""

    def visit(self, node: Any) -> None:
        kind = node.type
        if node.is_error or node.is_missing or node.has_error:
            raise NotPlain("bash would not parse it as written")
        if not node.is_named:
            if kind not in _TOKENS:
                raise NotPlain(f"it uses the shell operator {kind!r}")
            if kind in _SEPARATORS:
                self.pending = kind
            return
        if kind not in _NAMED:
            raise NotPlain(f"it uses shell syntax not read as plain ({kind.replace('_', ' ')})")
        if kind == "command":
            self._command(node)
        elif kind == "file_redirect":
            self._redirect(node)
        elif kind in ("program", "list", "pipeline", "redirected_statement"):
            for child in node.children:
                self.visit(child)
        else:
            raise NotPlain(f"a {kind.replace('_', ' ')} where a command was expected")

    def _command(self, node: Any) -> None:
        argv: list[PlainWord] = []
        for child in node.children:
            if child.type == "command_name":
                if child.named_child_count != 1 or child.child_count != 1:
                    raise NotPlain("the program name is not a plain word")
                argv.append(_sourced(child.children[0]))
            elif child.type == "file_redirect":
                self._redirect(child)
            elif child.is_named:
                argv.append(_sourced(child))
            else:
                raise NotPlain(f"it uses the shell operator {child.type!r} inside a command")
        if not argv:
            raise NotPlain("a command with no program")
        after = self.pending or ("\n" if self.commands else "")
        self.commands.append(PlainCommand(tuple(argv), after))
        self.pending = ""

    def _redirect(self, node: Any) -> None:
        fd, op, target = "", "", None
        for child in node.children:
            if child.is_error or child.is_missing:
                raise NotPlain("bash would not parse it as written")
            if child.type == "file_descriptor":
                fd = _text(child)
            elif not child.is_named:
                op = child.type
            elif target is None:
                target = _word(child)
            else:
                raise NotPlain("a redirection with more than one target")
        if fd and fd not in _STD_FDS:
            raise NotPlain(f"it redirects descriptor {fd} (only 0, 1 and 2 are read as plain)")
        if target is None:
            raise NotPlain("a redirection without a target")
        plain = ((op in _DUP_OPS and target.text in _STD_FDS and not target.glob)
                 or (op in _NULL_OPS and target.text == "/dev/null"))
        if not plain:
            where = "to" if ">" in op else "from"
            raise NotPlain(f"it redirects {where} {target.text!r} (only /dev/null and 0, 1, 2 are plain)")
        self.redirects.append((fd, op, target.text))


def _text(node: Any) -> str:
    return bytes(node.text).decode("utf-8")


def _sourced(node: Any) -> PlainWord:
    return replace(_word(node), source=_text(node))


def _word(node: Any) -> PlainWord:
    """Quote removal for the node kinds a plain word is made of; anything else is not plain."""
    kind = node.type
    if node.is_error or node.is_missing:
        raise NotPlain("bash would not parse it as written")
    if kind in ("word", "number"):
        text = _text(node)
        return PlainWord(text, "*" in text or "?" in text)
    if kind == "raw_string":
        text = _text(node)
        if len(text) < 2 or text[0] != "'" or text[-1] != "'":
            raise NotPlain("an unterminated quote")
        return PlainWord(text[1:-1])
    if kind == "string":
        for child in node.children:
            if child.type not in ("string_content", '"'):
                raise NotPlain(f"a double-quoted string holding a {child.type.replace('_', ' ')}")
        text = _text(node)
        if len(text) < 2 or text[0] != '"' or text[-1] != '"':
            raise NotPlain("an unterminated quote")
        return PlainWord(text[1:-1])  # literal: the character check left nothing in it that expands
    if kind == "concatenation":
        pieces = [_word(child) for child in node.children]
        return PlainWord("".join(p.text for p in pieces), any(p.glob for p in pieces))
    raise NotPlain(f"an argument built from a {kind.replace('_', ' ')}")


def agrees(line: PlainLine, script: Script) -> str | None:
    """Where the policy's own lexer reads the line differently from the bash parser; None when they agree."""
    if len(line.commands) != len(script.commands):
        return f"the parsers count {len(line.commands)} and {len(script.commands)} commands"
    for plain, lexed in zip(line.commands, script.commands, strict=True):
        if lexed.assignments:
            return "a variable assignment"
        words = [(w.text, w.glob) for w in plain.argv]
        theirs = [(w.text, w.glob) for w in lexed.argv]
        if words != theirs:
            return f"the parsers split {' '.join(w.text for w in plain.argv)!r} differently"
        if _SEQUENCE.get(plain.after, plain.after) != _SEQUENCE.get(lexed.after, lexed.after):
            return f"the parsers see different operators ({plain.after!r}, {lexed.after!r})"
    lexed_redirects = [(r.fd, r.op, r.target.text) for c in script.commands for r in c.redirects]
    if sorted(lexed_redirects) != sorted(line.redirects):
        return "the parsers see different redirections"
    return None
