"""`--provider local`: a GGUF model run inside the mylm process by llama-cpp-python (the `local` extra).

The model is loaded once per process and per file (a chat, a batch and compaction share it). The prompt is the
conversation rendered by the GGUF's own chat template (or a mylm chat format when `--chat-format` is given);
the tokens stream through an incremental UTF-8 decoder and a `StopCutter`, so stop strings end generation
in-process and are reported like a server reports them. Ctrl-C lands between tokens (or between prompt
batches), and the cancel token and the run's deadline are checked at the same points. `llama_cpp` is imported
only here.
"""

from __future__ import annotations

import atexit
import codecs
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Mapping

from .._version import install_command
from ..errors import CancelledError, ConfigError, ContextOverflowError, LLMError, LLMTimeoutError
from ..llm import SAMPLING_OPTIONS, FinishChunk, LLMChunk, LLMRequest, TextChunk, alternating, native_refused
from ..protocol.stops import StopCutter
from ..types import Message, Usage
from .base import Endpoint

if TYPE_CHECKING:
    from ..prompts import PromptLoader
    from .formats import ChatFormat

_log = logging.getLogger("mylm.providers")

#: The context allocated when neither `context_tokens` nor `n_ctx` says: enough for an agent's prompt and
#: reply, without reserving gigabytes for a model trained on 128k tokens.
DEFAULT_CONTEXT_CAP = 8192
_GGUF_MAGIC = b"GGUF"
#: Sampling options passed to llama.cpp as they are (the same names as llama-server's).
_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
)
_LOAD_OPTIONS = ("n_threads", "n_gpu_layers", "n_batch", "seed")
#: A request's own sampling options that `Llama.generate` takes (its `seed` is the sampler's, set apart).
_REQUEST_SAMPLING = {name: name for name in SAMPLING_OPTIONS if name in _SAMPLING}


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


def _load(path: Path, n_ctx: int | None, options: Mapping[str, Any]) -> _Engine:
    llama_cpp = _import_llama_cpp()
    started = time.monotonic()
    n_ctx_train = _trained_context(llama_cpp, path)
    size = n_ctx or min(n_ctx_train or DEFAULT_CONTEXT_CAP, DEFAULT_CONTEXT_CAP)
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
    LlamaModel = _module("llama_cpp._internals").LlamaModel  # noqa: N806 - a class

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


