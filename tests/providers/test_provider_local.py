"""The local provider: real llama.cpp in-process, on the tiny random-weight GGUF (forced by a grammar) and on
the real SmolLM2 from the package index."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mylm.core.cancel import CancelToken
from mylm.core.errors import CancelledError, ConfigError, ContextOverflowError, LLMError, LLMTimeoutError
from mylm.llm import Constraint, FinishChunk, LLMRequest, TextChunk
from mylm.protocol.parser import parse_completion
from mylm.providers import Endpoint, create_llm
from mylm.providers.local import LocalModel
from mylm.providers.local_engine import check_gguf
from mylm.core.types import Message
from tests.providers.engine_support import exact_grammar, write_tiny_llama
from tests.providers.helpers import TOOL_CALL, collect, request
from tests.providers.local_support import need_engine, real_model
from tests.support import engine_missing

CALL_TURN = f"I will list the files.\n{TOOL_CALL}\n<observation>\ninvented\n</observation>"
ANSWER = 'There are 3 files: "a.py", b.txt and c.md. Ünïcödé → ok.'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_engine()
    return write_tiny_llama(tmp_path_factory.mktemp("local") / "tiny.gguf")


def forced(model: Path, text: str, **options: object) -> LocalModel:
    llm = create_llm(
        Endpoint(provider="local", model=str(model), options={"grammar": exact_grammar(text), **options})
    )
    assert isinstance(llm, LocalModel)
    return llm


@pytest.mark.engine
def test_streams_the_forced_text_token_by_token_and_reports_usage(tiny: Path) -> None:
    chunks = list(forced(tiny, ANSWER).stream(request("What is there?")))
    text, _, finish = collect(chunks)
    assert text == ANSWER
    assert sum(isinstance(c, TextChunk) for c in chunks) > 5, "the text must arrive streamed, token by token"
    assert finish is not None and finish.reason == "stop" and finish.stop_sequence is None
    assert finish.usage is not None and finish.usage.prompt_tokens > 10 and finish.usage.completion_tokens > 5


@pytest.mark.engine
def test_a_stop_string_ends_generation_in_process_and_is_reported(tiny: Path) -> None:
    chunks = list(forced(tiny, CALL_TURN).stream(request()))
    text, _, finish = collect(chunks)
    # mylm's stop `</tool_code>` fired: the text ends before it, and the invented observation was never made.
    assert text == f"I will list the files.\n{TOOL_CALL.removesuffix('</tool_code>')}"
    assert finish is not None and finish.reason == "stop" and finish.stop_sequence == "</tool_code>"
    assert finish.usage is not None and finish.usage.completion_tokens < len(CALL_TURN.encode())
    parsed = parse_completion(text)
    assert [c.name for c in parsed.tool_calls] == ["execute_command"]


@pytest.mark.engine
def test_the_token_limit_is_reported_as_length(tiny: Path) -> None:
    text, _, finish = collect(forced(tiny, ANSWER).stream(request(max_tokens=5)))
    assert ANSWER.startswith(text) and 0 < len(text) < len(ANSWER)
    assert finish is not None and finish.reason == "length" and finish.usage is not None
    assert finish.usage.completion_tokens == 5


@pytest.mark.engine
def test_the_model_is_loaded_once_per_process(tiny: Path) -> None:
    first, second = forced(tiny, "a"), forced(tiny, "b")
    assert first.engine is second.engine
    assert collect(first.stream(request()))[0] == "a" and collect(second.stream(request()))[0] == "b"


@pytest.mark.engine
def test_the_context_comes_from_the_gguf_unless_configured(tiny: Path) -> None:
    assert forced(tiny, "a").context_window == 2048  # the tiny model's context_length metadata
    small = forced(tiny, "a", n_ctx=256)
    assert small.context_window == 256
    long_prompt = request("word " * 200)
    with pytest.raises(ContextOverflowError, match="more than the local model.s context of 256"):
        list(small.stream(long_prompt))


@pytest.mark.engine
def test_a_cancel_stops_generation_between_tokens(tiny: Path) -> None:
    cancel = CancelToken()
    stream = forced(tiny, "x" * 400).stream(request(cancel=cancel, stop=()))
    seen = ""
    with pytest.raises(CancelledError):
        for chunk in stream:
            if isinstance(chunk, TextChunk):
                seen += chunk.text
                if len(seen) >= 3:
                    cancel.cancel()
    assert 3 <= len(seen) < 10, "generation must stop at the next token, not run on"


@pytest.mark.engine
def test_the_run_deadline_stops_generation(tiny: Path) -> None:
    past = LLMRequest((Message("system", "s"), Message("user", "u")), deadline=time.monotonic() - 1)
    with pytest.raises(LLMTimeoutError):
        list(forced(tiny, ANSWER).stream(past))


@pytest.mark.engine
def test_the_request_constraint_applies_unless_options_name_a_grammar(tiny: Path) -> None:
    constrained = dataclasses.replace(request(), constraint=Constraint(exact_grammar("from the request")))
    plain = create_llm(Endpoint(provider="local", model=str(tiny)))
    assert collect(plain.stream(constrained))[0] == "from the request"
    # A grammar in the user's options is their explicit choice and wins.
    assert collect(forced(tiny, "from the option").stream(constrained))[0] == "from the option"
    broken = create_llm(Endpoint(provider="local", model=str(tiny), options={"grammar": "root ::= ("}))
    with pytest.raises(LLMError, match="GBNF grammar"):
        list(broken.stream(request()))


@pytest.mark.engine
def test_a_mylm_chat_format_replaces_the_gguf_template(tiny: Path) -> None:
    llm = create_llm(
        Endpoint(
            provider="local",
            model=str(tiny),
            chat_format="llama3",
            options={"grammar": exact_grammar("hi<|eot_id|>more")},
        )
    )
    text, _, finish = collect(llm.stream(request(stop=())))
    # llama3's end-of-turn marker is a stop of that format, cut in-process like any stop string.
    assert text == "hi" and finish is not None and finish.stop_sequence == "<|eot_id|>"


def test_missing_and_non_gguf_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        check_gguf(tmp_path / "absent.gguf")
    (tmp_path / "notes.gguf").write_text("hello, I am text")
    with pytest.raises(ConfigError, match="not a GGUF model file"):
        check_gguf(tmp_path / "notes.gguf")
    with pytest.raises(ConfigError, match="is a directory"):
        check_gguf(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        create_llm(Endpoint(provider="local", model=str(tmp_path / "absent.gguf")))


@pytest.mark.engine
def test_a_damaged_gguf_is_one_config_error(tmp_path: Path) -> None:
    need_engine()
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(ConfigError, match="cannot load"):
        create_llm(Endpoint(provider="local", model=str(damaged)))


@pytest.mark.engine
@pytest.mark.slow
def test_the_real_smollm2_follows_its_own_template_and_stops_at_its_end_of_turn() -> None:
    model = real_model()
    llm = create_llm(Endpoint(provider="local", model=str(model), options={"temperature": 0.0, "seed": 1}))
    assert (
        isinstance(llm, LocalModel)
        and llm.engine.template is not None
        and "<|im_start|>" in llm.engine.template
    )
    req = request("Reply with one short greeting.", stop=(), max_tokens=64)
    text, _, finish = collect(llm.stream(req))
    # The model ends its turn with <|im_end|> (an end-of-generation token), never written into the text.
    assert text.strip() and "<|im_end|>" not in text and "<|im_start|>" not in text
    assert isinstance(finish, FinishChunk) and finish.reason == "stop"
    assert llm.context_window == 8192  # SmolLM2's context_length metadata


def test_loading_the_engine_leaves_no_file_open_at_exit(subprocess_env: dict[str, str]) -> None:
    # Issue 20: `ResourceWarning: unclosed file /dev/null` after the test run: llama_cpp._utils opens /dev/null
    # twice at import and never closes it.
    reason = engine_missing(needs=())
    if reason is not None:
        pytest.skip(reason)
    code = (
        "from mylm.providers.local_engine import _module; _module('llama_cpp'); _module('llama_cpp._internals')"
    )
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", code], env=subprocess_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def _topology(root: Path, cores: dict[int, tuple[str, str]]) -> Path:
    for cpu, (package, core) in cores.items():
        where = root / f"cpu{cpu}" / "topology"
        where.mkdir(parents=True)
        (where / "physical_package_id").write_text(package + "\n")
        (where / "core_id").write_text(core + "\n")
    return root


def test_generation_threads_default_to_the_physical_cores_the_kernel_names(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-cpp-python's default is half the logical CPUs: one thread on a 2-CPU VM without hyperthreads (7.0
    against 12.7 tokens/s with two for the 1.5B here). The kernel's topology says which CPUs are one core."""
    from mylm.providers import local_engine

    monkeypatch.setattr(local_engine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    # Two cores of two hyperthreads each.
    assert local_engine.physical_cores(_topology(tmp_path / "ht", {0: ("0", "0"), 1: ("0", "1"), 2: ("0", "0"),
                                                                  3: ("0", "1")})) == 2
    # Four cores, two packages with the same core ids.
    assert local_engine.physical_cores(_topology(tmp_path / "two", {0: ("0", "0"), 1: ("0", "1"), 2: ("1", "0"),
                                                                   3: ("1", "1")})) == 4
    # Only the CPUs this process may run on count; a kernel that does not say gives llama-cpp-python's default.
    monkeypatch.setattr(local_engine.os, "sched_getaffinity", lambda pid: {2})
    assert local_engine.physical_cores(tmp_path / "two") == 1
    assert local_engine.physical_cores(tmp_path / "none") is None


@pytest.mark.engine
def test_a_configured_thread_count_wins_over_the_cores(tiny: Path) -> None:
    from mylm.providers.local_engine import physical_cores

    assert forced(tiny, "a", n_threads=1).engine.llama.n_threads == 1
    default = forced(tiny, "b").engine.llama.n_threads
    assert default == (physical_cores() or default)
