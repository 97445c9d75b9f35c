"""mylm's layers, enforced: every import in mylm/ (at module level, inside functions, under TYPE_CHECKING, and
`importlib.import_module` of a constant) goes to the importer's own layer or below, and no modules import each
other in a cycle. The layer order is written down once, in LAYERS; docs/architecture.md draws it.

Tables of names imported on use (the provider registry's `module:Class` lines, the CLI's command table) are
data, as a plugin list is, and each names only modules of its own package."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

#: The layers, bottom to top. A module may import from its own layer and the ones below, never above. A name is
#: the module's first component under `mylm` (`tools` for `mylm/tools/shell.py`, `__init__` for the package
#: root); every module must have one, so a new package is placed on purpose. Each name is a package (a
#: folder), except the few modules loose at the top (TOP_LEVEL_MODULES).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("core", "_version")),
    ("protocol", ("protocol", "constrain", "models")),
    ("model access", ("llm", "providers", "prompts", "config", "testing")),
    ("capabilities", ("tools", "approval", "sandbox", "sessions")),
    # The loop; telemetry watches a run from beside it (its observer seam names the agent's hook types).
    ("agent", ("agent", "telemetry", "__init__")),
    ("front ends", ("batch", "serve", "evaluation", "delegate")),
    ("cli", ("cli", "__main__")),
)

#: The only modules loose in `mylm/`: the package root, `python -m mylm`, and the version (which any layer
#: may name without importing the root). Everything else lives in its layer's package: the folders are the
#: layers.
TOP_LEVEL_MODULES = frozenset({"__init__", "__main__", "_version"})

#: Imports against the order that are kept on purpose, each (importer, imported module) exactly, with why.
ALLOWED_UPWARD: Mapping[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One import statement's edge: `importer` (a module) needs `imported` (a module of the same package)."""

    importer: str
    imported: str
    line: int


def package_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package rooted at `root`, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def scan_imports(root: Path, package: str) -> list[Import]:
    """Every import of the package's own modules inside the package, wherever in a file it is written."""
    modules = package_modules(root, package)
    edges = []
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _targets(node, here, package, modules):
                edges.append(Import(name, target, getattr(node, "lineno", 0)))
    return edges


def _targets(node: ast.AST, here: str, package: str, modules: Mapping[str, Path]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = here.split(".")[: len(here.split(".")) - node.level + 1]
            origin = ".".join([*base, *([node.module] if node.module else [])])
        else:
            origin = node.module or ""
        # `from pkg import sub` imports the submodule `pkg.sub`; `from pkg.mod import name` imports `pkg.mod`.
        names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Attribute, ast.Name))
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        names = [node.args[0].value]
    else:
        return []
    return [_owner(n, modules) for n in names if n == package or n.startswith(package + ".")]


def _owner(name: str, modules: Mapping[str, Path]) -> str:
    """The module that `name` (a module, or a name inside one) lives in."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]]) -> int | None:
    """The index of the module's layer, from its first component under the package; None if it has none."""
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    return next((i for i, (_, names) in enumerate(layers) if key in names), None)


def upward_imports(edges: Iterable[Import], layers: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Each import that reaches a higher layer, described."""
    found = []
    for edge in edges:
        low, high = layer_of(edge.importer, layers), layer_of(edge.imported, layers)
        if low is not None and high is not None and high > low:
            found.append(
                f"{edge.importer}:{edge.line} imports {edge.imported} "
                f"({layers[low][0]} -> {layers[high][0]}, which is above it)"
            )
    return found


def cycles(edges: Iterable[Import]) -> list[frozenset[str]]:
    """The sets of modules that import each other in a cycle (strongly connected, more than one module)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set())
        graph.setdefault(edge.imported, set())
        if edge.importer != edge.imported:
            graph[edge.importer].add(edge.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    # Tarjan's algorithm, iterative (no recursion limit on a deep import chain).
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


MYLM = scan_imports(REPO_ROOT / "mylm", "mylm")


def test_layering_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in package_modules(REPO_ROOT / "mylm", "mylm") if layer_of(m, LAYERS) is None)
    assert not unplaced, f"give these modules a layer in LAYERS (tests/test_layering.py): {unplaced}"


