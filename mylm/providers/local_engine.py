"""The in-process engine behind `--provider local`: a GGUF file checked, loaded into llama-cpp-python once per
process (per file and load options, shared by a chat, a batch and compaction), and freed at exit. `llama_cpp`
is imported only here, on first use."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import install_command
from ..core.errors import ConfigError

_log = logging.getLogger("mylm.providers")

#: The context allocated when neither `context_tokens` nor `n_ctx` says: enough for an agent's prompt and
#: reply, without reserving gigabytes for a model trained on 128k tokens.
DEFAULT_CONTEXT_CAP = 8192
_GGUF_MAGIC = b"GGUF"
_LOAD_OPTIONS = ("n_threads", "n_gpu_layers", "n_batch", "seed")




def engine_available() -> bool:
    """Whether llama-cpp-python is installed (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


@dataclass(frozen=True)
class _Engine:
    """One loaded model, shared by every provider object of the process that names the same file."""

    llama: Any
    path: Path
    n_ctx: int
    #: The context length the model was trained with (its GGUF metadata).
    n_ctx_train: int
    #: The GGUF's own chat template, if it has one.
    template: str | None
    bos: str
    eos: str
    load_seconds: float
    #: A loaded model is one mutable state (its KV cache): one generation at a time.
    lock: threading.Lock
    #: Set to make llama.cpp abort the batch it is computing (polled through its abort callback).
    abort: threading.Event
    #: The ctypes callback llama.cpp holds a pointer to; kept alive with the engine.
    abort_callback: Any


_engines: dict[tuple[str, int, tuple[tuple[str, Any], ...]], _Engine] = {}
_engines_lock = threading.Lock()


def check_gguf(path: Path) -> None:
    """Raise a one-line `ConfigError` unless `path` is a readable file starting with the GGUF magic."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except FileNotFoundError:
        raise ConfigError(f"model file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"model file {path} is a directory, not a GGUF file") from None
    except OSError as error:
        raise ConfigError(f"cannot read model file {path}: {error.strerror}") from None
    if magic != _GGUF_MAGIC:
        raise ConfigError(f"{path} is not a GGUF model file (it does not start with 'GGUF')")


def _import_llama_cpp() -> Any:
    global _log_callback
    try:
        llama_cpp = _module("llama_cpp")
    except ImportError as error:
        raise ConfigError(
            f"--provider local needs llama-cpp-python ({error}); install it with: {install_command('local')}"
        ) from None
    if _log_callback is None:
        # llama.cpp reports on everything it loads, on stderr; mylm's log takes it instead (shown with -vv),
        # so a user sees one line when a file will not load, and nothing at all when it does.
        def forward(level: int, text: bytes, user_data: Any) -> None:
            _engine_log.debug("%s", text.decode("utf-8", "replace").rstrip("\n"))

        # The C library keeps only a pointer: the callback object must stay alive.
        _log_callback = llama_cpp.llama_log_callback(forward)
        llama_cpp.llama_log_set(_log_callback, None)
    return llama_cpp


_log_callback: Any = None
_engine_log = logging.getLogger("mylm.providers.llama_cpp")


def load(path: Path, *, n_ctx: int | None = None, options: Mapping[str, Any] | None = None) -> _Engine:
    """The model at `path`, loaded on first use and kept for the life of the process."""
    check_gguf(path)
    chosen = {k: v for k, v in (options or {}).items() if k in _LOAD_OPTIONS}
    key = (str(path.resolve()), n_ctx or 0, tuple(sorted(chosen.items())))
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            if not _engines:
                # Freed before the interpreter tears down the modules llama-cpp-python's finaliser needs.
                atexit.register(close_all)
            engine = _engines[key] = _load(path, n_ctx, chosen)
    return engine


def close_all() -> None:
    """Free every loaded model (at exit; or to reclaim the memory)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        with engine.lock:
            engine.llama.close()


def physical_cores(root: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """How many physical cores this process may run on, as the kernel's CPU topology tells them (a core's
    hyperthreads share its package and core id); None where the kernel does not say (not Linux, no sysfs).

    Generation threads: llama-cpp-python defaults to half the logical CPUs (right where every core has two
    hyperthreads), so on a 2-CPU VM without them it generated with one thread. Qwen2.5-Coder-1.5B on this
    machine: 7.0 tokens/s with one, 12.7 with two (llama.cpp's own default is the physical cores)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    cores = set()
    for cpu in allowed:
        topology = root / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return None
    return len(cores) or None


def _load(path: Path, n_ctx: int | None, options: Mapping[str, Any]) -> _Engine:
    llama_cpp = _import_llama_cpp()
    started = time.monotonic()
    n_ctx_train = _trained_context(llama_cpp, path)
    size = n_ctx or min(n_ctx_train or DEFAULT_CONTEXT_CAP, DEFAULT_CONTEXT_CAP)
    if "n_threads" not in options and (cores := physical_cores()) is not None:
        options = {**options, "n_threads": cores}  # a user's n_threads (a profile's options) wins
    try:
        llama = llama_cpp.Llama(model_path=str(path), n_ctx=size, verbose=False, **options)
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"llama.cpp cannot load {path}: {error}") from None
    template = llama.metadata.get("tokenizer.chat_template") or None
    eos_id, bos_id = llama.token_eos(), llama.token_bos()
    model = llama._model  # the token texts are only on the model object
    abort = threading.Event()
    callback = llama_cpp.ggml_abort_callback(lambda data: abort.is_set())
    llama_cpp.llama_set_abort_callback(llama.ctx, callback, None)
    engine = _Engine(
        llama=llama,
        path=path,
        n_ctx=llama.n_ctx(),
        n_ctx_train=n_ctx_train,
        template=template,
        bos=model.token_get_text(bos_id) if bos_id >= 0 else "",
        eos=model.token_get_text(eos_id) if eos_id >= 0 else "",
        load_seconds=time.monotonic() - started,
        lock=threading.Lock(),
        abort=abort,
        abort_callback=callback,
    )
    _log.info(
        "loaded %s in %.2f s (context %d tokens; trained on %d; chat template: %s)",
        path.name,
        engine.load_seconds,
        engine.n_ctx,
        engine.n_ctx_train,
        "the GGUF's" if template else "none",
    )
    return engine


def _trained_context(llama_cpp: Any, path: Path) -> int:
    """The GGUF's context length from its metadata, read without the weights (to size the context first)."""
    LlamaModel = _module("llama_cpp._internals").LlamaModel  # a class

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    try:
        model = LlamaModel(path_model=str(path), params=params, verbose=False)
    except (ValueError, RuntimeError):
        raise ConfigError(
            f"llama.cpp cannot load {path}: the file is damaged or not a model it supports"
        ) from None
    try:
        metadata = model.metadata()
    finally:
        model.close()
    value = metadata.get(f"{metadata.get('general.architecture', '')}.context_length", "")
    return int(value) if value.isdigit() else 0


def _module(name: str) -> Any:
    """A llama-cpp-python module, imported on use and typed loosely (it ships no type information)."""
    import importlib

    module = importlib.import_module(name)
    _close_its_devnull_at_exit()
    return module


_devnull_closed = False


def _close_its_devnull_at_exit() -> None:
    """llama_cpp._utils opens /dev/null twice at import (for its output-silencing context) and never closes
    it: every process that loaded the engine ended with `ResourceWarning: unclosed file /dev/null`. Closed at
    exit, after the last use."""
    global _devnull_closed
    import sys

    utils = sys.modules.get("llama_cpp._utils")
    if _devnull_closed or utils is None:
        return
    _devnull_closed = True
    import atexit

    for name in ("outnull_file", "errnull_file"):
        handle = getattr(utils, name, None)
        if handle is not None and hasattr(handle, "close"):
            atexit.register(handle.close)
