"""The bounded Jinja environment templates render in: a sandbox limiting the size of every string a template
builds, a watchdog stopping a render that runs too long, and a loader that never reads a file outside its
template directory. jinja2 is imported on first use, so importing this module costs nothing."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..core.errors import TemplateError

if TYPE_CHECKING:
    from jinja2 import BytecodeCache, FileSystemLoader
    from jinja2.sandbox import SandboxedEnvironment

#: Rendered prompts larger than this are refused: a template bug, or a template trying to exhaust memory.
#: Every string a template builds along the way (`~`, `+`, `*`, filters, method calls) is held to the same
#: bound.
MAX_RENDERED_CHARS = 2_000_000
#: A render still running after this many seconds is stopped (a template looping over huge ranges).
MAX_RENDER_SECONDS = 5.0

def contained(directory: str | os.PathLike[str], file: str | os.PathLike[str]) -> str:
    """The real path of template `file`, which must stay inside search `directory` (symlinks out are refused)."""
    root, real = os.path.realpath(directory), os.path.realpath(file)
    if os.path.commonpath([root, real]) != root:
        raise TemplateError(
            f"{file}: refusing a template that leads outside {directory} (a symlink out of the template directory)"
        )
    return real


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


def _refused(message: str) -> Exception:
    """Jinja's `SecurityError` saying `message` (imported only when one is raised: a filter runs every render)."""
    from jinja2.exceptions import SecurityError

    return SecurityError(message)


def _check_arguments(args: Iterable[Any]) -> None:
    for value in args:
        # A width or count this large (`center(10**9)`) can only be meant to exhaust memory.
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDERED_CHARS:
            raise _refused(f"the number {value} is too large for a template")
        if _too_big(value):
            raise _refused("a value over the size limit")


def _check_result(value: Any) -> Any:
    if _too_big(value):
        raise _refused("a value over the size limit")
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
    import threading

    from jinja2 import FileSystemLoader
    from jinja2.loaders import split_template_path

    #: The source `get_source` last read in this thread, for `load` to hand on (loads run in any thread).
    read = threading.local()

    class ContainedLoader(FileSystemLoader):
        """A `FileSystemLoader` that reads a template only if it resolves inside its search directory. Each
        template it loads carries the source text it was compiled from (`mylm_source`), which `fast` renderers
        are keyed on: read in the same call as the compiled code, it cannot be a newer or older text."""

        def load(self, environment: Any, name: str, globals: Any = None) -> Any:
            read.source = None
            template: Any = super().load(environment, name, globals)
            template.mylm_source = read.source
            return template

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
            read.source = contents
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
                    if (isinstance(seq, (str, list, tuple)) and isinstance(count, int)
                            and len(seq) * count > MAX_RENDERED_CHARS):
                        raise SecurityError("repetition would exceed the size limit")
            sized = (str, list, tuple)
            if (operator == "+" and isinstance(left, sized) and isinstance(right, sized)
                    and len(left) + len(right) > MAX_RENDERED_CHARS):
                raise SecurityError("joining would exceed the size limit")
            return super().call_binop(context, operator, left, right)

        def bounded_join(self, parts: Iterable[Any]) -> str:
            texts = [str(part) for part in parts]
            if sum(len(t) for t in texts) > MAX_RENDERED_CHARS:
                raise SecurityError("joining would exceed the size limit")
            return "".join(texts)

        def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            _check_arguments([*args, *kwargs.values()])
            return _check_result(super().call(context, obj, *args, **kwargs))

    return BoundedSandbox
