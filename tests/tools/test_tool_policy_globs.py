"""Globs are judged by the words bash expands them to, in the directory the command runs in (expand.py).

Each scene plants the file names a hostile repository would ship: `-v`, `-Ocat`, `-ofile`, `a[$(…)]`, a link
to a directory outside. Before the change these commands were auto-approved by their literal text while bash
ran their expansion: code ran (`test -v 'x[$(…)]'` evaluates the subscript), git started a pager program, or
a file outside was read. The end-to-end tests run the call through the approver and the shell tool.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from mylm.approval import ApprovalPolicy, decide
from mylm.approval.commands import classify
from mylm.approval.expand import MAX_WORDS, Unexpandable, expand
from mylm.tools.shell import shell_tool
from mylm.core.types import ToolCall
from tests.tools.test_tool_policy_exploits import run

PWN = "x[$(touch PWNED)]"


def verdict(ws: Path, command: str) -> tuple[str, str]:
    found = classify(command, workspace=ws, deadline=time.monotonic() + 30)
    return found.level, found.reason


def asks(ws: Path, command: str) -> str:
    level, reason = verdict(ws, command)
    assert level != "safe", f"{command!r} was auto-approved"
    return reason


def safe(ws: Path, command: str) -> None:
    level, reason = verdict(ws, command)
    assert level == "safe", f"{command!r}: {reason}"


@pytest.fixture
def planted(workspace: Path, outside: Path) -> Path:
    """A workspace as a hostile clone ships it: option-named files, a subscript that runs code, a link out."""
    for name in ("-v", "-Ocat", "-ofile", PWN, "a.txt", "b.txt"):
        (workspace / name).write_text("data\n")
    (workspace / "dlink").symlink_to(outside, target_is_directory=True)
    (outside / "f").write_text("outside\n")
    return workspace


# ------------------------------------------------------------------------------------ the examples


def test_printf_star_with_a_file_named_dash_v_asks(planted: Path) -> None:
    reason = asks(planted, "printf *")
    assert "bash expands it to: printf -Ocat" in reason  # the question shows what bash would run


def test_test_with_a_glob_option_and_a_subscript_file_asks(planted: Path) -> None:
    reason = asks(planted, "test -? x*")
    assert "test -v" in reason and "x[$(touch PWNED)]" in reason
    asks(planted, "[ -? x* ]")


def test_git_grep_star_with_a_file_named_like_a_pager_option_asks(planted: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=planted, check=True)
    assert "-O" in asks(planted, "git grep *")


def test_cd_into_a_glob_that_names_a_link_outside_asks(planted: Path) -> None:
    assert "cd dlink leaves the workspace" in asks(planted, "cd d*; cat f")
    asks(planted, "cd dl*/ && cat f")
    asks(planted, "cat dl*/f")


def test_the_examples_do_not_run_end_to_end(planted: Path) -> None:
    assert run(planted, "test -? x* && echo yes") is None
    assert run(planted, "cd d*; cat f") is None
    assert not (planted / "PWNED").exists()


# -------------------------------------------------------------------------------------------- variants


def test_an_option_a_program_takes_as_a_file_name_asks(planted: Path) -> None:
    asks(planted, "sort *")  # -ofile: sort writes its output to "file"
    asks(planted, "ls -la *")  # -O is not an ls option the policy knows
    asks(planted, "cat ./a.txt *.txt *")


def test_globs_in_a_directory_reached_by_cd_are_expanded_there(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    for name in ("-v", PWN):
        (workspace / "sub" / name).write_text("")
    safe(workspace, "test -? x*")  # nothing matches at the top: bash passes the patterns as they are
    asks(workspace, "cd sub; test -? x*")
    asks(workspace, "cd s?b && test -? x*")


def test_cd_into_a_glob_inside_the_workspace_is_followed(workspace: Path, outside: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "notes.txt").write_text("n\n")
    safe(workspace, "cd s*; cat notes.txt")
    (workspace / "sub" / "link.txt").symlink_to(outside / "secret.txt")
    asks(workspace, "cd s*; cat link.txt")  # the relative path is judged from where the cd leads


def test_a_glob_that_matches_a_secret_or_a_link_out_asks(workspace: Path, outside: Path) -> None:
    (workspace / "config").mkdir()
    (workspace / "config" / "id_rsa").write_text("KEY\n")
    (workspace / "config" / "app.toml").write_text("x\n")
    asks(workspace, "cat config/*")
    (workspace / "docs").mkdir()
    (workspace / "docs" / "readme.md").write_text("r\n")
    safe(workspace, "cat docs/*")
    (workspace / "docs" / "zz.md").symlink_to(outside / "secret.txt")
    asks(workspace, "cat docs/*")
    asks(workspace, "grep -r KEY *")  # a tree holding a secret, reached through the glob's roots


def test_a_glob_as_the_program_name_asks(workspace: Path) -> None:
    (workspace / "cat").write_text("")
    asks(workspace, "ca? cat")


def test_find_with_an_unquoted_name_pattern_is_judged_as_bash_passes_it(workspace: Path) -> None:
    for name in ("a.py", "b.py"):
        (workspace / name).write_text("")
    safe(workspace, "find . -name '*.py' | wc -l")
    asks(workspace, "find . -name *.py")  # bash passes `-name a.py b.py`: b.py is not a find expression


def test_quoted_glob_characters_are_not_expanded(workspace: Path) -> None:
    (workspace / "-v").write_text("")
    safe(workspace, "test -n '-?'")
    safe(workspace, 'echo "*"')
    (workspace / "a.txt").write_text("")
    safe(workspace, "cat a.txt '*' 2>/dev/null || true")


def test_plain_globs_still_run_without_asking(workspace: Path) -> None:
    for name in ("a.txt", "b.txt", "c.py"):
        (workspace / name).write_text("line\n")
    safe(workspace, "wc -l *.txt | sort")
    safe(workspace, "cat ?.txt")
    safe(workspace, "ls -la *")
    decision = decide(ToolCall("execute_command", {"command": "cat *.txt"}), shell_tool(workspace),
                      ApprovalPolicy(workspace=workspace))
    assert decision.action == "allow" and decision.grant == "read-only"


# ------------------------------------------------------------------------------------------ the bounds


def test_a_link_loop_stops_at_the_deadline_and_asks(workspace: Path) -> None:
    for name in "abcdefghijklmnop":
        (workspace / name).symlink_to(".", target_is_directory=True)
    found = classify("cat ?/?/?/?/?/?/?/?/?/?/x", workspace=workspace, deadline=time.monotonic() + 0.5)
    assert found.level == "unknown"
    assert "link loop" in found.reason or "too many" in found.reason


def test_a_glob_with_too_many_matches_asks(workspace: Path) -> None:
    for name in "abcdefgh":
        (workspace / name).symlink_to(".", target_is_directory=True)
    level, reason = verdict(workspace, "ls */*/*/*")  # 8**4 = 4,096 words
    assert level == "unknown" and "4,097 words, over the 2,000" in reason


def test_no_time_left_asks_without_expanding(workspace: Path) -> None:
    found = classify("ls *", workspace=workspace, deadline=time.monotonic() - 1)
    assert found.level == "unknown" and "no time" in found.reason


def test_without_a_workspace_a_glob_asks() -> None:
    assert classify("ls *", workspace=None).level == "unknown"


# ------------------------------------------------------------------------------------------- expand()


def test_expand_returns_what_bash_passes_in_bash_order(workspace: Path) -> None:
    names = ["B.txt", "a.txt", "_c.txt", "-n", "x y", "new\nline"]
    for name in names:
        (workspace / name).write_text("")
    words = expand([["printf", "*"], ["ls", "'*'", '"a"*', "nomatch*"]], workspace)
    direct = subprocess.run(["bash", "-c", "printf '%s\\0' *"], cwd=workspace, capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"})
    assert words[0] == ["printf", *direct.stdout.split("\0")[:-1]]
    assert sorted(words[0][1:]) == sorted(names)
    assert words[1] == ["ls", "*", "a.txt", "nomatch*"]


def test_expand_runs_nothing(workspace: Path) -> None:
    # The words reaching expand() are plain, but even a substitution could not write: restricted mode.
    with pytest.raises(Unexpandable):
        expand([["echo", ">PWNED"]], workspace)
    assert not (workspace / "PWNED").exists()


def test_expand_caps_the_words(workspace: Path) -> None:
    for i in range(MAX_WORDS + 1):
        (workspace / f"f{i}").write_text("")
    with pytest.raises(Unexpandable, match="over the"):
        expand([["ls", "f*"]], workspace)


def test_a_glob_program_name_asks_even_when_commands_are_approved(workspace: Path) -> None:
    (workspace / "rm").write_text("")
    (workspace / "keep.txt").write_text("k\n")
    policy = ApprovalPolicy(workspace=workspace, approve_commands=True)
    decision = decide(ToolCall("execute_command", {"command": "r? -f keep.txt"}), shell_tool(workspace), policy)
    assert decision.action == "ask" and "glob" in decision.reason
