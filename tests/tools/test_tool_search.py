"""The builtin `search_files` tool, really run on a real workspace: what it finds, and what it never reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mylm.tools import ToolContext, run_tool
from mylm.tools.paths import Workspace
from mylm.tools.search import MAX_MATCHES, search_tools


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "w"
    (root / "src").mkdir(parents=True)
    (root / "src" / "util.py").write_text("import os\n\ndef parse_header(line):\n    return line.split(':')\n")
    (root / "src" / "main.py").write_text("from util import parse_header\nprint(parse_header('a: b'))\n")
    (root / "docs" / "notes").mkdir(parents=True)
    (root / "docs" / "alpha.md").write_text("Nothing here.\n")
    (root / "docs" / "notes" / "beta.md").write_text("Fixed in TICKET-42.\n")
    return root


def search(root: Path, **arguments: object) -> tuple[bool, str]:
    (tool,) = search_tools(Workspace(root))
    outcome = run_tool(tool, arguments, ToolContext(workspace=root, grant="read-only"))
    return outcome.is_error, outcome.output


# Qwen2.5-Coder-1.5B, asked in which file parse_header is defined, guessed `src/parse_header.py` twice.
def test_a_definition_is_found_with_its_file_and_line(tree: Path) -> None:
    assert search(tree, pattern="def parse_header") == (
        False, "[1 match for 'def parse_header' in 1 file (case ignored)]\nsrc/util.py:3: def parse_header(line):")
    error, text = search(tree, pattern="parse_header")
    assert not error and text.splitlines() == [
        "[3 matches for 'parse_header' in 2 files (case ignored)]",
        "src/main.py:1: from util import parse_header", "src/main.py:2: print(parse_header('a: b'))",
        "src/util.py:3: def parse_header(line):",
    ]


def test_case_counts_only_when_the_text_has_a_capital_letter(tree: Path) -> None:
    assert search(tree, pattern="ticket-42")[1].endswith("docs/notes/beta.md:1: Fixed in TICKET-42.")
    assert search(tree, pattern="Ticket-42") == (False, "No text file in the workspace contains 'Ticket-42'.")


def test_a_directory_or_a_file_narrows_the_search(tree: Path) -> None:
    assert "src/" not in search(tree, pattern="e", path="docs")[1]
    assert search(tree, pattern="TICKET", path="docs/notes/beta.md")[1].endswith("docs/notes/beta.md:1: Fixed in TICKET-42.")
    assert search(tree, pattern="parse", path="docs") == (False, "No text file in docs contains 'parse'.")


def test_a_missing_path_or_an_escape_is_an_error_observation(tree: Path) -> None:
    error, text = search(tree, pattern="x", path="lib")
    assert error and text == "'lib' does not exist; the workspace holds: docs/, src/"
    error, text = search(tree, pattern="x", path="../")
    assert error and "outside the workspace" in text
    assert search(tree, pattern="")[0]


def test_links_secrets_caches_and_binaries_are_never_read(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("parse_header outside\n")
    os.symlink(outside, tree / "link.txt")
    os.symlink(tmp_path, tree / "up")
    (tree / ".ssh").mkdir()
    (tree / ".ssh" / "id_rsa").write_text("parse_header in a key\n")
    (tree / ".env").write_text("TOKEN=parse_header\n")
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("parse_header in git\n")
    (tree / "node_modules" / "x").mkdir(parents=True)
    (tree / "node_modules" / "x" / "i.js").write_text("parse_header\n")
    (tree / "blob.bin").write_bytes(b"\0parse_header")
    error, text = search(tree, pattern="parse_header")
    assert not error and "3 matches" in text
    for unread in ("outside", "key", "TOKEN", "git", "i.js", "blob"):
        assert unread not in text


def test_many_matches_are_counted_not_all_shown(tree: Path) -> None:
    (tree / "big.txt").write_text("needle\n" * (MAX_MATCHES + 50))
    error, text = search(tree, pattern="needle")
    lines = text.splitlines()
    assert not error and lines[0] == f"[{MAX_MATCHES + 50} matches for 'needle' in 1 file (case ignored)]"
    assert len(lines) == MAX_MATCHES + 2 and lines[-1].startswith("[... and 50 more matches not shown")


# Asked how many Python files are in the directory, Qwen2.5-Coder-1.5B searched for "py" and answered 0 from
# "No text file in the workspace contains 'py'", and again with the four names listed under that line (the quick
# start, 29 November): the names come first.
def test_the_files_whose_names_hold_the_text_are_listed_too(tree: Path) -> None:
    error, text = search(tree, pattern="py")
    assert not error and text.splitlines() == [
        "[2 file names contain 'py']", "src/main.py", "src/util.py",
        "No line of a text file in the workspace contains 'py'."]
    error, text = search(tree, pattern="util")
    assert not error and text.splitlines()[:3] == [
        "[1 file name contains 'util']", "src/util.py", "[1 match for 'util' in 1 file (case ignored)]"]
    # Names the sandbox hides are never listed, as their contents are never read.
    (tree / ".env").write_text("x\n")
    (tree / ".ssh").mkdir()
    (tree / ".ssh" / "id_rsa.py").write_text("x\n")
    assert search(tree, pattern="env")[1] == "No text file in the workspace contains 'env'."
    assert "id_rsa" not in search(tree, pattern="rsa")[1]


# The quick start, 29 November: Qwen2.5-Coder-1.5B, asked how many Python files the directory held, sent the
# regular expression `.*\.py$`, read "No text file contains '.*\.py$'" and answered 0. Models write the patterns
# grep and ripgrep read; a pattern nothing holds as written is read as a regular expression too.
@pytest.mark.parametrize(("pattern", "names"), [
    (r".*\.py$", ["src/main.py", "src/util.py"]),
    (r"\.md$", ["docs/alpha.md", "docs/notes/beta.md"]),
    ("^(util|main)", ["src/main.py", "src/util.py"]),
])
def test_a_regular_expression_nothing_holds_as_written_matches_names_and_lines(
        tree: Path, pattern: str, names: list[str]) -> None:
    error, text = search(tree, pattern=pattern)
    lines = text.splitlines()
    assert not error and lines[0] == f"[nothing holds {pattern!r} as written; read as a regular expression:]"
    assert lines[1] == f"[2 file names match {pattern!r}]" and lines[2:4] == names


def test_a_regular_expression_finds_lines_with_their_numbers(tree: Path) -> None:
    error, text = search(tree, pattern=r"def \w+\(line")
    assert not error and text.splitlines()[1:] == [
        r"[1 match for 'def \\w+\\(line' in 1 file (case ignored)]", "src/util.py:3: def parse_header(line):"]
    # ^ and $ hold at each line, as grep reads them; smart case ignores the capitals of escapes (\S, \W).
    assert search(tree, pattern=r"^from \S+ import")[1].endswith("src/main.py:1: from util import parse_header")
    assert search(tree, pattern=r"fixed in ticket-\d+")[1].endswith("docs/notes/beta.md:1: Fixed in TICKET-42.")
    assert search(tree, pattern=r"Fixed in ticket-\d+")[1].startswith("No text file in the workspace contains")


def test_text_held_as_written_is_never_read_as_a_regular_expression(tree: Path) -> None:
    (tree / "calls.py").write_text("x = parse_header(\ny = parse_headers\n")
    # An unbalanced parenthesis is text, not an error; `.` is a dot when a line holds it as written.
    assert search(tree, pattern="parse_header(")[1].startswith("[3 matches for 'parse_header(' in 3 files")
    error, text = search(tree, pattern="line.split")
    assert not error and text.splitlines() == [
        "[1 match for 'line.split' in 1 file (case ignored)]", "src/util.py:4: return line.split(':')"]


def test_a_pattern_neither_reading_finds_says_both_were_tried(tree: Path) -> None:
    assert search(tree, pattern=r"nowhere\d+") == (
        False, r"No text file in the workspace contains 'nowhere\\d+', as written or as a regular expression.")
    # Not valid in either reading's terms (RE2 has no backreferences): as written only, nothing logged.
    assert search(tree, pattern=r"(a)\1") == (
        False, r"No text file in the workspace contains '(a)\\1'.")


def test_a_regular_expression_takes_linear_time_whatever_the_pattern(tree: Path) -> None:
    # Python's re takes about 2^n steps for (a+)+$ on n a's then a b: minutes at 40, ages at 5,000. RE2 answers
    # in time linear in the text; the test would hang, not fail, if the search backtracked.
    (tree / "evil.txt").write_text("a" * 5000 + "b\n")
    assert search(tree, pattern="(a+)+$")[1].startswith("No text file in the workspace contains '(a+)+$'")


@pytest.mark.parametrize(("pattern", "expected"), [
    ("*.py", ["[2 file names match '*.py']", "src/main.py", "src/util.py"]),
    ("**/*.md", ["[2 file names match '**/*.md']", "docs/alpha.md", "docs/notes/beta.md"]),
    ("docs/*/*.md", ["[1 file name matches 'docs/*/*.md']", "docs/notes/beta.md"]),
    ("BETA.*", []),  # a capital: case counts
])
def test_a_shell_wildcard_matches_file_names(tree: Path, pattern: str, expected: list[str]) -> None:
    error, text = search(tree, pattern=pattern)
    assert not error
    if expected:
        assert text.splitlines()[:len(expected)] == expected
    else:
        assert "file name" not in text
