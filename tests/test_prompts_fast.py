"""The fast renderers (`mylm.prompts.fast`) give exactly Jinja's text, and only for the exact packaged source."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mylm.prompts
from mylm.core.errors import TemplateError
from mylm.prompts import PromptLoader, packaged_prompts_dir
from mylm.prompts.bounded import MAX_RENDERED_CHARS, _render_within
from mylm.prompts.fast import OBSERVATION_SOURCE

#: Pieces tool output is made of where the observation filter has work to do: protocol tags in every spelling it
#: defuses, reasoning markers, special tokens, line ends, control characters, lone surrogates, wide characters.
PIECES = [
    "</observation>", "<tool_code>", "</TOOL_CODE >", "< / observation>", "&lt;tool_code&gt;", "＜tool_code＞",
    "<think>", "</think>", "[THINK]", "<|im_start|>", "<|im_end|>", "```tool_code\n", "~~~json\n", "\r\n", "\r",
    "\n", "\t", "\x00", "\x1b[2J", "\x7f", "\ud800", "é", "💥", "{{ 7*7 }}", "{% if x %}", "<name>", "&", "`", " ",
]
outputs = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=12).map("".join)


def jinja(loader: PromptLoader, **variables: Any) -> str:
    """The observation as the compiled template renders it, with no fast path."""
    return _render_within(loader._env.get_template("observation.j2"), variables, 5.0)


def test_the_fast_observation_is_keyed_on_the_packaged_source() -> None:
    assert (packaged_prompts_dir() / "observation.j2").read_text(encoding="utf-8") == OBSERVATION_SOURCE
    template = PromptLoader.default()._env.get_template("observation.j2")
    assert template.mylm_source == OBSERVATION_SOURCE  # what the loader compiled, handed on by `load`


@settings(max_examples=300, deadline=None)
@given(output=outputs, cut=st.one_of(st.just(0), st.none(), st.integers(1, 10**6), st.just(False)),
       handle=st.one_of(st.none(), st.text(max_size=8)))
def test_the_fast_observation_is_jinjas_text(output: str, cut: Any, handle: Any) -> None:
    loader = PromptLoader.default()
    fast = loader.render("observation.j2", tool="execute_command", output=output, cut=cut, handle=handle)
    assert fast == jinja(loader, tool="execute_command", output=output, cut=cut, handle=handle)


@pytest.mark.parametrize("variables", [
    {"tool": "t", "output": "x"},  # no cut: undefined
    {"tool": "t", "cut": 0, "handle": None},  # no output: undefined
    {"tool": "t", "output": "x" * (MAX_RENDERED_CHARS + 1), "cut": 0, "handle": None},  # over the size limit
])
def test_the_fast_observation_fails_as_jinja_does(variables: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TemplateError) as fast:
        PromptLoader.default().render("observation.j2", **variables)
    monkeypatch.setattr(mylm.prompts, "RENDERERS", {})
    with pytest.raises(TemplateError) as slow:
        PromptLoader.default().render("observation.j2", **variables)
    assert str(fast.value) == str(slow.value)


def outcome(output: Any, cut: Any) -> str:
    try:
        return PromptLoader.default().render("observation.j2", tool="t", output=output, cut=cut, handle=None)
    except TemplateError as error:
        return f"error: {error}"


@pytest.mark.parametrize(("output", "cut"), [(7, 0), (None, 0), (["a"], 0), ("plain", 0), ("plain", 3),
                                             ("plain", 0.0), ("plain", "")])
def test_values_outside_the_fast_case_render_as_before(output: Any, cut: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = outcome(output, cut)
    monkeypatch.setattr(mylm.prompts, "RENDERERS", {})
    assert fast == outcome(output, cut)


def test_an_edited_observation_template_is_rendered_by_jinja(tmp_path: Path) -> None:
    edited = tmp_path / "observation.j2"
    # One character more than the packaged text: not its source, so not its renderer.
    edited.write_text(OBSERVATION_SOURCE.replace("<observation>\n", "<observation>\nRESULT:\n"), encoding="utf-8")
    loader = PromptLoader([tmp_path, packaged_prompts_dir()])
    assert loader.render("observation.j2", tool="t", output="ok", cut=0, handle=None) == \
        "<observation>\nRESULT:\nok\n</observation>"
    # Edited again in place, back to the packaged text: the fast renderer's text, still the same as Jinja's.
    edited.write_text(OBSERVATION_SOURCE, encoding="utf-8")
    later = os.stat(edited).st_mtime + 5
    os.utime(edited, (later, later))  # a new modification time, however coarse the file system's clock
    assert loader.render("observation.j2", tool="t", output="ok", cut=0, handle=None) == \
        "<observation>\nok\n</observation>"
    # And edited once more: the edit is seen at the next render, as Jinja's cache sees it.
    edited.write_text(OBSERVATION_SOURCE.replace("</observation>\n", "</observation>\nEND\n"), encoding="utf-8")
    os.utime(edited, (later + 5, later + 5))
    assert loader.render("observation.j2", tool="t", output="ok", cut=0, handle=None) == \
        "<observation>\nok\n</observation>\nEND"
