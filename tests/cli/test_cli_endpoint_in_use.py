"""The endpoint in use is always visible and kept (issue 20, item 2): `mylm config`, the `chat` banner and the saved
session say the endpoint that really runs (the in-process model when it does, not the Ollama URL), and a session
resumes with the endpoint, provider, model and chat format it was made with unless flags say otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import transcripts, write_script

from mylm.sessions import load
from tests.providers.servers import OpenAIServer

pytestmark = pytest.mark.slow


def _mylm(args: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mylm", *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=60, start_new_session=True)


@pytest.fixture
def pulled(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A user who installed the local engine and pulled smollm2-135m, and configured nothing else.

    The engine is a stand-in package that only has to be found (these commands never load a model: the model's
    replies come from a MYLM_SCRIPTED_LLM script), and the pulled model a file that starts like a GGUF.
    """
    engine = tmp_path / "engine" / "llama_cpp"
    engine.mkdir(parents=True)
    (engine / "__init__.py").write_text("raise ImportError('a stand-in: never loaded in these tests')\n")
    models = Path(subprocess_env["XDG_CACHE_HOME"]) / "mylm" / "models"
    models.mkdir(parents=True)
    (models / "smollm2-135m.gguf").write_bytes(b"GGUF" + bytes(64))
    path = f"{tmp_path / 'engine'}:{subprocess_env['PYTHONPATH']}"
    return dict(subprocess_env, PYTHONPATH=path)


def test_config_says_the_in_process_model_runs_after_a_pull(pulled: dict[str, str]) -> None:
    done = _mylm(["config"], pulled)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    gguf = Path(pulled["XDG_CACHE_HOME"]) / "mylm" / "models" / "smollm2-135m.gguf"
    assert lines["endpoint"].split(None, 1)[1] == f"the local model smollm2-135m (in-process: {gguf})"
    assert "11434" not in done.stdout
    assert lines["base_url"].split()[1:] == ["-", "not", "used:", "the", "model", "runs", "in-process"]
    assert lines["provider"].split()[1] == "local" and lines["model"].split()[1] == "smollm2-135m"
    data = json.loads(_mylm(["config", "--json"], pulled).stdout)
    assert data["endpoint_in_use"] == {"provider": "local", "base_url": None, "model": "smollm2-135m",
                                       "chat_format": None, "path": str(gguf)}


def test_config_columns_line_up(subprocess_env: dict[str, str]) -> None:
    done = _mylm(["config"], subprocess_env)
    rows = [line for line in done.stdout.splitlines()[5:] if line.strip() and not line.startswith("commands")]
    starts = {len(line) - len(line[line.index(" "):].lstrip()) for line in rows}
    assert len(starts) == 1, done.stdout  # every value starts in the same column (max_response_chars included)
    sources = {line.index(line.split()[-1]) for line in rows if line.split()[-1] in ("default", "unset")}
    assert len(sources) == 1, done.stdout


def test_chat_banner_and_session_name_the_in_process_model(pulled: dict[str, str], tmp_path: Path) -> None:
    env = dict(pulled, MYLM_SCRIPTED_LLM=str(write_script(tmp_path / "s.json", ["Hello."])))
    done = _mylm(["chat"], env, stdin="hi\n")
    assert done.returncode == 0, done.stderr
    banner = done.stderr.splitlines()[0]
    assert banner.startswith("mylm chat with the local model smollm2-135m (in-process: ")
    assert "11434" not in done.stderr
    header = load(transcripts()[0]).header
    assert header["endpoint"] == {"provider": "local", "base_url": None, "model": "smollm2-135m",
                                  "chat_format": None}
    assert header["provider"] == "local" and header["base_url"] is None


def test_chat_banner_names_the_server_in_use(subprocess_env: dict[str, str], tmp_path: Path) -> None:
    env = dict(subprocess_env, MYLM_SCRIPTED_LLM=str(write_script(tmp_path / "s.json", ["Hello."])))
    done = _mylm(["chat", "--base-url", "http://user:pw@127.0.0.1:9/v1", "-m", "qwen"], env, stdin="hi\n")
    assert done.stderr.splitlines()[0] == (
        "mylm chat with qwen at http://[REDACTED]@127.0.0.1:9/v1 (openai). /help for commands, Ctrl-D to leave."
    )


def test_continue_after_a_base_url_run_goes_back_to_that_endpoint(subprocess_env: dict[str, str]) -> None:
    with OpenAIServer() as server, OpenAIServer() as other:
        server.script(["First answer.", "Second answer."])
        other.script(["From the other one."])
        first = _mylm(["ask", "--base-url", server.base_url, "-m", "test-model", "one"], subprocess_env)
        assert first.returncode == 0, first.stderr
        again = _mylm(["ask", "--continue", "two"], subprocess_env)
        assert again.returncode == 0, again.stderr
        assert again.stdout == "Second answer.\n"
        second = [r for r in server.requests if r.method == "POST"][1].body
        assert second["model"] == "test-model"
        assert [m["content"] for m in second["messages"][1:]] == ["one", "First answer.", "two"]
        # A flag naming another endpoint wins over the session's.
        moved = _mylm(["ask", "--continue", "--base-url", other.base_url, "-m", "m2", "three"], subprocess_env)
        assert moved.stdout == "From the other one.\n", moved.stderr
        assert [r.body["model"] for r in other.requests if r.method == "POST"] == ["m2"]


def test_continue_keeps_the_provider_and_chat_format(subprocess_env: dict[str, str]) -> None:
    with OpenAIServer() as server:
        server.script(["First.", "Second."])
        first = _mylm(["ask", "--provider", "openai-completions", "--chat-format", "llama3", "--base-url",
                       server.base_url, "-m", "base", "one"], subprocess_env)
        assert first.returncode == 0, first.stderr
        header = load(transcripts()[0]).header
        assert header["endpoint"] == {"provider": "openai-completions", "base_url": server.base_url,
                                      "model": "base", "chat_format": "llama3"}
        again = _mylm(["ask", "--continue", "two"], subprocess_env)
        assert again.returncode == 0, again.stderr
        # (the provider's one probe of llama-server's `/tokenize` aside)
        request = [r for r in server.requests if server.is_generation(r.method, r.path)][1]
    assert request.path == "/v1/completions"
    assert request.body["prompt"].startswith("<|start_header_id|>system<|end_header_id|>")
    assert "two" in request.body["prompt"]


def test_pull_says_which_endpoint_ask_will_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from mylm.cli.models import _after_pull

    engine = tmp_path / "engine" / "llama_cpp"
    engine.mkdir(parents=True)
    (engine / "__init__.py").write_text("raise ImportError('a stand-in')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "engine"))
    models = Path(os.environ["XDG_CACHE_HOME"]) / "mylm" / "models"
    models.mkdir(parents=True)
    (models / "smollm2-135m.gguf").write_bytes(b"GGUF" + bytes(64))
    assert _after_pull("smollm2-135m") == 'mylm now runs it in-process (nothing else is configured): mylm ask "..."'
    monkeypatch.setenv("MYLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert _after_pull("smollm2-135m") == (
        'run it: mylm ask --provider local -m smollm2-135m "..."; the configured endpoint stays in use: '
        "the server's default model at http://127.0.0.1:9/v1 (openai)"
    )