class LocalModel:
    """An `LLM` that runs a GGUF in-process; `endpoint.model` is a path or a cached model's name."""

    # What the provider registry reads from every provider class: there is no server, URL or key here.
    name: ClassVar[str] = "local"
    default_base_url: ClassVar[str] = ""
    key_vars: ClassVar[tuple[str, ...]] = ()
    #: llama.cpp samples under a GBNF grammar itself.
    grammar_support: ClassVar[str] = "native"

    @classmethod
    def claims(cls, base_url: str) -> bool:
        """No URL means a model in-process: the provider is only ever chosen by name."""
        return False

    @classmethod
    def normalise_base_url(cls, base_url: str) -> str:
        """Any base URL is ignored (the settings always hold one: the default Ollama's)."""
        return base_url

    def __init__(self, endpoint: Endpoint, *, prompts: PromptLoader | None = None) -> None:
        from ..models.cache import resolve_model

        self.endpoint = endpoint
        self._prompts = prompts
        options = dict(endpoint.options)
        self.path = resolve_model(endpoint.model)
        n_ctx = options.get("n_ctx")
        self.engine = load(
            self.path, n_ctx=n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None, options=options
        )
        self.sampling = {k: v for k, v in options.items() if k in _SAMPLING}
        self.option_grammar = options.get("grammar") if isinstance(options.get("grammar"), str) else None
        self.format: ChatFormat | None = None
        if endpoint.chat_format:
            from .formats import chat_format

            self.format = chat_format(endpoint.chat_format)
        elif self.engine.template is None:
            from .formats import DEFAULT_CHAT_FORMAT, chat_format

            _log.info("%s has no chat template; using %s", self.path.name, DEFAULT_CHAT_FORMAT)
            self.format = chat_format(DEFAULT_CHAT_FORMAT)

    @property
    def context_window(self) -> int:
        """The prompt-plus-reply tokens the loaded context holds (drives compaction unless configured)."""
        return min(self.engine.n_ctx, self.engine.n_ctx_train or self.engine.n_ctx)

    def list_models(self) -> list[str]:
        """The cached models (what `--model NAME` accepts besides a path)."""
        from ..models.cache import cached_models

        return [m.name for m in cached_models()]

    # ----------------------------------------------------------------------------------------- prompting

    def render(self, request: LLMRequest) -> tuple[list[int], tuple[str, ...]]:
        """The prompt's tokens, and the end-of-turn stop strings of its format."""
        engine = self.engine
        messages = alternating(request.messages)
        render: Callable[[list[Message]], str]
        if self.format is not None:
            from .formats import render_prompt

            if self._prompts is None:
                from ..prompts import PromptLoader

                self._prompts = PromptLoader.default()
            prompts, fmt = self._prompts, self.format

            def render(msgs: list[Message]) -> str:
                return render_prompt(prompts, fmt, msgs)

            add_bos, stops = True, self.format.stops
        else:
            Jinja2ChatFormatter = _module("llama_cpp.llama_chat_format").Jinja2ChatFormatter  # noqa: N806

            formatter = Jinja2ChatFormatter(
                template=engine.template or "", eos_token=engine.eos, bos_token=engine.bos
            )

            def render(msgs: list[Message]) -> str:
                try:
                    return str(formatter(messages=[m.to_dict() for m in msgs]).prompt)
                except Exception as error:  # noqa: BLE001 - a template's own raise_exception, or a Jinja error
                    raise LLMError(
                        f"the chat template in {self.path.name} rejected the conversation ({error}); "
                        "choose another with --chat-format"
                    ) from None

            # The template writes the BOS token itself where the model wants one.
            add_bos, stops = False, tuple(s for s in (engine.eos,) if s)
        return self._tokenize(render, messages, add_bos), stops

    def _tokenize(self, render: Callable[[list[Message]], str], messages: Sequence[Message], add_bos: bool
                  ) -> list[int]:
        """The template's text with special tokens parsed, the messages' text without: data never becomes a
        control token, in any spelling (issue 19 §7)."""
        from .formats import data_segments

        tokens: list[int] = []
        for i, (text, data) in enumerate(data_segments(render, messages)):
            if text or i == 0:
                tokens += self.engine.llama.tokenize(text.encode("utf-8"), add_bos=add_bos and i == 0,
                                                     special=not data)
        return tokens

    def _grammar(self, request: LLMRequest) -> Any:
        # A grammar the user set in `options` is their explicit choice; else the protocol's, which the agent
        # puts on the request (`--constrain`). In-process no lazy form is needed: all of it applies.
        constraint = request.constraint
        text = self.option_grammar or (constraint.grammar if constraint is not None else None)
        if not text:
            return None
        llama_cpp = _module("llama_cpp")
        grammar = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        # llama-cpp-python defers parsing to the sampler, which crashes the process on a NULL sampler; so the
        # grammar is compiled once here (llama.cpp's own parser), and a bad one is an error like any other.
        vocab = self.engine.llama._model.vocab
        sampler = llama_cpp.llama_sampler_init_grammar(
            vocab, text.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not sampler:
            raise LLMError(
                "the GBNF grammar for the local model does not parse (run with -vv for llama.cpp's reason)"
            )
        llama_cpp.llama_sampler_free(sampler)
        return grammar

    # ----------------------------------------------------------------------------------------- streaming

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Stream one completion (see `mylm.llm.LLM`)."""
        if request.native is not None:
            raise native_refused("local")
        engine = self.engine
        _check(request)
        tokens, format_stops = self.render(request)
        room = engine.n_ctx - len(tokens)
        if room <= 0:
            raise ContextOverflowError(
                f"the prompt is {len(tokens)} tokens, more than the local model's context of {engine.n_ctx} "
                "(set context_tokens higher, or start a new conversation)",
                status=413,
            )
        limit = min(request.max_tokens or self.endpoint.max_tokens, room)
        grammar = self._grammar(request)
        stops = tuple(dict.fromkeys((*request.stop, *format_stops)))
        with engine.lock:
            yield from self._generate(tokens, limit, stops, grammar, request)

    def _generate(
        self, prompt: list[int], limit: int, stops: tuple[str, ...], grammar: Any, request: LLMRequest
    ) -> Iterator[LLMChunk]:
        llama = self.engine.llama
        cutter = StopCutter(stops)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        is_end = _end_of_generation(llama)
        started = time.monotonic()
        first: float | None = None
        produced: list[int] = []
        reason = "length"
        seed = request.sampling.seed
        saved = getattr(llama, "_seed", None)
        if seed is not None:
            # The request's seed, for this generation only: the model is shared, and the next request without one
            # samples with the seed it was loaded with (`options.seed`, else a random one).
            llama.set_seed(seed & 0xFFFFFFFF)  # llama.cpp's seeds are 32-bit; -1 wraps to its "random"
        worker = _Sampler(self.engine, prompt, grammar, self._sampler_args(request))
        try:
            for token in worker.tokens(request):
                if first is None:
                    first = time.monotonic()
                if is_end(token):
                    reason = "stop"
                    break
                produced.append(token)
                text = cutter.feed(decoder.decode(llama.detokenize([token])))
                if text:
                    yield TextChunk(text)
                if cutter.hit is not None:
                    reason = "stop"
                    break
                if len(produced) >= limit:
                    break
        finally:
            worker.stop()
            if seed is not None and saved is not None:
                llama.set_seed(saved)
        rest = "" if cutter.hit is not None else cutter.feed(decoder.decode(b"", final=True)) + cutter.flush()
        if rest:
            yield TextChunk(rest)
        self._report(len(prompt), len(produced), started, first)
        yield FinishChunk(reason=reason, stop_sequence=cutter.hit, usage=Usage(len(prompt), len(produced)))

    def _sampler_args(self, request: LLMRequest) -> dict[str, Any]:
        """`Llama.generate`'s sampling arguments: the configured options, the request's own over them."""
        args = request.sampling.over(self.sampling, _REQUEST_SAMPLING)
        if "temperature" in args:
            args["temp"] = args.pop("temperature")
        return args

    def _report(self, prompt: int, produced: int, started: float, first: float | None) -> None:
        ended = time.monotonic()
        reading = (first or ended) - started
        writing = ended - (first or ended)
        rate = produced / writing if writing > 0 else 0.0
        _log.info(
            "local model: %d prompt tokens in %.2f s, %d tokens generated in %.2f s (%.1f tokens/s)",
            prompt,
            reading,
            produced,
            writing,
            rate,
        )


class _Sampler:
    """Samples tokens on a worker thread, at most one ahead of the consumer.

    The thread that asked (the main thread, where Ctrl-C lands) then never sits inside llama.cpp: it waits on
    a queue, which a signal interrupts at once, and checks the cancel token and the deadline while it waits,
    even through a long prompt. `stop()` sets the engine's abort flag, which llama.cpp polls between the
    operations of a batch, so even a prompt evaluation that would take a minute ends within moments.
    """

    _POLL = 0.1

    def __init__(self, engine: _Engine, prompt: list[int], grammar: Any, sampling: Mapping[str, Any]) -> None:
        self.engine = engine
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
        engine.abort.clear()
        self._thread = threading.Thread(
            target=self._run, args=(prompt, grammar, dict(sampling)), name="mylm-local-model", daemon=True
        )
        self._thread.start()

    def _run(self, prompt: list[int], grammar: Any, sampling: dict[str, Any]) -> None:
        try:
            generated = self.engine.llama.generate(prompt, grammar=grammar, reset=True, **sampling)
            try:
                for token in generated:
                    if not self._put(("token", token)):
                        return
            finally:
                generated.close()
            self._put(("end", None))
        except Exception as error:  # noqa: BLE001 - handed to the consumer's thread, which raises it
            if not self.engine.abort.is_set():
                self._put(("error", error))

    def _put(self, item: tuple[str, Any]) -> bool:
        while not self.engine.abort.is_set():
            try:
                self._queue.put(item, timeout=self._POLL)
                return True
            except queue.Full:
                continue
        return False

    def tokens(self, request: LLMRequest) -> Iterator[int]:
        """The sampled tokens, as they come; raises the worker's failure, a cancel or the deadline."""
        while True:
            _check(request)
            try:
                kind, value = self._queue.get(timeout=self._POLL)
            except queue.Empty:
                continue
            if kind == "end":
                return
            if kind == "error":
                raise LLMError(f"llama.cpp failed while generating: {value}")
            yield value

    def stop(self) -> None:
        """Abort the worker (mid-batch if need be) and wait for it, so the model is free for the next call."""
        self.engine.abort.set()
        while self._thread.is_alive():
            try:  # a worker blocked handing over a token is let through, to see the flag
                self._queue.get(timeout=self._POLL)
            except queue.Empty:
                pass
        self._thread.join()
        self.engine.abort.clear()


def _end_of_generation(llama: Any) -> Any:
    """A test for the model's end-of-generation tokens (EOS, `<|im_end|>`, `<end_of_turn>`, ...)."""
    llama_cpp = _module("llama_cpp")
    vocab = getattr(getattr(llama, "_model", None), "vocab", None)
    if vocab is not None and hasattr(llama_cpp, "llama_vocab_is_eog"):
        return lambda token: bool(llama_cpp.llama_vocab_is_eog(vocab, token))
    eos = llama.token_eos()
    return lambda token: token == eos


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


def _check(request: LLMRequest) -> None:
    if request.cancel is not None and request.cancel.cancelled:
        raise CancelledError("cancelled")
    if request.deadline is not None and time.monotonic() >= request.deadline:
        raise LLMTimeoutError("the run's time ran out while the local model was generating")
