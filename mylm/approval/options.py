"""Split a program's arguments into options and operands the way getopt_long does, knowing only safe options.

A `Spec` lists every option the approval policy understands for one program, in getopt's notation, and each
of them is safe. Anything else is refused: an unknown option, and also an *abbreviated* long option. GNU
getopt_long and git accept any unambiguous prefix (`--o` is `--output`), and which options a prefix can stand
for depends on the installed version; a full name always means itself, so only full names are accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Spec:
    """The safe options of one program.

    `short` is a getopt string: `"abn:w::"` is the flags `-a`, `-b`, `-n VALUE` and `-w[VALUE]`. `long` is
    a space-separated list: `name` is a flag, `name=` takes a value (`--name=V` or `--name V`), `name?` takes
    one only as `--name=V`.
    """

    short: str = ""
    long: str = ""
    #: `-NUM` is an option (`head -5`, `git log -3`, `grep -2`).
    numeric: bool = False
    #: GNU-style: options may follow operands. False: the first operand ends the options (find, env, xargs).
    permute: bool = True
    flags: frozenset[str] = field(init=False)
    valued: frozenset[str] = field(init=False)
    optional: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        flags: set[str] = set()
        valued: set[str] = set()
        optional: set[str] = set()
        i = 0
        while i < len(self.short):
            letter, colons = self.short[i], len(self.short[i + 1 :]) - len(self.short[i + 1 :].lstrip(":"))
            {0: flags, 1: valued}.get(colons, optional).add("-" + letter)
            i += 1 + colons
        for item in self.long.split():
            if item.endswith("="):
                valued.add("--" + item[:-1])
            elif item.endswith("?"):
                optional.add("--" + item[:-1])
            else:
                flags.add("--" + item)
        object.__setattr__(self, "flags", frozenset(flags))
        object.__setattr__(self, "valued", frozenset(valued))
        object.__setattr__(self, "optional", frozenset(optional))

    def __contains__(self, option: str) -> bool:
        return option in self.flags or option in self.valued or option in self.optional


@dataclass
class Parsed:
    """Options in order, as (full option, value or None), and the operands."""

    options: list[tuple[str, str | None]] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)

    def has(self, *names: str) -> bool:
        return any(name == option for option, _ in self.options for name in names)

    def values(self, *names: str) -> list[str]:
        return [value for option, value in self.options if option in names and value is not None]


class UnknownOption(ValueError):
    """An option the spec does not list (unknown, abbreviated, or given a value it does not take)."""


def parse_args(spec: Spec, args: list[str]) -> Parsed:
    """Split `args` like the program would; raises `UnknownOption` for anything the spec does not list."""
    parsed = Parsed()
    i, only_operands = 0, False
    while i < len(args):
        text = args[i]
        i += 1
        if only_operands or text == "-" or not text.startswith("-"):
            parsed.operands.append(text)
            only_operands = only_operands or not spec.permute
        elif text == "--":
            only_operands = True
        elif text.startswith("--"):
            name, eq, value = text.partition("=")
            if name in spec.flags and not eq:
                parsed.options.append((name, None))
            else:
                i = _with_value(spec, name, value if eq else None, args, i, parsed)
        elif spec.numeric and text[1:].isdigit():
            parsed.options.append(("-NUM", text[1:]))
        else:
            i = _short_cluster(spec, text, args, i, parsed)
    return parsed


def _short_cluster(spec: Spec, text: str, args: list[str], i: int, parsed: Parsed) -> int:
    """Parse `-abc` / `-n5` / `-n 5`; return the index of the next unread argument."""
    for j in range(1, len(text)):
        option = "-" + text[j]
        if option not in spec.flags:
            return _with_value(spec, option, text[j + 1 :] or None, args, i, parsed)
        parsed.options.append((option, None))
    return i


def _with_value(
    spec: Spec, option: str, attached: str | None, args: list[str], i: int, parsed: Parsed
) -> int:
    """Record an option that takes a value, `attached` to it or (if required) the next argument; return the
    index of the next unread argument."""
    if option in spec.optional:
        parsed.options.append((option, attached))
        return i
    if option not in spec.valued:
        raise UnknownOption(f"{option} is not an option the policy knows to be safe")
    if attached is None:
        if i >= len(args):
            raise UnknownOption(f"{option} needs a value")
        attached, i = args[i], i + 1
    parsed.options.append((option, attached))
    return i
