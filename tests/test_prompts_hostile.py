"""Hostile templates (issue 13, item 10): recursion, doubling strings and endless loops end in one TemplateError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mylm.core.errors import TemplateError
from mylm.prompts import PromptLoader
from tests.cli.cli_support import write_script

HOSTILE = {
    "macro": ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "nested too deeply"),
    "include": ('start {% include "system.j2" %}', "nested too deeply"),
    "extends": ('{% extends "system.j2" %}', "nested too deeply"),
    "doubling": (
        '{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}',
        "exceed the size limit",
    ),
    "doubling-macro": (
        '{% macro d(s, n) %}{% if n %}{{ d(s + s, n - 1) }}{% else %}{{ s }}{% endif %}{% endmacro %}{{ d("x", 40) }}',
        "exceed the size limit",
    ),
    "doubling-join": (
        '{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = [ns.s, ns.s]|join %}{% endfor %}',
        "over the size limit",
    ),
    "huge-width": ('{{ "x"|center(1000000000) }}', "too large"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_is_one_template_error(name: str, tmp_path: Path) -> None:
    source, message = HOSTILE[name]
    (tmp_path / "system.j2").write_text(source)
    with pytest.raises(TemplateError, match=message) as caught:
        PromptLoader([tmp_path]).render("system.j2")
    assert str(caught.value).startswith(str(tmp_path / "system.j2"))


def test_a_render_that_runs_too_long_is_stopped(tmp_path: Path) -> None:
    (tmp_path / "slow.j2").write_text("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}")
    loader = PromptLoader([tmp_path])
    loader.render_seconds = 0.2
    with pytest.raises(TemplateError, match="still rendering after 0.2 s"):
        loader.render("slow.j2")
    (tmp_path / "quick.j2").write_text("fine")
    assert loader.render("quick.j2") == "fine"  # no stray stop arrives later


@pytest.mark.parametrize("name", ["macro", "include", "doubling"])
def test_hostile_system_template_ends_the_cli_with_one_line(
    name: str, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "system.j2").write_text(HOSTILE[name][0])
    env = dict(subprocess_env, MYLM_SCRIPTED_LLM=str(write_script(tmp_path / "s.json", ["never"])))
    done = subprocess.run(
        [sys.executable, "-m", "mylm", "ask", "--prompts", str(prompts), "x"],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("mylm: error: ")


AFTER_OVERRUN = """
import sys, pathlib, tempfile
from mylm.core.errors import TemplateError
from mylm.prompts import PromptLoader
folder = pathlib.Path(tempfile.mkdtemp())
(folder / "slow.j2").write_text("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}")
loader = PromptLoader([folder])
loader.render_seconds = 0.1
try:
    loader.render("slow.j2")
except TemplateError:
    pass
sys.settrace(lambda frame, event, arg: None)
sum(range(10))
sys.settrace(None)
print("traced")
"""


def test_an_overrun_leaves_the_interpreter_sound(subprocess_env: dict[str, str]) -> None:
    """A stopped render must not leave CPython's eval breaker signalled: a trace function (a debugger, coverage)
    then spun for ever. In a child process, so a regression fails by its timeout instead of hanging the suite."""
    done = subprocess.run([sys.executable, "-c", AFTER_OVERRUN], capture_output=True, text=True, timeout=60,
                          env=subprocess_env)
    assert done.stdout.strip() == "traced", done.stderr
