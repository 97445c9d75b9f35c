"""`mylm ask --provider local` end to end in real processes: a GGUF run in-process, no server anywhere.

The tiny random-weight GGUF is forced by a GBNF grammar (a provider option in the user's config file), so the
answers are known; the real SmolLM2 from the package index answers freely.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import finish, spawn

from tests.providers.engine_support import exact_grammar, write_tiny_llama
from tests.providers.local_support import need_engine, real_model

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ANSWER = "The answer is 42."
LIST_CALL = (
    'Looking.\n<tool_code>\n<name>list_dir</name>\n<parameters>\n{"path": "."}\n</parameters>\n</tool_code>'
)
#: A bound on a child process that only catches hangs.
HANG_GUARD = 120


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_engine()
    return write_tiny_llama(tmp_path_factory.mktemp("local-cli") / "tiny.gguf")


def configure(env: dict[str, str], **settings: object) -> dict[str, str]:
    """Write the isolated user's config file (top-level settings; values as TOML via JSON); return `env`."""
    path = Path(env["XDG_CONFIG_HOME"]) / "mylm" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for key, value in settings.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    return env


def tiny_config(env: dict[str, str], grammar: str, **settings: object) -> dict[str, str]:
    """Settings for the tiny model, whose byte-level vocabulary makes the system prompt ~4k tokens."""
    return configure(env, **{"context_tokens": 8192, **settings, "options": {"grammar": grammar}})


def mylm(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mylm", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        stdin=subprocess.DEVNULL,
    )


