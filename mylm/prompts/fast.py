"""Renderers that give exactly what a packaged template renders to, for the common case, without Jinja's
render (~15 µs, plus the watchdog's timing of it): one observation is rendered every step of a run.

Each is keyed on the template's whole source text, as the loader read it when it compiled the template: a
template the user edited (or any other file) is not this source, and Jinja renders it. A renderer returns None
when the values fall outside the case it covers (a cut output, a value of another type), and the caller renders
the template; so does any exception, and the template's own render then raises it with its file and line.
`tests/test_prompts_fast.py` compares each renderer's text with Jinja's over generated values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: `prompts/observation.j2` as packaged (a test keeps the two the same).
OBSERVATION_SOURCE = (
    "{#- A tool's result, sent back as a user message. Variables: tool, output (raw text; the `observation` filter\n"
    '    defuses protocol tags and control characters in it), cut (characters removed from the middle, 0 if none),\n'
    '    handle (a key for the read_output tool, which pages through the full output, or none). -#}\n'
    '<observation>\n'
    '{{ output | observation }}\n'
    '{% if cut %}\n'
    '[{{ "{:,}".format(cut) }} characters were cut from the middle of this output.{% if handle %} To read them, '
    'call the read_output tool with {"handle": "{{ handle }}", "offset": N} (and "limit" for the page size).'
    '{% else %} Run a narrower command to see them.{% endif %}]\n'
    '{% endif %}\n'
    '</observation>\n'
)


def _observation(filters: Mapping[str, Callable[..., Any]], variables: Mapping[str, Any]) -> str | None:
    """The packaged observation template with nothing cut (`cut` 0 or None): its `{% if cut %}` block renders
    nothing, and `tool` and `handle` are not read. Jinja would write the filter's value through `str`."""
    if "output" not in variables or "cut" not in variables:
        return None  # undefined: Jinja's StrictUndefined error, from the template's own render
    output, cut = variables["output"], variables["cut"]
    if type(output) is not str or not (cut is None or (type(cut) is int and cut == 0)):
        return None
    # The loader's own filter (size-bounded, as the template would call it).
    return "<observation>\n" + str(filters["observation"](output)) + "\n</observation>"


#: Template source -> its renderer.
RENDERERS: dict[str, Callable[[Mapping[str, Callable[..., Any]], Mapping[str, Any]], str | None]] = {
    OBSERVATION_SOURCE: _observation,
}
