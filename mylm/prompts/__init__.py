"""Prompt templates: where they are looked up, and rendering them in a sandboxed, strict Jinja environment
(`bounded`: the limits on size, time and files a render runs under)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import TemplateError
from ..core.paths import config_dir
from ..protocol.defuse import defuse_correction
from ..protocol.defuse import neutralise as neutralise  # re-exported: templates and callers use it
from .bounded import (
    MAX_RENDER_SECONDS,
    MAX_RENDERED_CHARS,
    _bounded_call,
    _bounded_sandbox,
    _contained_loader,
    _Overrun,
    _render_within,
    _shared_bytecode,
    contained,
)
from .fast import RENDERERS

if TYPE_CHECKING:
    from jinja2 import TemplateNotFound, TemplateSyntaxError, UndefinedError
    from jinja2.exceptions import SecurityError

_PROMPTS_PACKAGE = "mylm._prompts"
_TEMPLATE_SUFFIXES = (".j2",)


def packaged_prompts_dir() -> Path:
    """The directory of the default templates: the installed data package, or `prompts/` in a checkout."""
    spec = importlib.util.find_spec(_PROMPTS_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location, "system.j2").is_file():
                return Path(location)
    checkout = Path(__file__).resolve().parent.parent.parent / "prompts"
    if (checkout / "system.j2").is_file():
        return checkout
    raise TemplateError("the default prompt templates are missing from this installation; reinstall mylm")


def project_prompts_dir(cwd: str | os.PathLike[str] | None = None) -> Path:
    """The project's template directory, `./.mylm/prompts`: used only once the user trusts the project."""
    return Path(cwd or os.getcwd()) / ".mylm" / "prompts"


def default_search_path(
    prompts_dir: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    trusted: bool | None = None,
    origin: str = "--prompts",
) -> list[tuple[str, Path]]:
    """The template lookup order, highest priority first, each with the reason it is on the path (`origin` names
    where `prompts_dir` came from: the flag, `$MYLM_PROMPTS` or the config file).

    `./.mylm/prompts` is on it only for a `trusted` project (None: as the user config and `MYLM_TRUST_PROJECT`
    say), because a repository's templates decide what the model is told (THREATS T10, T13).
    """
    env = os.environ if environ is None else environ
    path: list[tuple[str, Path]] = []
    if prompts_dir:
        path.append((origin, Path(prompts_dir)))
    if env.get("MYLM_PROMPTS") and not (prompts_dir and Path(env["MYLM_PROMPTS"]) == Path(prompts_dir)):
        path.append(("$MYLM_PROMPTS", Path(env["MYLM_PROMPTS"])))
    if _trusted(trusted, environ, cwd):
        path.append(("project", project_prompts_dir(cwd)))
    path.append(("user", config_dir() / "prompts"))
    path.append(("default", packaged_prompts_dir()))
    return path


def _trusted(trusted: bool | None, environ: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> bool:
    if trusted is not None:
        return trusted
    from ..config import project_trust

    return project_trust(Path(cwd) if cwd else None, environ) is not None


def dump_json(value: Any, indent: int | None = None, *, compact: bool = False) -> str:
    """JSON as templates show it: UTF-8 kept readable, nothing HTML-escaped (`compact`: no spaces)."""
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=(",", ":") if compact else None)


