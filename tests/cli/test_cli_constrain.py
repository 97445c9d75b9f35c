"""`--constrain` on the command line, in the config file and per profile, against real loopback servers."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli.cli_support import invoke
from tests.providers.native_servers import LlamaCppServer, OllamaServer


def test_insisting_on_a_grammar_ollama_cannot_honour_is_one_line_and_exit_2() -> None:
    with OllamaServer(["never sent"]) as server:
        result = invoke(["ask", "--base-url", server.base_url, "--provider", "ollama", "-m", "m",
                         "--constrain", "grammar", "hi"])
        assert not [r for r in server.requests if r.path == "/api/chat"]
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("mylm: error: --constrain grammar:") and "Traceback" not in result.stderr


def test_auto_is_the_default_and_sends_llama_server_a_lazy_grammar() -> None:
    with LlamaCppServer(["<final_answer>hello</final_answer>"]) as server:
        result = invoke(["ask", "--base-url", server.root_url, "--provider", "llamacpp", "hi"])
        body = [r for r in server.requests if r.path == "/completion"][0].body
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "hello"
    assert body["grammar_lazy"] is True and "<name>read_file</name>" in body["grammar"]


def test_a_profile_can_turn_constraining_off_and_a_flag_wins_over_it(tmp_path: Path) -> None:
    with LlamaCppServer(["plain answer", "<final_answer>x</final_answer>"]) as server:
        config = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f'[profiles.local]\nbase_url = "{server.root_url}"\nprovider = "llamacpp"\n'
                          'constrain = "off"\n')
        assert invoke(["ask", "-m", "local", "hi"]).exit_code == 0
        assert invoke(["ask", "-m", "local", "--constrain", "grammar", "hi"]).exit_code == 0
        bodies = [r.body for r in server.requests if r.path == "/completion"]
    assert "grammar" not in bodies[0]
    assert "<final_answer>" in bodies[1]["grammar"] and "grammar_lazy" not in bodies[1]
