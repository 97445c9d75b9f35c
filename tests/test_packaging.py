"""A built wheel carries the templates and the console script, and works outside the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow

CHECK = """
import sys, mylm, mylm.prompts as p
from pathlib import Path
from mylm.tools.shell import shell_tool
assert mylm.__file__.startswith(sys.argv[1]), mylm.__file__
d = p.packaged_prompts_dir()
assert str(d).startswith(sys.argv[1]), d
text = p.PromptLoader.default().render("system.j2", tools=p.tool_view([shell_tool(Path.cwd())]), multiple_calls=False,
                                       instructions="", platform="x", cwd="/")
assert "<name>execute_command</name>" in text
from mylm.models import registry
assert str(registry._PACKAGED).startswith(sys.argv[1]) and registry.lookup("qwen3:8b").context_window == 32768
print(d)
"""


def test_packaging_wheel_installs_templates_outside_the_checkout(tmp_path: Path) -> None:
    pytest.importorskip("wheel", reason="building a wheel needs the 'wheel' package (installed by .ci/run)")
    source = tmp_path / "src"
    shutil.copytree(
        REPO_ROOT, source,
        ignore=shutil.ignore_patterns(".git", ".venv", ".ci", "build", "dist", "*.egg-info", "__pycache__",
                                      ".pytest_cache", ".hypothesis", "tests"),
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        check=True, capture_output=True,
    )
    (wheel,) = dist.glob("mylm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "mylm/_prompts/system.j2" in names and "mylm/_prompts/observation.j2" in names
    assert "mylm/_prompts/tool_required.j2" in names and "mylm/models/known.toml" in names
    assert "mylm/_evals/suite.toml" in names  # the `mylm eval` suite ships as package data, like the prompts
    assert {"mylm/constrain/protocol.py", "mylm/evaluation/runner.py", "mylm/providers/registry.py"} <= set(names)
    # Every package in the tree ships (setup.cfg lists them by hand: a new one missed there broke installs).
    packages = {str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "mylm").rglob("__init__.py")}
    assert packages <= set(names), sorted(packages - set(names))
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "mylm = mylm.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", CHECK, str(site)], cwd=elsewhere, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(site / "mylm" / "_prompts")


def test_engine_test_skips_say_the_command_and_the_real_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 20: right after installing the `local` extra, 30 engine tests said "the local engine is not installed
    # (gguf is missing)": the engine was there; gguf, which only the tests need, was not.
    import importlib.util

    from tests.support import engine_missing

    present = {"llama_cpp"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name in present else None)
    assert engine_missing() == (
        "the engine is installed, but gguf and numpy, which the engine tests need, are not: run "
        "`pip install -e '.[test]'` (or `bash scripts/install_engine.sh`)"
    )
    present.clear()
    assert engine_missing() == (
        "the local inference engine (llama-cpp-python) is not installed: run `bash scripts/install_engine.sh`"
    )
    present.update({"llama_cpp", "gguf", "numpy"})
    assert engine_missing() is None


def test_the_test_extra_has_what_the_engine_tests_need() -> None:
    import configparser

    from tests.support import REPO_ROOT

    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    test = config["options.extras_require"]["test"]
    needs = {line.split(">")[0].split("<")[0].split("=")[0].strip().lower()
             for line in test.splitlines() if line.strip() and not line.strip().startswith("#")}
    # What tests/providers/engine_support.py imports besides the engine itself.
    assert {"gguf", "uvicorn", "fastapi", "sse-starlette", "starlette-context", "pydantic-settings"} <= needs
