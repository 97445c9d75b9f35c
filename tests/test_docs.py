"""The documentation's Python examples run as written (those that need a live endpoint are only compiled)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: Examples that talk to a real endpoint or server are compiled, not run.
_NEEDS_ENDPOINT = ("create_llm(", "http://", "https://")


def examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for i, match in enumerate(_BLOCK.finditer(doc.read_text())):
            found.append((f"{doc.name}#{i + 1}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _ in examples()])
def test_docs_python_example(where: str, code: str, tmp_path: Path) -> None:
    compiled = compile(code, where, "exec")
    if any(marker in code for marker in _NEEDS_ENDPOINT):
        return
    exec(compiled, {"__name__": "__docs__"})  # noqa: S102 - our own documentation