def test_layering_imports_go_down_only() -> None:
    kept = {(e.importer, e.imported) for e in MYLM} & set(ALLOWED_UPWARD)
    assert kept == set(ALLOWED_UPWARD), f"these exceptions no longer happen; remove them: {set(ALLOWED_UPWARD) - kept}"
    violations = upward_imports((e for e in MYLM if (e.importer, e.imported) not in ALLOWED_UPWARD), LAYERS)
    assert not violations, "\n".join(violations)


def test_layering_no_import_cycles() -> None:
    found = [sorted(c) for c in cycles(MYLM)]
    assert not found, f"modules that import each other (function-level and TYPE_CHECKING imports count): {found}"


def test_layering_scanner_sees_every_kind_of_import() -> None:
    # The scan is only as good as what it finds: imports this repository is known to hold, of each kind.
    edges = {(e.importer, e.imported) for e in MYLM}
    assert ("mylm.agent.loop", "mylm.core.errors") in edges  # module level, relative
    assert ("mylm.cli.runner", "mylm.sandbox") in edges  # inside a function
    assert ("mylm", "mylm.agent.loop") in edges  # under TYPE_CHECKING


def test_layering_tables_imported_on_use_stay_in_their_package() -> None:
    # The scan reads them as data (see the module docstring); this keeps that true.
    from mylm.providers import REGISTRY

    assert all(target.startswith("mylm.providers.") for target in REGISTRY.values())
    cli = (REPO_ROOT / "mylm" / "cli" / "__init__.py").read_text()
    assert "import_module(f\"{__name__}.{module}\")" in cli  # commands are modules of mylm.cli only


# --------------------------------------------------------------------------- the checks catch what they should


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_layering_finds_a_planted_cycle_through_function_and_type_only_imports(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.high import High\n",
        "sub/__init__.py": "",
        "sub/high.py": "def f():\n    from pkg import low\n    return low\n",
        "alone.py": "import pkg.low\n",
    })
    edges = scan_imports(pkg, "pkg")
    assert cycles(edges) == [frozenset({"pkg.low", "pkg.sub.high"})]


def test_layering_finds_a_planted_upward_import(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "base.py": "import importlib\n\ndef late():\n    return importlib.import_module('pkg.top')\n",
        "top.py": "from . import base\n",
    })
    layers = (("bottom", ("base",)), ("top", ("top", "__init__")))
    violations = upward_imports(scan_imports(pkg, "pkg"), layers)
    assert len(violations) == 1 and violations[0].startswith("pkg.base:4 imports pkg.top (bottom -> top")
    assert cycles(scan_imports(pkg, "pkg")) == [frozenset({"pkg.base", "pkg.top"})]


def test_layering_architecture_page_draws_the_same_layers() -> None:
    # The order is written down once (LAYERS); the page must show it, not a copy that drifts.
    page = (REPO_ROOT / "docs" / "architecture.md").read_text()
    for name, members in LAYERS:
        shown = ", ".join(m for m in members if not m.startswith("_"))
        line = re.compile(rf"^{re.escape(f'{name}: {shown}')}(\s|$)", re.MULTILINE)
        assert line.search(page), f"docs/architecture.md does not show the layer '{name}: {shown}'"


@pytest.mark.parametrize("name", [m for _, members in LAYERS for m in members if m not in TOP_LEVEL_MODULES])
def test_layering_names_are_packages(name: str) -> None:
    # A name in LAYERS is a folder of mylm/: a typo, or a module left loose at the top, fails here.
    assert (REPO_ROOT / "mylm" / name / "__init__.py").is_file(), f"mylm/{name}/ is not a package"


def test_layering_only_the_root_modules_are_loose_at_the_top() -> None:
    loose = {path.stem for path in (REPO_ROOT / "mylm").glob("*.py")}
    stray = sorted(loose - TOP_LEVEL_MODULES)
    assert not stray, f"put these modules in their layer's package (see LAYERS): {stray}"
    assert TOP_LEVEL_MODULES <= {m for _, members in LAYERS for m in members}
