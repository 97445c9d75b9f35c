"""The pieces under the command policy: the option parser, the per-program option lists checked against the
installed programs, and the git config reader checked against git itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mylm.approval.gitread import GIT
from mylm.approval.options import Spec, UnknownOption, parse_args
from mylm.approval.readonly import PROGRAMS

SORT = PROGRAMS["sort"]


def test_options_are_split_like_getopt_long() -> None:
    parsed = parse_args(SORT, ["-rnk2", "--field-separator", ",", "a.txt", "-u", "--", "-o"])
    assert parsed.options == [
        ("-r", None), ("-n", None), ("-k", "2"), ("--field-separator", ","), ("-u", None)
    ]
    assert parsed.operands == ["a.txt", "-o"]
    assert parse_args(PROGRAMS["head"], ["-5", "-n", "-3", "f"]).options == [("-NUM", "5"), ("-n", "-3")]
    optional = parse_args(PROGRAMS["ls"], ["--color", "always", "--color=never"])
    assert optional.options == [("--color", None), ("--color", "never")] and optional.operands == ["always"]
    assert parse_args(Spec("a", permute=False), ["-a", "x", "-a"]).operands == ["x", "-a"]


@pytest.mark.parametrize(
    "args",
    [["--o=x"], ["--outp", "x"], ["--compress-prog=sh"], ["-uo", "x"], ["-o"], ["--unique=yes"], ["-k"],
     ["--files0-from=-"], ["-T", "."], ["--outpu=x"]],
)
def test_unknown_abbreviated_or_malformed_options_are_refused(args: list[str]) -> None:
    with pytest.raises(UnknownOption):
        parse_args(SORT, args)


def _long_names(spec: Spec) -> set[str]:
    return {o for o in spec.flags | spec.valued | spec.optional if o.startswith("--")}


#: GNU programs whose --help lists every long option they take.
_HELP_LISTS_ALL = ("ls", "cat", "head", "tail", "wc", "stat", "du", "df", "nl", "cut", "tr", "basename",
                   "dirname", "realpath", "readlink", "cmp", "comm", "seq", "od", "tac", "paste", "join",
                   "fold", "fmt", "numfmt", "nproc", "sort", "uniq", "date", "file", "id", "uname",
                   "printenv", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
                   "b2sum", "grep", "diff", "column", "hexdump", "strings", "locale", "whoami", "rev")


@pytest.mark.parametrize("name", _HELP_LISTS_ALL)
def test_every_allowed_long_option_is_a_full_option_name_of_the_installed_program(name: str) -> None:
    # A name the program does not have would be taken as an abbreviation of one it has: only real names.
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    text = subprocess.run([name, "--help"], capture_output=True, text=True, check=False).stdout
    missing = [o for o in _long_names(PROGRAMS[name]) if not re.search(re.escape(o) + r"(?![\w-])", text)]
    assert missing == []


def test_every_allowed_git_option_is_a_full_option_name(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    env = {**os.environ, "GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS": "true", "GIT_PAGER": "cat"}
    refused = []
    for sub, spec in GIT.items():
        for option in sorted(_long_names(spec)):
            value = "=1" if option in spec.valued else ""
            result = subprocess.run(
                ["git", sub, option + value], cwd=tmp_path, env=env, capture_output=True, text=True,
                check=False, stdin=subprocess.DEVNULL,
            )
            if re.search(r"unknown option|unrecognized argument|abbreviated|ambiguous option", result.stderr):
                refused.append(f"git {sub} {option}: {result.stderr.strip()}")
    assert refused == []
