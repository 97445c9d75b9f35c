"""Prompt templates: where they are looked up, and rendering them in a sandboxed, strict Jinja environment."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from .errors import TemplateError
from .paths import config_dir
from .protocol.defuse import neutralise as neutralise  # re-exported: templates and callers use it

if TYPE_CHECKING:
    from jinja2 import BytecodeCache, FileSystemLoader
    from jinja2.sandbox import SandboxedEnvironment

#: Rendered prompts larger than this are refused: a template bug, or a template trying to exhaust memory.
#: Every string a template builds along the way (`~`, `+`, `*`, filters, method calls) is held to the same
#: bound.
MAX_RENDERED_CHARS = 2_000_000
#: A render still running after this many seconds is stopped (a template looping over huge ranges).
MAX_RENDER_SECONDS = 5.0
_PROMPTS_PACKAGE = "mylm._prompts"
_TEMPLATE_SUFFIXES = (".j2",)


def packaged_prompts_dir() -> Path:
    """The directory of the default templates: the installed data package, or `prompts/` in a checkout."""
    spec = importlib.util.find_spec(_PROMPTS_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location, "system.j2").is_file():
                return Path(location)
    checkout = Path(__file__).resolve().parent.parent / "prompts"
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
    from .config import project_trust

    return project_trust(Path(cwd) if cwd else None, environ) is not None


def contained(directory: str | os.PathLike[str], file: str | os.PathLike[str]) -> str:
    """The real path of template `file`, which must stay inside search `directory` (symlinks out are refused)."""
    root, real = os.path.realpath(directory), os.path.realpath(file)
    if os.path.commonpath([root, real]) != root:
        raise TemplateError(
            f"{file}: refusing a template that leads outside {directory} (a symlink out of the template directory)"
        )
    return real


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
        self._env.filters = {name: _bounded_call(f) for name, f in self._env.filters.items()}
        #: Seconds a single render may take before it is stopped.
        self.render_seconds = MAX_RENDER_SECONDS

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
        from jinja2 import TemplateNotFound, TemplateSyntaxError, UndefinedError
        from jinja2.exceptions import SecurityError

        try:
            template = self._env.get_template(name)
            text: str = _render_within(template, variables, self.render_seconds)
        except TemplateNotFound as error:
            where = ", ".join(str(p) for _, p in self.search_path)
            raise TemplateError(f"template {error.name!r} not found (looked in {where})") from None
        except TemplateSyntaxError as error:
            raise TemplateError(f"{error.filename or name}:{error.lineno}: {error.message}") from None
        except UndefinedError as error:
            raise TemplateError(f"{self._where(name, error)}: {error.message}") from None
        except SecurityError as error:
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
         "cwd": "/work", "tool_choice": choice}
        for tools, multiple, choice in (
            ([_SAMPLE_TOOL], False, "auto"),
            ([_SAMPLE_TOOL], True, "required"),
            ([_SAMPLE_TOOL], False, "example"),
            ([], False, "none"),
        )
    ),
    "tool_definitions.j2": ({"tools": [_SAMPLE_TOOL]},),
    "observation.j2": (
        {"tool": "example", "output": "output", "cut": 0, "handle": None},
        {"tool": "example", "output": "output", "cut": 120, "handle": "out_1"},
    ),
    "tool_error.j2": ({"tool": "example", "message": "a problem"},),
    "denied.j2": ({"tool": "example", "reason": "refused"},),
    "format_error.j2": ({"message": "a problem"},),
    "truncated.j2": ({"max_tokens": 4096},),
    "degenerate.j2": ({"message": "the reply repeated the line '#15' for 128 lines"},),
    "unrun_block.j2": ({"message": "a problem"},),
    "summary.j2": ({"max_iterations": 10},),
    "tool_required.j2": ({"tool": None}, {"tool": "example"}),
    "unusable_reply.j2": ({"unclosed_reasoning": False}, {"unclosed_reasoning": True}),
    "repeated_mistake.j2": (
        {"message": "a problem", "tool": "example", "block": "<tool_code>...</tool_code>"},
        {"message": "a problem", "tool": None, "block": "<tool_code>...</tool_code>"},
    ),
    "invalid_arguments.j2": ({"tool": "example", "problems": ["a problem", "another"], "schema": '{"type":"object"}'},),
    "tool_choice_refused.j2": ({"tool": "example", "tool_choice": "none"}, {"tool": "example", "tool_choice": "other"}),
    "repeated_call.j2": ({"tool": "example"},),
    "unknown_tool.j2": (
        {"name": "exmaple", "tools": ["example"], "suggestion": "example"},
        {"name": "other", "tools": ["example"], "suggestion": None},
        {"name": "example", "tools": [], "suggestion": None},
    ),
    "compaction.j2": ({"task": "the task"}, {"task": ""}),
    "compacted.j2": ({"task": "the task", "summary": "a summary"}, {"task": "", "summary": "a summary"}),
}


def sample_variables(name: str) -> tuple[dict[str, Any], ...]:
    """Sample values to check template `name` with (chat formats get a short conversation)."""
    if name.startswith("chat/"):
        return ({"messages": _SAMPLE_MESSAGES, "add_generation_prompt": True},)
    return SAMPLES.get(name, ({},))


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


class _Overrun(BaseException):
    """Raised inside a render that ran out of time (a BaseException, so no `except Exception` swallows it)."""


def _render_within(template: Any, variables: Mapping[str, Any], seconds: float) -> str:
    """`template.render(**variables)`, stopped by an asynchronous `_Overrun` in this thread after `seconds`.

    The watchdog raises the exception into the rendering thread at its next bytecode: template loops are
    Python loops, so they stop. A pending exception that lost the race with a render finishing is absorbed.
    """
    watch = _watchdog().watch(seconds)
    try:
        text: str = template.render(**variables)
    finally:
        fired = watch.end()
    if fired:
        raise _Overrun
    return text


class _Watch:
    """One render being timed: the thread to stop, when, and whether it was stopped."""

    def __init__(self, dog: _Watchdog, deadline: float) -> None:
        import threading

        self.dog, self.deadline, self.target = dog, deadline, threading.get_ident()
        self.done = self.fired = False

    def end(self) -> bool:
        """Stop timing; True if the render ran out of time (and an exception not yet raised is absorbed here)."""
        with self.dog.lock:
            self.done = True
            self.dog.active.discard(self)
            fired = self.fired
        if fired:
            # Withdrawing a pending exception with SetAsyncExc(NULL) leaves CPython's eval breaker signalled for
            # good (3.11: every later bytecode checks it, and a trace function then spins): let it arrive here.
            try:
                for _ in range(100_000):
                    pass
            except _Overrun:
                pass
        return fired


class _Watchdog:
    """One daemon thread timing every render (a timer thread per render would cost more than most renders)."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Condition()
        self.active: set[_Watch] = set()
        #: When the watchdog thread wakes next (None: only when notified).
        self.wakes: float | None = None
        threading.Thread(target=self._run, name="mylm-template-watchdog", daemon=True).start()

    def watch(self, seconds: float) -> _Watch:
        import time

        with self.lock:
            watch = _Watch(self, time.monotonic() + seconds)
            self.active.add(watch)
            # Waking the thread for every render would cost a context switch each; it already wakes in time
            # unless this deadline is its earliest.
            if self.wakes is None or watch.deadline < self.wakes:
                self.lock.notify()
        return watch

    def _run(self) -> None:
        import ctypes
        import time

        with self.lock:
            while True:
                now = time.monotonic()
                for watch in [w for w in self.active if w.deadline <= now and not w.fired]:
                    watch.fired = True
                    stop = ctypes.py_object(_Overrun)
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(watch.target), stop)
                pending = [w.deadline for w in self.active if not w.fired]
                self.wakes = min(pending) if pending else None
                self.lock.wait(self.wakes - now if self.wakes is not None else None)


