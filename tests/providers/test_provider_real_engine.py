"""The OpenAI providers against a real inference engine (llama-cpp-python's server) forced by a GBNF grammar."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from mylm.llm import TextChunk
from mylm.protocol.parser import parse_completion
from mylm.providers import Endpoint, create_llm, list_models
from tests.providers.engine_support import EngineServer, engine_missing, exact_grammar, write_tiny_llama
from tests.providers.helpers import TOOL_CALL, collect, read_until_call, request

pytestmark = [pytest.mark.engine, pytest.mark.slow]

CALL_TURN = f"I will list the files.\n{TOOL_CALL}\n<observation>\ninvented\n</observation>"
ANSWER = 'There are 3 files: "a.py", b.txt and c.md.'


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    missing = engine_missing()
    if missing:
        if os.environ.get("MYLM_REQUIRE_ENGINE") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    model = write_tiny_llama(tmp_path_factory.mktemp("engine") / "tiny-llama.gguf")
    server = EngineServer(model)
    try:
        server.wait_ready(timeout=120)
        yield server
    finally:
        server.stop()


def forced(engine: EngineServer, provider: str, text: str, **settings: object) -> object:
    """An LLM for the engine whose every completion is forced to be `text` (plus the engine's stop handling)."""
    return create_llm(
        Endpoint(
            provider=provider,
            base_url=engine.base_url,
            model="tiny",
            options={"grammar": exact_grammar(text)},
            **settings,
        )  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("provider", ["openai", "openai-completions"])
def test_real_engine_streams_a_tool_call_cut_at_the_stop_then_an_answer(
    engine: EngineServer, provider: str
) -> None:
    settings = {"chat_format": "chatml"} if provider == "openai-completions" else {}
    call_llm = forced(engine, provider, CALL_TURN, **settings)
    chunks = list(call_llm.stream(request()))  # type: ignore[attr-defined]
    text, _, finish = collect(chunks)
    # The engine itself stopped at `</tool_code>` and left it out, as the OpenAI API specifies.
    assert text == f"I will list the files.\n{TOOL_CALL.removesuffix('</tool_code>')}"
    assert finish is not None and finish.reason == "stop"
    assert sum(isinstance(c, TextChunk) for c in chunks) > 5, "the text must arrive streamed, token by token"
    # What the agent makes of it: the block without its end tag is a complete call.
    parsed = parse_completion(text)
    assert [c.name for c in parsed.tool_calls] == ["execute_command"] and parsed.thought == "I will list the files."

    if provider == "openai-completions":
        # llama-cpp-python's server has no llama.cpp `/tokenize` at its root (it serves `/extras/tokenize`):
        # probed once, found missing, and the prompt went as the rendered string, with no error.
        assert call_llm.tokenizer.available is False  # type: ignore[attr-defined]

    answer_llm = forced(engine, provider, ANSWER, **settings)
    text, _, finish = collect(answer_llm.stream(request("What is there?")))  # type: ignore[attr-defined]
    assert text == ANSWER
    # llama-cpp-python reports no usage in streams (the finish chunk's usage stays None); nothing to sum here.
    assert finish is not None and finish.reason == "stop"


def test_real_engine_token_limit_is_reported_as_length(engine: EngineServer) -> None:
    llm = forced(engine, "openai", ANSWER)
    text, _, finish = collect(llm.stream(request(max_tokens=5)))  # type: ignore[attr-defined]
    assert ANSWER.startswith(text) and 0 < len(text) < len(ANSWER)
    assert finish is not None and finish.reason == "length"


def test_real_engine_early_close_then_the_next_call_works(engine: EngineServer) -> None:
    llm = forced(engine, "openai", CALL_TURN + " and then a long ramble " * 20)
    seen = read_until_call(llm.stream(request(stop=())))  # type: ignore[attr-defined]
    assert seen.startswith("I will list the files.\n<tool_code>")
    assert collect(forced(engine, "openai", ANSWER).stream(request()))[0] == ANSWER  # type: ignore[attr-defined]


def test_real_engine_lists_its_model(engine: EngineServer) -> None:
    assert list_models(Endpoint(base_url=engine.base_url)) != []
