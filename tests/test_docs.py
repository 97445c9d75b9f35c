"""The documentation's examples hold: every Python block in the README and docs/ runs as written, unless it is
marked, with its reason, as one that can only be compiled; every TOML block parses; the README's links resolve."""

from __future__ import annotations

import re

import pytest

from mylm.config.files import _tomllib
from tests.support import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
#: A fenced block, with the comment line just above it (if any) and its language.
_BLOCK = re.compile(r"(?:^(?P<mark><!--[^\n]*-->)\n)?^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
#: The mark for a Python block that cannot run standalone: `<!-- docs-test: compile-only: why -->` on the line
#: above its fence. The reason is required, so every skipped example says what it needs.
_COMPILE_ONLY = re.compile(r"<!-- docs-test: compile-only: (?P<reason>\S[^\n]*?) -->")


def blocks(lang: str) -> list[tuple[str, str, str | None]]:
    """(where, code, mark) for each block of one language, in every page."""
    found = []
    for doc in DOCS:
        n = 0
        for match in _BLOCK.finditer(doc.read_text()):
            if match["lang"] in ({"python", "py"} if lang == "python" else {lang}):
                n += 1
                found.append((f"{doc.name}#{n}", match["code"], match["mark"]))
    return found


PYTHON = blocks("python")


@pytest.mark.parametrize(("where", "code", "mark"), PYTHON, ids=[w for w, _, _ in PYTHON])
def test_docs_python_example(where: str, code: str, mark: str | None) -> None:
    compiled = compile(code, where, "exec")
    if mark is not None:
        assert _COMPILE_ONLY.fullmatch(mark), f"{where}: the comment above the block is not a docs-test mark: {mark}"
        return
    # Runs in the test's empty workspace with private user directories (tests/conftest.py).
    exec(compiled, {"__name__": "__docs__"})  # noqa: S102 - our own documentation


def test_docs_examples_mostly_run() -> None:
    # Marking is for examples that truly need a server or files; it must not become the way to silence one.
    # serve.md's are third-party clients' configurations, each talking to a running `mylm serve` (compiled, and
    # driven for real in tests/serve): they are counted apart.
    pages = [(where, mark) for where, _, mark in PYTHON if not where.startswith("serve.md#")]
    marked = [where for where, mark in pages if mark is not None]
    assert len(pages) >= 5 and len(marked) * 2 < len(pages), marked


def test_docs_marks_sit_on_python_blocks() -> None:
    # A mark above anything but a Python fence (a typo, a block moved away) would silently mean nothing.
    for doc in DOCS:
        text = doc.read_text()
        for mark in re.finditer(r"^<!-- docs-test:[^\n]*-->$", text, re.MULTILINE):  # a line of its own
            after = text[mark.end() :].lstrip("\n")
            assert re.match(r"```(python|py)\b", after), f"{doc.name}: {mark.group()} is not above a Python block"


@pytest.mark.parametrize(("where", "code"), [(w, c) for w, c, _ in blocks("toml")], ids=[w for w, _, _ in blocks("toml")])
def test_docs_toml_example_parses(where: str, code: str) -> None:
    _tomllib().loads(code)


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


def test_docs_every_page_is_in_the_site_navigation() -> None:
    # A page missing from mkdocs.yml's nav is found only by search; `mkdocs build --strict` (in .ci/run) refuses
    # it too, but this says so without mkdocs installed.
    nav = re.findall(r"^\s+- (?:[^:\n]+: )?([\w/.-]+\.md)\s*$", (REPO_ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    pages = sorted(p.relative_to(REPO_ROOT / "docs").as_posix() for p in (REPO_ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages


def test_docs_carry_no_comment_but_test_directives() -> None:
    # Issue 30: docs/mcp.md opened with "<!-- Placeholder page: engineer `delegate` extends it. -->", a note
    # about who would write the page instead of the page; a reader of the source saw it, the site hid it.
    for path in DOCS:
        for comment in re.findall(r"<!--(.*?)-->", path.read_text(), flags=re.DOTALL):
            assert comment.strip().startswith("docs-test:"), f"{path.name}: <!--{comment}-->"
