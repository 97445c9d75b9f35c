"""The three file tools the `llm` CLI (Simon Willison's) gets in scripts/drive_clients.py and
tests/serve/test_serve_frameworks.py: `llm --functions scripts/clients/llm_tools.py`, run in the project's
directory. Each call is printed on stderr as `tool: NAME(ARGUMENT)`, as the other drivers print theirs.

llm offers every callable the file defines or imports as a tool (`from pathlib import Path` gave the model a tool
named `Path`): only modules are imported here."""

from __future__ import annotations

import pathlib
import sys


def list_files() -> str:
    """List the files of the project."""
    print("tool: list_files()", file=sys.stderr)
    return "\n".join(sorted(p.name for p in pathlib.Path.cwd().iterdir())) or "(no files)"


def read_file(path: str) -> str:
    """Read a file of the project and return its text."""
    print(f"tool: read_file({path})", file=sys.stderr)
    target = (pathlib.Path.cwd() / path).resolve()
    if not target.is_relative_to(pathlib.Path.cwd().resolve()) or not target.is_file():
        return f"error: no file named {path!r} in the project"
    return target.read_text(encoding="utf-8")


def write_file(path: str, content: str) -> str:
    """Write content to a file of the project, replacing it if it exists."""
    print(f"tool: write_file({path})", file=sys.stderr)
    target = (pathlib.Path.cwd() / path).resolve()
    if not target.is_relative_to(pathlib.Path.cwd().resolve()) or target.is_dir():
        return f"error: {path!r} is not a file path in the project"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"wrote {len(content)} characters to {path}"
