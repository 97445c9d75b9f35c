"""The public surface is kept by tests, not by hand: every name in `__all__` of mylm and of each public subpackage
resolves, `mylm.__all__` is its one export table, and docs/api.md documents exactly those names.

docs/api.md documents a module in a section whose heading is the module's name in backticks (`` ## `mylm.tools` ``),
holding a table whose header is `| name | what it is |`; each row's first cell starts with the name in backticks
(`` `run_batch(tasks, ...)` `` documents `run_batch`)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mylm
from tests.support import REPO_ROOT

#: The modules whose `__all__` is public API; every other module is internal (used by the CLI, or a part of one of
#: these). `mylm.approval` is the CLI's and batch's policy: its entry point `decide` is reached through them.
PUBLIC = (
    "mylm", "mylm.agent.step", "mylm.protocol", "mylm.providers", "mylm.tools", "mylm.testing", "mylm.batch",
    "mylm.sandbox",
)
#: Public modules another branch is giving an `__all__` and a section (issue 23); checked as soon as it has one.
ANNOUNCED: dict[str, str] = {}

API_PAGE = REPO_ROOT / "docs" / "api.md"
_SECTION = re.compile(r"^#{2,3} `(mylm(?:\.\w+)*)`\s*$", re.MULTILINE)
_ROW = re.compile(r"^\| `([A-Za-z_]\w*)[^|]*\|", re.MULTILINE)


def documented(page: str) -> dict[str, set[str]]:
    """Module -> the names its section's `| name | what it is |` tables list."""
    found: dict[str, set[str]] = {}
    headings = list(_SECTION.finditer(page))
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(page)
        body = page[heading.end() : end]
        # The section ends at the next heading of the same level or higher, whatever it is.
        level = len(heading.group(0)) - len(heading.group(0).lstrip("#"))
        stop = re.search(rf"^#{{1,{level}}} ", body, re.MULTILINE)
        body = body[: stop.start()] if stop else body
        names: set[str] = set()
        for table in re.finditer(r"^\| name \| what it is \|\n\|[-| ]+\|\n((?:\|.*\n?)*)", body, re.MULTILINE):
            names |= set(_ROW.findall(table.group(1)))
        found[heading.group(1)] = names
    return found


def exported(module: str) -> list[str] | None:
    """The module's `__all__`, or None when it has none."""
    names = getattr(importlib.import_module(module), "__all__", None)
    return None if names is None else list(names)


@pytest.mark.parametrize("module", PUBLIC)
def test_public_surface_every_exported_name_resolves(module: str) -> None:
    names = exported(module)
    if names is None:
        assert module in ANNOUNCED, f"{module} is public but has no __all__"
        pytest.skip(f"{module} has no __all__ yet: {ANNOUNCED[module]}")
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name) is not None, f"{module}.{name}"
    assert set(names) <= set(dir(imported))


@pytest.mark.parametrize("module", PUBLIC)
def test_public_surface_api_page_documents_exactly_the_exports(module: str) -> None:
    names = exported(module)
    if names is None:
        pytest.skip(f"{module} has no __all__ yet: {ANNOUNCED[module]}")
    docs = documented(API_PAGE.read_text())
    assert module in docs, f"docs/api.md has no section '## `{module}`' with a '| name | what it is |' table"
    assert not set(names) - docs[module], f"exported by {module} but not in docs/api.md: {set(names) - docs[module]}"
    assert not docs[module] - set(names), f"in docs/api.md under {module} but not exported: {docs[module] - set(names)}"


def test_public_surface_api_page_documents_no_other_module() -> None:
    extra = set(documented(API_PAGE.read_text())) - set(PUBLIC)
    assert not extra, f"docs/api.md has a reference section for {extra}: add it to PUBLIC, or drop the section"


def test_public_surface_root_exports_come_from_one_table() -> None:
    assert mylm.__all__ == list(mylm._EXPORTS)
    for name, module in mylm._EXPORTS.items():
        assert getattr(importlib.import_module(module), name) is getattr(mylm, name), name
    # Type checkers read the TYPE_CHECKING block instead of __getattr__: it must say the same, name for name.
    tree = ast.parse(Path(mylm.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    static = {
        alias.asname: f"mylm.{node.module}"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    }
    assert static == mylm._EXPORTS


def test_public_surface_names_the_docs_use_are_exported_where_they_say() -> None:
    # Issue 23 found these presented as public by the docs, but importable only from where the docs did not say.
    from mylm import TextEvent, ToolCallEvent, builtin_tools, create_llm
    from mylm.providers import Endpoint
    from mylm.providers import create_llm as providers_create_llm
    from mylm.testing import ScriptedLLM

    assert create_llm is providers_create_llm and mylm.Endpoint is Endpoint
    assert builtin_tools.__module__ == "mylm.tools.builtin" and ScriptedLLM.__module__ == "mylm.testing"
    assert {TextEvent.type, ToolCallEvent.type} == {"text", "tool_call"}


def test_public_surface_import_mylm_loads_nothing_else(subprocess_env: dict[str, str]) -> None:
    # Every export is imported on first use: `import mylm` (and so `mylm --help`) pays for none of them.
    probe = "import sys, mylm; print(sorted(m for m in sys.modules if m.startswith('mylm')))"
    out = subprocess.run([sys.executable, "-c", probe], env=subprocess_env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['mylm', 'mylm._version']"


def test_public_surface_reads_only_the_name_tables_of_a_section() -> None:
    page = """# API

## `Agent(...)`

| argument | default |
|---|---|
| `llm` | required |

## `mylm.demo`

Text with `code`.

| name | what it is |
|---|---|
| `run(x, *, y=1)` | runs |
| `Thing` | a thing |

| argument | meaning |
|---|---|
| `x` | not a name of the module |

## Unrelated

| name | what it is |
|---|---|
| `Elsewhere` | under another heading |
"""
    assert documented(page) == {"mylm.demo": {"run", "Thing"}}


def test_public_surface_every_event_type_is_exported() -> None:
    # A new event is public the moment the loop emits it: add it to _EXPORTS and to docs/api.md's `mylm` table.
    from typing import get_args

    from mylm.core.types import Event

    missing = {event.__name__ for event in get_args(Event)} - set(mylm.__all__)
    assert not missing, (
        f"events not exported from mylm: {missing}; add each to _EXPORTS and the TYPE_CHECKING block of "
        "mylm/__init__.py, and a row to the `mylm` table of docs/api.md"
    )
