"""Auto-approval only for plain syntax: every generated exploit attempt asks (or, if allowed, does no harm),
plain commands still run unasked, each check stays linear, and the grant matches who approved the call."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mylm.tools.files import file_tools
from mylm.tools.paths import Workspace
from mylm.approval import ApprovalPolicy, Approver, decide
from mylm.approval.bash import MAX_COMMAND, NotPlain, agrees, character_problem, parse_plain
from mylm.approval.commands import classify
from mylm.approval.shell_syntax import parse
from mylm.tools.shell import shell_tool
from mylm.core.types import ToolCall
from tests.security.attempts import SECRET_TEXT, Attempt, all_attempts, plant

ATTEMPTS = all_attempts()
#: Attempts the policy may allow because they cannot do what they try (they are then run, and checked):
#: the child's environment has no secrets, and `<(...)` inside double quotes is literal text.
HARMLESS_WHEN_ALLOWED = {"printenv", "procsub-in@echo-double-quoted", "procsub-out@echo-double-quoted"}


@pytest.fixture
def scene(workspace: Path, tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "outside"
    plant(workspace, out)
    return workspace, out


def shell_call(command: str) -> ToolCall:
    return ToolCall("execute_command", {"command": command})


def test_the_battery_is_large() -> None:
    assert len(ATTEMPTS) >= 350
    assert len({a.id for a in ATTEMPTS}) == len(ATTEMPTS)


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.id for a in ATTEMPTS])
def test_attempt_is_not_auto_approved(scene: tuple[Path, Path], attempt: Attempt) -> None:
    ws, out = scene
    command = attempt.render(str(out), str(out / "PWNED"))
    tool = shell_tool(ws)
    permission = Approver(ApprovalPolicy(workspace=ws), prompt=None)(shell_call(command), tool)
    if permission.allowed:
        assert attempt.id in HARMLESS_WHEN_ALLOWED, f"auto-approved: {command[:200]!r}"
        assert permission.grant == "read-only"
        output = str(tool.function(command=command))
        assert SECRET_TEXT not in output
    assert sorted(p.name for p in out.iterdir()) == ["secret.txt"]


PLAIN = [
    "ls", "ls -la", "ls -la src 2>/dev/null", "cat f", "cat f | sort | uniq -c", "head -n 5 f && tail -3 f",
    "wc -l f; wc -c f", "grep -rn 'def foo' .", "grep -E '^[a-z]+$' f", "grep -e 'a|b' -e \"c d\" f",
    "grep -c x f 2>&1", "ls >/dev/null 2>&1", "ls &>/dev/null", "ls 2>&1 | head", "sort -k2 -t, f",
    "git status", "git log --oneline -5", "git diff HEAD~1 --stat", "git show HEAD^:f",
    "git log --format='%h %s'", "find . -name '*.py' -type f", "echo 'hello world'", 'echo "a b" c', "pwd",
    "cd sub && ls", "sed -n '1,5p' f",
    "test -f f && echo yes", "du -sh .", "printf '%s\\n' hi", "ls *", "wc -l f\nwc -c f", "cat f |& head",
    "jq -n '1+1'", "ls;\nwc -l f", "stat f", "file f", "basename a/b.c .c", "grep -rn 'x(y)' .",
    "ls | grep -v '#'",
]


@pytest.mark.parametrize("command", PLAIN)
def test_plain_read_only_commands_still_run_unasked(workspace: Path, tmp_path: Path, command: str) -> None:
    plant(workspace, tmp_path / "outside", links=False)  # no link out: a recursive read would reach it
    ws = workspace
    decision = decide(shell_call(command), shell_tool(ws), ApprovalPolicy(workspace=ws))
    assert (decision.action, decision.grant) == ("allow", "read-only"), decision.reason


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("ls $HOME", "$-expansion"), ("ls `id`", "command substitution"), ("ls {a,b}", "brace"),
        ("ls a[1]", "glob character class"), ("ls (x)", "subshell"), ("ls ~", "home directory"),
        ("ls ~root", "home directory"), ("ls a=~/x", "home directory"), ("ls a:~/x", "home directory"),
        ("ls \\x", "backslash"), ("ls !x", "history"), ("ls # c", "comment"), ('ls "$x"', "inside double"),
        ('ls "`x`"', "inside double"), ('ls "\\x"', "inside double"), ('ls "!x"', "inside double"),
        ("cat <<EOF", "here-document"), ("cat <<<x", "here-document"), ("ls 'x", "unterminated"),
        ('ls "x', "unterminated"), ("ls ；", "outside plain"), ("x" * (MAX_COMMAND + 1), "characters long"),
    ],
)
def test_the_character_check_names_what_it_refuses(command: str, why: str) -> None:
    problem = character_problem(command)
    assert problem is not None and why in problem


@pytest.mark.parametrize(
    "command",
    ["ls 'a$b' \"c{d}\" 'e`f`' \"[g]\" '\\h'", "git log HEAD~2", "echo a~b x/~ ~~"[:-3], "ls 'a\nb'"],
)
def test_the_character_check_allows_literal_text(command: str) -> None:
    assert character_problem(command) is None


@pytest.mark.parametrize(
    "command",
    ["ls &", "ls ;; echo", "ls <> f", "ls >| /dev/null", "ls 3>/dev/null", "ls 2>&-", "ls > f", "cat < f",
     "ls >&3", "A=1 ls", "ls |", "ls &&", "> /dev/null", "ls 1>&2 2>&5"],
)
def test_the_parse_tree_admits_only_plain_nodes(command: str) -> None:
    with pytest.raises(NotPlain):
        parse_plain(command)


def test_the_two_parsers_must_agree_where_tree_sitter_binds_a_redirect_elsewhere() -> None:
    command = "ls 2>/dev/null | grep x 2>&1"
    line = parse_plain(command)
    assert agrees(line, parse(command)) is None
    assert [c.argv[0].text for c in line.commands] == ["ls", "grep"]
    assert sorted(line.redirects) == [("2", ">", "/dev/null"), ("2", ">&", "1")]


def test_a_disagreement_between_the_parsers_asks(
    scene: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, _ = scene
    import mylm.approval.commands as commands

    real = commands.parse_plain

    def skewed(command: str):  # type: ignore[no-untyped-def]
        line = real(command)
        return type(line)(line.commands[:-1], line.redirects) if len(line.commands) > 1 else line

    monkeypatch.setattr(commands, "parse_plain", skewed)
    verdict = classify("ls | wc -l", workspace=ws)
    assert verdict.level == "unknown" and "differently" in verdict.reason


_BANNED = "$`{}[]()!\\"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PLAIN), st.integers(min_value=0), st.sampled_from(_BANNED))
def test_any_banned_character_outside_quotes_makes_a_plain_command_ask(
    tmp_path_factory: pytest.TempPathFactory, command: str, where: int, char: str
) -> None:
    # Insert outside quotes only: inside single quotes these characters are literal, as bash reads them.
    quote, spots = "", []
    for i, ch in enumerate(command + " "):
        if not quote:
            spots.append(i)
        if ch in "'\"":
            quote = "" if quote == ch else (quote or ch)
    at = spots[where % len(spots)]
    mutated = command[:at] + char + command[at:]
    assert classify(mutated, workspace=tmp_path_factory.getbasetemp()).level != "safe", mutated


# ----------------------------------------------------------------------------------------- bounded


def _line_events(function: Callable[[], object]) -> int:
    """Python lines executed by `function`: a deterministic measure of work (no clock involved)."""
    count = 0

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        function()
    finally:
        sys.settrace(None)
    return count


def test_a_60000_character_command_asks_with_linear_work(workspace: Path) -> None:
    policy = ApprovalPolicy(workspace=workspace)
    tool = shell_tool(workspace)
    for body in ("a ", "{", "$(", "f|", "'a'"):
        small = _line_events(lambda b=body: decide(shell_call("echo " + b * 30_000), tool, policy))
        large = _line_events(lambda b=body: decide(shell_call("echo " + b * 60_000), tool, policy))
        decision = decide(shell_call("echo " + body * 30_000), tool, policy)
        assert decision.action == "ask" and "characters long" in decision.reason
        assert large <= 2.2 * small, (body, small, large)


@pytest.mark.parametrize("body", ["env ", "{a", "a ", "$(", "'x'", "a|", "f(){ ", "<(", "sh -c 'ls' "])
def test_commands_under_the_limit_are_checked_in_linear_work(workspace: Path, body: str) -> None:
    policy = ApprovalPolicy(workspace=workspace)
    tool = shell_tool(workspace)
    count = (MAX_COMMAND // 2 - 10) // len(body)

    def work(n: int) -> int:
        return _line_events(lambda: decide(shell_call("echo " + body * n), tool, policy))

    half, full = work(count // 2), work(count)
    assert full <= 2.6 * half + 500, (body, half, full)


def test_deny_rules_refuse_a_command_too_long_to_check(workspace: Path) -> None:
    policy = ApprovalPolicy(workspace=workspace, yes=True, deny_commands=("git push",))
    decision = decide(shell_call("git push; " + "ls; " * 2000), shell_tool(workspace), policy)
    assert decision.action == "deny" and "too long" in decision.reason
    unruled = ApprovalPolicy(workspace=workspace)
    assert decide(shell_call("ls; " * 2000), shell_tool(workspace), unruled).action == "ask"


def test_a_fifo_argument_asks_and_the_check_never_opens_it(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    decision = decide(shell_call("cat pipe"), shell_tool(workspace), ApprovalPolicy(workspace=workspace))
    assert decision.action == "ask" and "not a regular file" in decision.reason


# ------------------------------------------------------------------------------------------ grants


def test_grants_follow_who_approved_the_call(scene: tuple[Path, Path]) -> None:
    ws, _ = scene
    shell = shell_tool(ws)
    files = {t.name: t for t in file_tools(Workspace(ws))}
    read, write = shell_call("ls"), shell_call("touch new")

    def grant(call: ToolCall, tool: object, **policy: object) -> str | None:
        approver = Approver(ApprovalPolicy(workspace=ws, **policy), prompt=None)  # type: ignore[arg-type]
        permission = approver(call, tool)  # type: ignore[arg-type]
        return permission.grant if permission.allowed else None

    assert grant(read, shell) == "read-only"
    assert grant(read, shell, yes=True) == "read-only"  # read as a read: nobody needed to approve a write
    assert grant(write, shell) is None
    assert grant(write, shell, yes=True) == "workspace-write"
    assert grant(write, shell, approve_commands=True) == "workspace-write"
    assert grant(write, shell, allow_tools=frozenset({"execute_command"})) == "workspace-write"
    assert grant(shell_call("touch new && ls"), shell, allow_commands=("touch",)) == "workspace-write"
    assert grant(shell_call("touch $(id)"), shell, allow_commands=("touch",)) is None  # not plain: asks
    assert grant(ToolCall("read_file", {"path": "f"}), files["read_file"]) == "read-only"
    assert grant(ToolCall("write_file", {"path": "g", "content": "x"}), files["write_file"], yes=True) == (
        "workspace-write"
    )
    always = Approver(ApprovalPolicy(workspace=ws), prompt=lambda call, decision: _always())
    assert always(write, shell).grant == "workspace-write"
    assert always(shell_call("touch other"), shell).grant == "workspace-write"  # remembered "always"


def _always():  # type: ignore[no-untyped-def]
    from mylm.approval import Answer

    return Answer("always")


def test_the_bash_parser_loads_on_the_first_command_only(subprocess_env: dict[str, str]) -> None:
    import subprocess

    code = (
        "import sys\nfrom mylm.cli import main\nsys.argv = ['mylm', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "import mylm.approval\nprint('tree_sitter' in sys.modules, file=sys.stderr)\n"
        "from mylm.approval.commands import classify\nclassify('ls')\n"
        "print('tree_sitter' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env, capture_output=True, text=True,
                          check=True)
    assert done.stderr.split() == ["False", "True"]
