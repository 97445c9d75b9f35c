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


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_docs_readme_links_resolve() -> None:
    # mkdocs --strict checks the links inside docs/; the README lives outside the site, so it is checked here.
    readme = REPO_ROOT / "README.md"
    for target in _LINK.findall(readme.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = (readme.parent / path) if path else readme
        assert page.exists(), f"README links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", page.read_text(), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"README links to {target}: no such heading"
