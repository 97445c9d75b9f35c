"""The policy keeps its readings of a command's text (the lexer's, the programs it runs, the bash parser's) per
exact text: a kept reading must answer exactly as a fresh one, and only what the text alone decides is kept
(the user's rules, mylm's config and the file system are judged every time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mylm.approval import commands
from mylm.approval.bash import parse_plain
from mylm.approval.commands import classify
from mylm.approval.shell_syntax import parse
from tests.security.attempts import all_attempts, plant


def _fresh(command: str, **kwargs: object) -> commands.CommandVerdict:
    """The verdict with nothing kept from before."""
    for kept in (commands._lexed, commands._programs, commands._read_plain):
        kept.cache_clear()
    return classify(command, **kwargs)  # type: ignore[arg-type]


def test_every_attempt_reads_the_same_from_its_kept_reading(workspace: Path, tmp_path: Path) -> None:
    out = tmp_path / "outside"
    plant(workspace, out)
    for attempt in all_attempts():
        command = attempt.render(str(out), str(out / "PWNED"))
        fresh = _fresh(command, workspace=workspace)
        assert classify(command, workspace=workspace) == fresh, command
        # Classifying changed nothing in the readings kept: they equal the text read anew.
        kept = commands._lexed(command, parse)
        if not isinstance(kept, str):
            assert kept == parse(command)
            line = commands._read_plain(command, parse, parse_plain)
            if not isinstance(line, str):
                assert line == parse_plain(command)


def test_the_users_rules_are_not_served_a_kept_answer(workspace: Path) -> None:
    assert classify("git push origin main", workspace=workspace).level != "forbidden"
    refused = classify("git push origin main", workspace=workspace, deny=["git push"])
    assert refused.level == "forbidden" and "git push" in refused.reason
    assert classify("ls -la", workspace=workspace).level == "safe"
    allowed = classify("ls -la", workspace=workspace, allow=["ls"])
    assert allowed.by_rule
    assert not classify("ls -la", workspace=workspace).by_rule


def test_mylms_config_is_not_served_a_kept_answer(workspace: Path, tmp_path: Path) -> None:
    config = tmp_path / "config"
    command = f"echo x > {config}/settings.toml"
    assert classify(command, workspace=workspace).level != "dangerous"
    assert classify(command, workspace=workspace, config_dir=config).level == "dangerous"


def test_a_change_on_disk_is_seen_with_the_same_text(workspace: Path, tmp_path: Path) -> None:
    (workspace / "notes.txt").write_text("hello\n")
    assert classify("cat notes.txt", workspace=workspace).level == "safe"
    # The same text, but the file now leads outside the workspace: judged afresh, it asks.
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("secret\n")
    (workspace / "notes.txt").unlink()
    os.symlink(outside, workspace / "notes.txt")
    assert classify("cat notes.txt", workspace=workspace).level == "unknown"
    # And a glob's matches are expanded afresh: a new file that leads outside is seen.
    assert classify("cat *.md", workspace=workspace).level == "safe"
    os.symlink(outside, workspace / "leak.md")
    assert classify("cat *.md", workspace=workspace).level == "unknown"


def test_another_text_is_not_served_a_kept_reading(workspace: Path) -> None:
    assert classify("ls", workspace=workspace).level == "safe"
    assert classify("ls; rm -rf .", workspace=workspace).level == "dangerous"
    assert classify("ls ", workspace=workspace).level == "safe"
    assert classify("ls $(id)", workspace=workspace).level == "unknown"


def test_a_replaced_parser_is_not_answered_from_the_kept_reading(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert classify("ls | wc -l", workspace=workspace).level == "safe"  # kept with the real parser

    def skewed(command: str):  # type: ignore[no-untyped-def]
        line = parse_plain(command)
        return type(line)(line.commands[:-1], line.redirects)

    monkeypatch.setattr(commands, "parse_plain", skewed)
    verdict = classify("ls | wc -l", workspace=workspace)
    assert verdict.level == "unknown" and "differently" in verdict.reason


def test_the_kept_readings_are_bounded(workspace: Path) -> None:
    for i in range(commands._KEPT_READINGS * 2):
        classify(f"echo {i}", workspace=workspace)
    for kept in (commands._lexed, commands._programs, commands._read_plain):
        assert kept.cache_info().currsize <= commands._KEPT_READINGS
