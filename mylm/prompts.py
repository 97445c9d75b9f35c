"""Prompt templates: where they are looked up, and rendering them in a sandboxed, strict Jinja environment."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from .errors import TemplateError
from .protocol.defuse import neutralise as neutralise  # re-exported: templates and callers use it

if TYPE_CHECKING:
    from jinja2 import FileSystemLoader
    from jinja2.sandbox import SandboxedEnvironment

#: Rendered prompts larger than this are refused: a template bug, or a template trying to exhaust memory.
MAX_RENDERED_CHARS = 2_000_000
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


def user_config_dir() -> Path:
    """mylm's directory in the user's config dir (honours XDG_CONFIG_HOME)."""
    import click

    return Path(click.get_app_dir("mylm"))


def project_prompts_dir(cwd: str | os.PathLike[str] | None = None) -> Path:
    """The project's template directory, `./.mylm/prompts`: used only once the user trusts the project."""
    return Path(cwd or os.getcwd()) / ".mylm" / "prompts"


def default_search_path(
    prompts_dir: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    trusted: bool | None = None,
) -> list[tuple[str, Path]]:
    """The template lookup order, highest priority first, each with the reason it is on the path.

    `./.mylm/prompts` is on it only for a `trusted` project (None: as the user config and `MYLM_TRUST_PROJECT`
    say), because a repository's templates decide what the model is told (THREATS T10, T13).
    """
    env = os.environ if environ is None else environ
    path: list[tuple[str, Path]] = []
    if prompts_dir:
        path.append(("--prompts", Path(prompts_dir)))
    if env.get("MYLM_PROMPTS"):
        path.append(("$MYLM_PROMPTS", Path(env["MYLM_PROMPTS"])))
    if _trusted(trusted, environ, cwd):
        path.append(("project", project_prompts_dir(cwd)))
    path.append(("user", user_config_dir() / "prompts"))
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
        )
        self._env.filters["tojson"] = dump_json
        self._env.filters["observation"] = neutralise

    @classmethod
    def default(
        cls,
        prompts_dir: str | os.PathLike[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        trusted: bool | None = None,
    ) -> PromptLoader:
        """A loader with the standard lookup order: `--prompts`, `$MYLM_PROMPTS`, `./.mylm/prompts` (only if the
        project is `trusted`; None: as `trusted_projects` and `MYLM_TRUST_PROJECT` say), user config dir, defaults."""
        trusted = _trusted(trusted, environ, cwd)
        project = project_prompts_dir(cwd)
        ignored = [("project", project)] if not trusted and project.is_dir() else []
        return cls(default_search_path(prompts_dir, environ=environ, cwd=cwd, trusted=trusted), ignored=ignored)

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
        """Render template `name`; any problem becomes a `TemplateError` naming the file and line."""
        from jinja2 import TemplateNotFound, TemplateSyntaxError, UndefinedError
        from jinja2.exceptions import SecurityError

        try:
            template = self._env.get_template(name)
            text: str = template.render(**variables)
        except TemplateNotFound as error:
            where = ", ".join(str(p) for _, p in self.search_path)
            raise TemplateError(f"template {error.name!r} not found (looked in {where})") from None
        except TemplateSyntaxError as error:
            raise TemplateError(f"{error.filename or name}:{error.lineno}: {error.message}") from None
        except UndefinedError as error:
            raise TemplateError(f"{self._where(name)}: {error.message}") from None
        except SecurityError as error:
            raise TemplateError(f"{self._where(name)}: unsafe template: {error}") from None
        except (TypeError, ValueError, ArithmeticError, AttributeError, LookupError) as error:
            raise TemplateError(f"{self._where(name)}: {type(error).__name__}: {error}") from None
        if len(text) > MAX_RENDERED_CHARS:
            raise TemplateError(f"{self._where(name)}: rendered to {len(text):,} characters, over the limit")
        return text

    def _where(self, name: str) -> str:
        try:
            found = self.find(name)
        except TemplateError:
            found = None
        return str(found[1]) if found else name


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
def _bounded_sandbox() -> type[SandboxedEnvironment]:
    """The sandbox class, built on first use so importing this module does not import jinja2."""
    from jinja2.sandbox import SandboxedEnvironment

    class BoundedSandbox(SandboxedEnvironment):
        """The Jinja sandbox, plus limits on `*` and `**` so a template cannot build a gigabyte string."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            from jinja2.exceptions import SecurityError

            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise SecurityError("exponent too large")
            if operator == "*":
                for seq, count in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                        if len(seq) * count > MAX_RENDERED_CHARS:
                            raise SecurityError("repetition would exceed the size limit")
            return super().call_binop(context, operator, left, right)

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
        {"name": t.name, "description": t.description,
         "parameters": dump_json(prompt_schema(dict(t.parameters)), compact=True)}
        for t in tools
    ]