class PromptLoader:
    """Renders named templates found along a search path; a file earlier on the path overrides a later one."""

    def __init__(
        self,
        search_path: Sequence[tuple[str, Path]] | Sequence[Path],
        *,
        ignored: Sequence[tuple[str, Path]] = (),
    ) -> None:
        from jinja2 import StrictUndefined

        entries = [e if isinstance(e, tuple) else ("custom", Path(e)) for e in search_path]
        self.search_path: tuple[tuple[str, Path], ...] = tuple(entries)
        #: Directories that hold templates but are not searched (an untrusted project's), for the CLI to report.
        self.ignored: tuple[tuple[str, Path], ...] = tuple(ignored)
        self._env = _bounded_sandbox()(
            loader=_contained_loader()([str(p) for _, p in entries if p.is_dir()]),
            undefined=StrictUndefined,
            autoescape=False,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            bytecode_cache=_shared_bytecode(),
        )
        self._env.filters["tojson"] = dump_json
        self._env.filters["observation"] = neutralise
        self._env.filters["correction"] = defuse_correction
        self._env.filters = {name: _bounded_call(f) for name, f in self._env.filters.items()}
        #: Seconds a single render may take before it is stopped.
        self.render_seconds = MAX_RENDER_SECONDS
        #: `render_kept`'s texts by name and values, each with the compiled template they came from.
        self._kept: dict[tuple[Any, ...], tuple[Any, tuple[str, ...]]] = {}
        #: Per compiled template: whether its text depends on its variables alone (no include, no `lipsum`).
        self._pure: dict[Any, bool] = {}

    @classmethod
    def default(
        cls,
        prompts_dir: str | os.PathLike[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        trusted: bool | None = None,
        origin: str = "--prompts",
    ) -> PromptLoader:
        """A loader with the standard lookup order: `--prompts`, `$MYLM_PROMPTS`, `./.mylm/prompts` (only if the
        project is `trusted`; None: as `trusted_projects` and `MYLM_TRUST_PROJECT` say), user config dir, defaults.
        `origin` labels `prompts_dir` (`$MYLM_PROMPTS`, `config` when the setting came from there)."""
        trusted = _trusted(trusted, environ, cwd)
        project = project_prompts_dir(cwd)
        ignored = [("project", project)] if not trusted and project.is_dir() else []
        search = default_search_path(prompts_dir, environ=environ, cwd=cwd, trusted=trusted, origin=origin)
        return cls(search, ignored=ignored)

    @property
    def project(self) -> Path | None:
        """The project's template directory when it is searched (the project is trusted and has one), else None."""
        return next((p for origin, p in self.search_path if origin == "project" and p.is_dir()), None)

    def find(self, name: str) -> tuple[str, Path] | None:
        """Where the template `name` comes from: (reason on the search path, file), or None.

        A `TemplateError` if that file leads outside its directory: it would be refused when rendered.
        """
        for origin, directory in self.search_path:
            candidate = directory / name
            if candidate.is_file():
                contained(directory, candidate)
                return origin, candidate
        return None

    def names(self) -> list[str]:
        """Every template name available on the search path, sorted."""
        found: set[str] = set()
        for _, directory in self.search_path:
            if directory.is_dir():
                for file in directory.rglob("*"):
                    if file.is_file() and file.suffix in _TEMPLATE_SUFFIXES:
                        found.add(file.relative_to(directory).as_posix())
        return sorted(found)

    def render(self, name: str, /, **variables: Any) -> str:
        """Render template `name`; any problem becomes a `TemplateError` naming the file and line.

        Rendering is bounded: recursion (a macro, include or extends that calls itself), the size of every
        string built, and the time taken (`render_seconds`) each end it with a `TemplateError`, never a hang.
        """
        return self._render(name, variables)

    def render_kept(self, name: str, variable_sets: Sequence[Mapping[str, str]]) -> tuple[str, ...]:
        """`render(name, **variables)` for each of `variable_sets`: text rendered again and again with the same
        values (the probes' worked questions, five renders a served tool call). The texts are kept and handed
        out again while the compiled template is the same, for one lookup of it. An edit is still seen at the
        next call, as by `render`: Jinja checks the file's modification time at that lookup and compiles it
        afresh, and a new compiled template never matches the kept one. Templates that include others (whose
        edits that lookup would not see) or call `lipsum` (random text) are rendered each time."""
        key = (name, *(tuple(sorted(variables.items())) for variables in variable_sets))
        template = self._lookup(name)
        kept = self._kept.get(key)
        if kept is not None and kept[0] is template:
            return kept[1]
        texts = tuple(self._render(name, variables, template) for variables in variable_sets)
        if self._depends_on_variables_alone(name, template):
            if len(self._kept) >= 64:
                self._kept.clear()
            self._kept[key] = (template, texts)
        return texts

    def _lookup(self, name: str) -> Any:
        """The compiled template `name` (afresh if its file changed), or None if it cannot be loaded (then
        rendering it raises the `TemplateError` that says why)."""
        from jinja2 import TemplateError as JinjaError

        try:
            return self._env.get_template(name)
        except (JinjaError, OSError, ValueError):
            return None

    def _render(self, name: str, variables: Mapping[str, Any], template: Any = None) -> str:
        """Render `name` (`template`: its compiled template, just looked up)."""
        not_found, syntax_error, undefined_error, security_error = _jinja_errors()
        try:
            if template is None:
                template = self._env.get_template(name)
            fast = self._fast(template, variables)
            text: str = fast if fast is not None else _render_within(template, variables, self.render_seconds)
        except not_found as error:
            where = ", ".join(str(p) for _, p in self.search_path)
            raise TemplateError(f"template {error.name!r} not found (looked in {where})") from None
        except syntax_error as error:
            raise TemplateError(f"{error.filename or name}:{error.lineno}: {error.message}") from None
        except undefined_error as error:
            raise TemplateError(f"{self._where(name, error)}: {error.message}") from None
        except security_error as error:
            raise TemplateError(f"{self._where(name, error)}: unsafe template: {error}") from None
        except RecursionError as error:
            raise TemplateError(
                f"{self._where(name, error)}: nested too deeply (a macro, include or extends that calls "
                "itself?)"
            ) from None
        except _Overrun:
            raise TemplateError(
                f"{self._where(name)}: still rendering after {self.render_seconds:g} s; stopped (a loop too "
                "large?)"
            ) from None
        except MemoryError:
            raise TemplateError(f"{self._where(name)}: ran out of memory while rendering") from None
        except (TypeError, ValueError, ArithmeticError, AttributeError, LookupError) as error:
            raise TemplateError(f"{self._where(name, error)}: {type(error).__name__}: {error}") from None
        if len(text) > MAX_RENDERED_CHARS:
            raise TemplateError(f"{self._where(name)}: rendered to {len(text):,} characters, over the limit")
        return text

    def _fast(self, template: Any, variables: Mapping[str, Any]) -> str | None:
        """What `template` renders `variables` to, by the renderer kept for its exact source text (`fast`), or
        None: no renderer for that text, values it does not cover, or an exception, which rendering the template
        raises again, reported with its file and line."""
        renderer = RENDERERS.get(getattr(template, "mylm_source", None) or "")
        if renderer is None:
            return None
        try:
            return renderer(self._env.filters, variables)
        except Exception:  # noqa: BLE001 - the template's own render raises it, reported as every render's is
            return None

    def _depends_on_variables_alone(self, name: str, template: Any) -> bool:
        pure = self._pure.get(template)
        if pure is None:
            from jinja2 import TemplateError as JinjaError
            from jinja2 import meta

            loader = self._env.loader
            try:
                source = loader.get_source(self._env, name)[0] if loader is not None else "{% include x %}"
                tree = self._env.parse(source)
                pure = not any(True for _ in meta.find_referenced_templates(tree)) \
                    and "lipsum" not in meta.find_undeclared_variables(tree)
            except (OSError, JinjaError):  # the file changed under us: simply not kept this time
                pure = False
            if len(self._pure) >= 64:
                self._pure.clear()
            self._pure[template] = pure
        return pure

    def check(self, names: Iterable[str]) -> None:
        """Render each named template with sample values for every branch (`sample_variables`), so a broken
        template fails before a run starts, naming its file and line."""
        for name in names:
            for variables in sample_variables(name):
                self.render(name, **variables)

    def _where(self, name: str, error: BaseException | None = None) -> str:
        """The template file (and, when the error's traceback shows it, the line) a problem comes from."""
        if error is not None:
            line = _template_line(error, self.search_path)
            if line is not None:
                return line
        try:
            found = self.find(name)
        except TemplateError:
            found = None
        return str(found[1]) if found else name


_SAMPLE_TOOL = {"name": "example", "description": "An example tool.", "parameters": '{"type":"object"}'}
_SAMPLE_MESSAGES = [
    {"role": "system", "content": "The system prompt."},
    {"role": "user", "content": "A question."},
    {"role": "assistant", "content": "An answer."},
    {"role": "user", "content": "Another question."},
]
#: Sample values for each packaged template, one mapping per branch worth rendering; used to check templates
#: (and the user's edited copies) before they are needed. Unknown names (a user's own) are rendered without
#: any.
SAMPLES: dict[str, tuple[dict[str, Any], ...]] = {
    "system.j2": tuple(
        {"tools": tools, "multiple_calls": multiple, "instructions": "Be brief.", "platform": "Linux",
         "cwd": "/work", "tool_choice": choice,
         "example": '<tool_code>\n<name>example</name>\n<parameters>\n{"path": "."}\n</parameters>\n</tool_code>'}
        for tools, multiple, choice in (
            ([_SAMPLE_TOOL], False, "auto"),
            ([_SAMPLE_TOOL], True, "required"),
            ([_SAMPLE_TOOL], False, "example"),
            ([], False, "none"),
        )
    ),
    "dialects/hermes/system.j2": tuple(
        {"tools": tools, "signatures": ['{"type": "function", "function": {"name": "example"}}'] if tools else [],
         "multiple_calls": multiple, "instructions": "Be brief.", "platform": "Linux", "cwd": "/work",
         "tool_choice": choice, "final_answer_tag": tagged,
         "example": '<tool_call>\n{"name": "example", "arguments": {"path": "."}}\n</tool_call>'}
        for tools, multiple, choice, tagged in (
            ([_SAMPLE_TOOL], False, "auto", True),
            ([_SAMPLE_TOOL], True, "required", False),
            ([_SAMPLE_TOOL], False, "example", False),
            ([], False, "none", False),
        )
    ),
    "tool_definitions.j2": ({"tools": [_SAMPLE_TOOL]},),
    "observation.j2": (
        {"tool": "example", "output": "output", "cut": 0, "handle": None},
        {"tool": "example", "output": "output", "cut": 120, "handle": "out_1"},
    ),
    "tool_error.j2": ({"tool": "example", "message": "a problem", "example": ""},
                     {"tool": "example", "message": "a problem", "example": "<tool_code>\n<name>example</name>\n<parameters>\n{}\n</parameters>\n</tool_code>"}),
    "denied.j2": ({"tool": "example", "reason": "refused"},),
    "format_error.j2": ({"message": "a problem", "example": "", "after": "more"},
                       {"message": "a problem", "example": "<tool_code>\n<name>example</name>\n<parameters>\n{}\n</parameters>\n</tool_code>"}),
    "truncated.j2": ({"max_tokens": 4096},),
    "capped.j2": ({"chars": 400, "tool": "", "description": ""},
                  {"chars": 400, "tool": "math.hcf", "description": "Highest common factor of two numbers."}),
    "made_up.j2": ({"tool": "example", "arguments": 'weight=1.0, height=1.0', "placeholder": ""},
                   {"tool": "fetch", "arguments": 'url="https://example.com/notes.txt"', "placeholder": "example.com"}),
    "unfit.j2": ({"tool": "example", "description": "Calculate the boiling point of a substance."},),
    "unlooked.j2": ({"tool": "read_file", "path": "notes.txt", "block": "<tool_code>\n<name>read_file</name>\n"
                     "<parameters>\n{\"path\": \"notes.txt\"}\n</parameters>\n</tool_code>"},
                    {"tool": "list_dir", "path": ""},
                    {"tool": "list_dir", "path": "."},
                    {"tool": "read_file", "path": "notes.txt", "seen": False, "others": True}),
    "unwritten.j2": ({"tool": "write_file", "path": "release.txt", "parameter": "path"},
                     {"tool": "exec_command", "path": "release.txt", "parameter": ""}),
    "output_schema.j2": ({"schema": '{"type":"object","properties":{"name":{"type":"string"}}}'},
                         {"schema": '{"type":"object"}', "problems": "the reply holds no JSON value"}),
    "unread_overwrite.j2": ({"tool": "write_file", "path": "release.py", "reader": "read_file",
                             "task": "Which file defines parse_release?"},
                            {"tool": "Write", "path": "release.py", "reader": "", "task": ""},
                            {"tool": "write_file", "path": "parse_release.py", "reader": "read_file",
                             "task": "Which file defines parse_release?", "unasked": True}),
    "fit.j2": ({"request": "How many sides does a hexagon have?", "tool": "example",
                "description": "Calculate the boiling point of a substance."},),
    "fit_can.j2": ({"request": "How many sides does a hexagon have?", "tool": "example",
                    "description": "Calculate the boiling point of a substance."},),
    "count.j2": ({"request": "What is the capital of Brazil?"},),
    "degenerate.j2": ({"message": "the reply repeated the line '#15' for 128 lines"},),
    "unrun_block.j2": ({"message": "a problem"},),
    "summary.j2": ({"max_iterations": 10},),
    "repeated_answer.j2": ({"tool": "example", "times": 3, "max_iterations": 10},),
    "tool_required.j2": ({"tool": None}, {"tool": "example"}),
    "unusable_reply.j2": ({"unclosed_reasoning": False, "invented": False, "wrote": ""},
                          {"unclosed_reasoning": True, "invented": False, "wrote": ""},
                          {"unclosed_reasoning": False, "invented": True, "wrote": "Let me check."}),
    "repeated_mistake.j2": (
        {"message": "a problem", "tool": "example", "block": True},
        {"message": "a problem", "tool": None, "block": True},
        {"message": "a problem", "tool": None, "block": False},
    ),
    "invalid_arguments.j2": ({"tool": "example", "problems": ["a problem", "another"], "schema": '{"type":"object"}'},),
    "tool_choice_refused.j2": ({"tool": "example", "tool_choice": "none"}, {"tool": "example", "tool_choice": "other"}),
    "repeated_call.j2": ({"tool": "example", "output": ""}, {"tool": "example", "output": "the result"},
                         {"tool": "example", "output": "the result", "previous": False},
                         {"tool": "example", "output": "the result", "task": "How many lines does fruits.txt have?"},
                         {"tool": "write_file", "output": "wrote 12 characters", "wrote": True,
                          "task": "Write the code name into release.txt."}),
    "code_call.j2": ({"tool": "read_files", "block": "<tool_code>\n<name>read_files</name>\n<parameters>\n"
                                                      "{\"files\": [{\"path\": \"notes.txt\"}]}\n</parameters>\n</tool_code>"},),
    "echoed.j2": ({"task": "How many lines does fruits.txt have?"},
                  {"task": "How many lines does fruits.txt have?", "given": True}),
    "unknown_tool.j2": (
        {"name": "exmaple", "tools": ["example"], "suggestion": "example", "command": None},
        {"name": "other", "tools": ["example"], "suggestion": None, "command": None},
        {"name": "example", "tools": [], "suggestion": None, "command": None},
        {"name": "ls -l", "tools": ["execute_command"], "suggestion": None, "command": "ls -l"},
    ),
    "compaction.j2": ({"task": "the task"}, {"task": ""}),
    "compacted.j2": ({"task": "the task", "summary": "a summary"}, {"task": "", "summary": "a summary"}),
}


def sample_variables(name: str) -> tuple[dict[str, Any], ...]:
    """Sample values to check template `name` with (chat formats get a short conversation)."""
    if name.startswith("chat/"):
        return ({"messages": _SAMPLE_MESSAGES, "add_generation_prompt": True},)
    return SAMPLES.get(name, ({},))


@functools.lru_cache(maxsize=1)
def _jinja_errors() -> tuple[type[TemplateNotFound], type[TemplateSyntaxError], type[UndefinedError],
                             type[SecurityError]]:
    """Jinja's errors that `PromptLoader._render` reports, imported once (not at import time: startup stays light)."""
    from jinja2 import TemplateNotFound, TemplateSyntaxError, UndefinedError
    from jinja2.exceptions import SecurityError

    return TemplateNotFound, TemplateSyntaxError, UndefinedError, SecurityError


def _template_line(error: BaseException, search_path: Sequence[tuple[str, Path]]) -> str | None:
    """`FILE:LINE` of the innermost template frame in `error`'s traceback (Jinja maps its frames to template
    lines), or None."""
    import traceback

    roots = [os.path.realpath(p) for _, p in search_path]
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        real = os.path.realpath(frame.filename)
        if frame.filename.endswith(_TEMPLATE_SUFFIXES) and any(real.startswith(r + os.sep) for r in roots):
            return f"{frame.filename}:{frame.lineno}"
    return None


#: Schema keywords that only constrain values. Arguments are still validated against them, but showing them
#: to the model costs tokens on every call and barely changes what it writes.
_VALIDATION_ONLY = frozenset({
    "$schema", "$id", "title", "additionalProperties", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems",
})


#: Schema keywords whose value maps names to schemas: those names are the tool's own (a parameter may well be
#: called `pattern`, `title` or `maximum`), never keywords to drop.
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def prompt_schema(schema: Any) -> Any:
    """The part of a JSON Schema worth showing the model: types, properties, required, descriptions, enums."""
    if isinstance(schema, Mapping):
        return {
            k: ({name: prompt_schema(sub) for name, sub in v.items()} if k in _NAMED_SCHEMAS and isinstance(
                v, Mapping) else prompt_schema(v))
            for k, v in schema.items() if k not in _VALIDATION_ONLY
        }
    if isinstance(schema, list):
        return [prompt_schema(v) for v in schema]
    return schema


def tool_view(tools: Iterable[Any]) -> list[dict[str, Any]]:
    """The template-facing view of tools: name, description and the parameters schema as JSON text."""
    return [
        # Compact JSON: every character of the tool list is paid on every call.
        # Descriptions and schemas come from MCP servers, plugins and `mylm serve`'s clients: data, so neither a
        # special token nor a protocol tag in them survives intact (`</tool_definitions>` cannot end the list).
        {"name": t.name, "description": neutralise(t.description),
         "parameters": neutralise(dump_json(prompt_schema(dict(t.parameters)), compact=True))}
        for t in tools
    ]
