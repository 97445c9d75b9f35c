"""Measure docs/benchmarks.md's model x constrain x route table in one session: serve each real test model
with llama-cpp-python, run eval tasks through mylm's providers, and print one markdown row per combination.

Usage: python scripts/eval_table.py [--tasks read-secret,find-file] [--max-tokens 160] [--max-iterations 2]
Needs the engine (scripts/install_engine.sh) and the models (scripts/install_models.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mylm.evaluation import load_suite, run_task, totals  # noqa: E402
from mylm.evaluation.suite import default_suite_path  # noqa: E402
from mylm.providers import Endpoint, create_llm  # noqa: E402
from tests.providers.engine_support import EngineServer  # noqa: E402

#: label -> (file, [(provider, chat format)])
MODELS = {
    "SmolLM2-135M-Instruct Q4_1": ("smollm2-135m.gguf", [("openai", None), ("openai-completions", "chatml")]),
    "Gemma 3 270M Q4_K_M": ("gemma3-270m.gguf", [("openai-completions", "gemma")]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", default="read-secret,find-file")
    parser.add_argument("--modes", default="grammar,off")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--max-iterations", type=int, default=2)
    args = parser.parse_args()
    models_dir = Path(os.environ.get("MYLM_TEST_MODELS") or Path.home() / ".cache/mylm/test-models")
    names = args.tasks.split(",")
    tasks = [t for t in load_suite(default_suite_path()) if t.name in names]
    print("| model | route | constrain | protocol-valid turns | runs with a tool call | tasks solved | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for label, (file, routes) in MODELS.items():
        server = EngineServer(models_dir / file, n_ctx=4096, threads=2)
        try:
            server.wait_ready(timeout=180)
            for provider, chat_format in routes:
                route = provider + (f" ({chat_format})" if chat_format else " (GGUF template)")
                for mode in args.modes.split(","):
                    llm = create_llm(Endpoint(provider=provider, base_url=server.base_url, model="m",
                                              chat_format=chat_format, options={"temperature": 0.0, "seed": 7}))
                    results = [run_task(llm, t, constrain=mode, max_iterations=args.max_iterations,  # type: ignore[arg-type]
                                        timeout=600, max_tokens=args.max_tokens) for t in tasks]
                    for r in results:
                        print(f"<!-- {label} {route} {mode} {r.task}: stop={r.stop_reason} answer={r.answer[:80]!r} -->",
                              file=sys.stderr, flush=True)
                    s = totals(results)
                    est = "~" if s.tokens_estimated else ""
                    print(f"| {label} | {route} | {mode} | {s.valid_turns}/{s.turns} | {s.runs_with_tool}/{s.runs} | "
                          f"{s.solved}/{s.runs} | {est}{s.tokens_per_second:.1f} |", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
