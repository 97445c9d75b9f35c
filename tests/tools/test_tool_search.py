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