def test_ask_answers_from_a_gguf_in_process_and_reports_load_and_speed_with_v(
    tiny: Path, subprocess_env: dict[str, str]
) -> None:
    env = tiny_config(subprocess_env, exact_grammar(ANSWER))
    done = mylm(["ask", "--provider", "local", "-m", str(tiny), "-v", "What is the answer?"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER
    assert "loaded tiny.gguf in" in done.stderr and "context 8192 tokens; trained on 2048" in done.stderr
    assert "tokens/s" in done.stderr and "Traceback" not in done.stderr


def test_the_iteration_limit_ends_a_model_that_only_calls_tools(
    tiny: Path, subprocess_env: dict[str, str]
) -> None:
    env = tiny_config(subprocess_env, exact_grammar(LIST_CALL))
    done = mylm(["ask", "--provider", "local", "-m", str(tiny), "--max-iterations", "2", "list"], env)
    assert done.returncode == 3, done.stderr
    assert "stopped after 2 iterations" in done.stderr
    # The calls really ran: list_dir's observation names the workspace's file.
    assert "list_dir" in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_ctrl_c_stops_local_generation_and_exits_130(tiny: Path, subprocess_env: dict[str, str]) -> None:
    # A grammar with no end: the answer would go on for thousands of tokens.
    endless = 'root ::= "Counting:" ticks\nticks ::= " tick" ticks'
    env = tiny_config(subprocess_env, endless, context_tokens=16384, max_tokens=12000)
    child = spawn(["ask", "--provider", "local", "-m", str(tiny), "count"], env)
    child.expect("Counting: tick tick")
    child.sendintr()
    output, code = finish(child)
    assert code == 130 and "mylm: interrupted" in output and "Traceback" not in output


@pytest.mark.parametrize("content", [None, b"just some text", b"GGUF\x03\x00\x00\x00" + b"\xff" * 40])
def test_a_missing_or_bad_model_file_is_one_line_and_exit_2(
    tiny: Path, subprocess_env: dict[str, str], tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    done = mylm(["ask", "--provider", "local", "-m", str(path), "hi"], subprocess_env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mylm: error: ") and str(path) in lines[0], done.stderr


def test_with_nothing_configured_ask_says_how_to_fetch_a_model_then_uses_it(
    tiny: Path, subprocess_env: dict[str, str]
) -> None:
    done = mylm(["ask", "hi"], subprocess_env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mylm: error: no local model is downloaded: `mylm models pull qwen2.5-coder-1.5b` fetches a small one "
        "(1.1 GB), "
        "or point mylm at a model server with --base-url / MYLM_BASE_URL"
    ]
    cache = Path(subprocess_env["XDG_CACHE_HOME"]) / "mylm" / "models"
    cache.mkdir(parents=True)
    shutil.copyfile(tiny, cache / "tiny-test.gguf")
    env = tiny_config(subprocess_env, exact_grammar(ANSWER))
    done = mylm(["ask", "-v", "hi"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER and "loaded tiny-test.gguf" in done.stderr
    listed = mylm(["models", "list", "--local"], env)
    assert "tiny-test" in listed.stdout and "(default)" in listed.stdout


def test_with_nothing_configured_batch_runs_the_pulled_model_as_ask_does(
    tiny: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    # Issue 30: `ask` ran the pulled model, `batch` failed every task with "ollama needs a model name".
    cache = Path(subprocess_env["XDG_CACHE_HOME"]) / "mylm" / "models"
    cache.mkdir(parents=True)
    shutil.copyfile(tiny, cache / "tiny-test.gguf")
    env = tiny_config(subprocess_env, exact_grammar(ANSWER))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "hello"}\n')
    out = tmp_path / "out.jsonl"
    done = mylm(["batch", str(tasks), "-o", str(out), "-j", "2"], env)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["a", "b"]
    assert all(r["final_text"] == ANSWER and r["stop_reason"] == "final_answer" for r in records), records


def test_the_real_smollm2_answers_through_the_cli(subprocess_env: dict[str, str]) -> None:
    model = real_model()
    env = configure(subprocess_env, options={"temperature": 0.0, "seed": 7})
    done = mylm(
        [
            "ask",
            "--provider",
            "local",
            "-m",
            str(model),
            "-v",
            "--max-iterations",
            "3",
            # Unconstrained: this is the plain path (the protocol grammar on real models is tested with it).
            "--constrain",
            "off",
            "Say hello in one short sentence.",
        ],
        env,
    )
    # Greedy decoding: at temperature 0 this small model answers in prose rather than calling a tool.
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "<|im_end|>" not in done.stdout
    assert f"loaded {model.name}" in done.stderr and "tokens/s" in done.stderr


@pytest.mark.parametrize(
    "args", [["--help"], ["ask", "--help"], ["models", "--help"], ["models", "pull", "--help"]]
)
def test_help_never_imports_the_engine(subprocess_env: dict[str, str], args: list[str]) -> None:
    code = (
        "import sys; from mylm.cli import main; sys.argv = ['mylm', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('llama_cpp' in sys.modules, 'requests' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=subprocess_env, capture_output=True, text=True, check=True
    )
    assert done.stderr.strip() == "False False" and "Usage:" in done.stdout


def test_without_the_extra_the_default_server_error_offers_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from mylm._version import install_command
    from mylm.cli import runner
    from mylm.config import load_settings
    from mylm.core.errors import EndpointUnreachableError
    from mylm.llm import LLMRequest
    from mylm.testing import ScriptedLLM
    from mylm.core.types import Message

    settings = load_settings({})
    assert runner.nothing_configured(settings)
    monkeypatch.setattr("mylm.providers.local_engine.engine_available", lambda: True)
    assert runner.make_endpoint(settings).provider == "local"
    monkeypatch.setattr("mylm.providers.local_engine.engine_available", lambda: False)
    assert runner.make_endpoint(settings).provider is None  # a local Ollama, as before
    refused = EndpointUnreachableError("cannot reach the ollama endpoint at http://localhost:11434: refused")
    wrapped = runner._SuggestLocal(ScriptedLLM([refused]))
    with pytest.raises(EndpointUnreachableError) as caught:
        list(wrapped.stream(LLMRequest((Message("user", "hi"),))))
    assert str(caught.value) == (
        "cannot reach the ollama endpoint at http://localhost:11434: refused; or run a model inside mylm: "
        f"{install_command('local')} && mylm models pull qwen2.5-coder-1.5b"
    )
    configured = load_settings({"base_url": "http://127.0.0.1:8080/v1"})
    assert not runner.nothing_configured(configured)


def test_the_gguf_context_drives_compaction_unless_context_tokens_says(tiny: Path) -> None:
    import click

    from mylm.cli import runner
    from mylm.config import load_settings

    ctx = click.Context(click.Command("ask"), obj={})
    settings = load_settings({"provider": "local", "model": str(tiny)})
    agent = runner.build_agent(ctx, settings, None, [])  # type: ignore[arg-type]
    assert agent.compactor is not None and agent.compactor.budget == 2048  # the GGUF's context_length
    flags = {"provider": "local", "model": str(tiny)}
    settings = load_settings(flags, environ={"MYLM_CONTEXT_TOKENS": "4096"})
    agent = runner.build_agent(ctx, settings, None, [])  # type: ignore[arg-type]
    assert agent.compactor is not None and agent.compactor.budget == 4096
    assert agent.llm.engine.n_ctx == 4096  # type: ignore[attr-defined]  # the context allocated to match
