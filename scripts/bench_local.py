"""Benchmark: `--provider local` load time and generation speed, against llama-cpp-python's own streaming
completion of the same prompt and token count, measured in the same run (the ratio is mylm's overhead).

    python scripts/bench_local.py [MODEL.gguf] [--tokens N] [--runs N]

With no model, the cached SmolLM2 test model (scripts/install_models.sh) is used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from mylm.llm import FinishChunk, LLMRequest
from mylm.providers import Endpoint, create_llm
from mylm.providers.local import LocalModel
from mylm.core.types import Message

DEFAULT_MODEL = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "mylm" / "test-models" / "smollm2-135m.gguf"  # scripts/install_models.sh names files as mylm's catalogue
)
PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", nargs="?", default=str(DEFAULT_MODEL))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    started = time.perf_counter()
    llm = create_llm(Endpoint(provider="local", model=args.model, options={"temperature": 0.0}))
    first_load = time.perf_counter() - started
    started = time.perf_counter()
    create_llm(Endpoint(provider="local", model=args.model, options={"temperature": 0.0}))
    second_load = time.perf_counter() - started
    assert isinstance(llm, LocalModel)
    llama = llm.engine.llama
    messages = (Message("system", "You are a storyteller."), Message("user", PROMPT))
    prompt_tokens, _ = llm.render(LLMRequest(messages))

    def mylm_rate() -> float:
        request = LLMRequest(messages, max_tokens=args.tokens)
        began = time.perf_counter()
        finish = [c for c in llm.stream(request) if isinstance(c, FinishChunk)][0]
        assert finish.usage is not None
        return finish.usage.completion_tokens / (time.perf_counter() - began)

    def raw_rate() -> float:
        # One streamed chunk per token (English text; a UTF-8 character split over tokens would merge).
        began = time.perf_counter()
        produced = 0
        for _ in llama.create_completion(prompt_tokens, max_tokens=args.tokens, stream=True, temperature=0.0):
            produced += 1
        return produced / (time.perf_counter() - began)

    mylm_rate(), raw_rate()  # warm-up: the prompt is in the KV cache for both from here on
    mine, raw = [], []
    for _ in range(args.runs):
        mine.append(mylm_rate())
        raw.append(raw_rate())
    print(f"model: {Path(args.model).name}  (context {llm.engine.n_ctx}, prompt {len(prompt_tokens)} tokens)")
    print(f"load, first in the process:     {first_load:8.2f} s")
    print(f"load, second (shared engine):   {second_load * 1000:8.2f} ms")
    ours, theirs = statistics.median(mine), statistics.median(raw)
    print(f"llama-cpp-python create_completion (baseline): {theirs:7.1f} tokens/s (median of {args.runs})")
    print(f"mylm --provider local stream:                  {ours:7.1f} tokens/s  ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