@functools.lru_cache(maxsize=1)
def _watchdog() -> _Watchdog:
    return _Watchdog()


def _too_big(value: Any) -> bool:
    return isinstance(value, (str, list, tuple)) and len(value) > MAX_RENDERED_CHARS


def _check_arguments(args: Iterable[Any]) -> None:
    from jinja2.exceptions import SecurityError

    for value in args:
        # A width or count this large (`center(10**9)`) can only be meant to exhaust memory.
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDERED_CHARS:
            raise SecurityError(f"the number {value} is too large for a template")
        if _too_big(value):
            raise SecurityError("a value over the size limit")


def _check_result(value: Any) -> Any:
    from jinja2.exceptions import SecurityError

    if _too_big(value):
        raise SecurityError("a value over the size limit")
    return value


def _bounded_call(function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that refuses huge numbers or values as arguments, and results over the size limit."""
    if getattr(function, "_bounded", False):
        return function

    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_arguments([*args, *kwargs.values()])
        return _check_result(function(*args, **kwargs))

    bounded._bounded = True  # type: ignore[attr-defined]
    return bounded


@functools.lru_cache(maxsize=1)
def _contained_loader() -> type[FileSystemLoader]:
    """Jinja's file loader, refusing any template (an `{% include %}` too) whose real path leaves its directory.

    Built on first use, like the sandbox, so importing this module does not import jinja2.
    """
    import posixpath

    from jinja2 import FileSystemLoader
    from jinja2.loaders import split_template_path

    class ContainedLoader(FileSystemLoader):
        """A `FileSystemLoader` that reads a template only if it resolves inside its search directory."""

        def get_source(self, environment: Any, template: str) -> tuple[str, str, Callable[[], bool]]:
            pieces = split_template_path(template)
            for directory in self.searchpath:
                filename = posixpath.join(directory, *pieces)
                if os.path.isfile(filename):
                    # A repository can commit `k.j2 -> ~/.ssh/id_rsa`; reading the checked real path also means a
                    # link swapped after the check is not followed.
                    real = contained(directory, filename)
                    break
            else:
                return super().get_source(environment, template)  # raises TemplateNotFound, listing the path
            with open(real, encoding=self.encoding) as handle:
                contents = handle.read()
            mtime = os.path.getmtime(real)

            def uptodate() -> bool:
                try:
                    return os.path.getmtime(real) == mtime
                except OSError:
                    return False

            return contents, os.path.normpath(filename), uptodate

    return ContainedLoader


@functools.lru_cache(maxsize=1)
def _shared_bytecode() -> BytecodeCache:
    """Compiled templates kept in memory for every loader in the process: each agent has its own loader (a
    batch makes one per task), and compiling the templates again cost ~10 ms an agent. Jinja checks each entry
    against the template's source, so an edited template is compiled afresh; every loader builds the same kind
    of environment, so code compiled for one is right for all."""
    import threading

    from jinja2 import BytecodeCache
    from jinja2.bccache import Bucket

    class InMemory(BytecodeCache):
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._code: dict[str, bytes] = {}

        def load_bytecode(self, bucket: Bucket) -> None:
            with self._lock:
                code = self._code.get(bucket.key)
            if code is not None:
                bucket.bytecode_from_string(code)

        def dump_bytecode(self, bucket: Bucket) -> None:
            code = bucket.bytecode_to_string()
            with self._lock:
                self._code[bucket.key] = code

    return InMemory()


@functools.lru_cache(maxsize=1)
def _bounded_sandbox() -> type[SandboxedEnvironment]:
    """The sandbox class, built on first use so importing this module does not import jinja2."""
    from jinja2.compiler import CodeGenerator, Frame
    from jinja2.exceptions import SecurityError
    from jinja2.nodes import Concat
    from jinja2.sandbox import SandboxedEnvironment

    class BoundedCodeGenerator(CodeGenerator):
        """Compiles `a ~ b` to a size-checked join (Jinja's own `str_join` cannot be intercepted)."""

        def visit_Concat(self, node: Concat, frame: Frame) -> None:
            self.write("environment.bounded_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class BoundedSandbox(SandboxedEnvironment):
        """The Jinja sandbox, plus size limits on `*`, `**`, `+`, `~` and calls, so a template cannot build a
        gigabyte string (it would have to double one 30 times, and each step is checked)."""

        intercepted_binops = frozenset({"*", "**", "+"})
        code_generator_class = BoundedCodeGenerator

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise SecurityError("exponent too large")
            if operator == "*":
                for seq, count in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                        if len(seq) * count > MAX_RENDERED_CHARS:
                            raise SecurityError("repetition would exceed the size limit")
            sized = (str, list, tuple)
            if operator == "+" and isinstance(left, sized) and isinstance(right, sized):
                if len(left) + len(right) > MAX_RENDERED_CHARS:
                    raise SecurityError("joining would exceed the size limit")
            return super().call_binop(context, operator, left, right)

        def bounded_join(self, parts: Iterable[Any]) -> str:
            texts = [str(part) for part in parts]
            if sum(len(t) for t in texts) > MAX_RENDERED_CHARS:
                raise SecurityError("joining would exceed the size limit")
            return "".join(texts)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _check_arguments([*args, *kwargs.values()])
            return _check_result(super().call(__context, __obj, *args, **kwargs))

    return BoundedSandbox


#: Schema keywords that only constrain values. Arguments are still validated against them, but showing them
#: to the model costs tokens on every call and barely changes what it writes.
_VALIDATION_ONLY = frozenset({
    "$schema", "$id", "title", "additionalProperties", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems",
})


def prompt_schema(schema: Any) -> Any:
    """The part of a JSON Schema worth showing the model: types, properties, required, descriptions, enums."""
    if isinstance(schema, Mapping):
        return {k: prompt_schema(v) for k, v in schema.items() if k not in _VALIDATION_ONLY}
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
