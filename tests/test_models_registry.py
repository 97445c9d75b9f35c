"""The model registry (issue 13, item 13): packaged families, the user's overrides, and where mylm uses them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mylm import Agent
from mylm.config import Settings
from mylm.core.errors import ConfigError
from mylm.models.registry import ModelInfo, describe, known_models, lookup, user_registry_path
from mylm.testing import ScriptedLLM


@pytest.mark.parametrize(
    ("name", "family", "context"),
    [
        ("qwen3:8b", "qwen3", 32768),
        ("Qwen/QwQ-32B-GGUF", "qwq", 131072),
        ("llama3.1:8b-instruct-q4_K_M", "llama3.1+", 131072),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3", 8192),
        ("models/gemini-1.5-pro", "gemini", 1048576),
        ("o3-mini", "openai-reasoning", 200000),
    ],
)
def test_lookup_finds_the_family(name: str, family: str, context: int) -> None:
    info = lookup(name)
    assert info is not None and info.family == family and info.context_window == context


@pytest.mark.parametrize(
    "name",
    ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen2.5-coder:0.5b"],
)
def test_the_qwen_coder_models_mylm_pulls_are_known_with_their_tool_dialect(name: str) -> None:
    info = lookup(name)
    assert info is not None and info.family == "qwen2.5" and info.context_window == 32768
    assert info.chat_format == "chatml" and info.tool_dialect == "hermes"
    assert "tool calls hermes" in describe(info)


def test_every_model_mylm_pulls_has_family_facts() -> None:
    from mylm.models.catalogue import CATALOGUE

    assert {name: getattr(lookup(name), "context_window", None) for name in CATALOGUE} == {
        "smollm2-135m": 8192, "gemma3-270m": 131072, "qwen2.5-coder-0.5b": 32768, "qwen2.5-coder-1.5b": 32768,
    }


def test_lookup_of_an_unknown_model_is_none() -> None:
    assert lookup("my-own-finetune") is None and lookup(None) is None


def test_reasoning_format_says_whether_the_template_opens_think() -> None:
    qwq, qwen3 = lookup("qwq:32b"), lookup("qwen3:4b")
    assert qwq is not None and qwq.reasoning == "think" and qwq.opens_think
    assert qwen3 is not None and qwen3.reasoning == "think" and not qwen3.opens_think
    reasoning = lookup("o3-mini")
    assert reasoning is not None and not reasoning.stop_strings


def test_user_file_overrides_a_family_field_by_field_and_adds_new_ones() -> None:
    path = user_registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '[[model]]\nfamily = "qwen3"\ncontext_window = 65536\n\n'
        '[[model]]\nfamily = "house"\nmatch = ["house-*"]\ncontext_window = 4096\nchat_format = "chatml"\n'
    )
    qwen3 = lookup("qwen3:8b")
    assert qwen3 is not None and qwen3.context_window == 65536 and qwen3.reasoning == "think"
    assert qwen3.source == str(path)
    assert lookup("house-7b") == ModelInfo("house", ("house-*",), 4096, chat_format="chatml", source=str(path))
    assert [i.family for i in known_models()][:2] == ["qwen3", "house"]


def test_a_bad_user_file_is_a_config_error_naming_it() -> None:
    path = user_registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[[model]]\nfamily = "x"\ncontext_window = "big"\n')
    with pytest.raises(ConfigError, match=f"model registry {path}.*context_window must be a positive number"):
        lookup("x")
    path.write_text('[[model]]\nfamily = "x"\ntool_dialect = 3\n')
    with pytest.raises(ConfigError, match="tool_dialect must be a tool-call dialect name, not 3"):
        lookup("x")


def test_compaction_budget_falls_back_to_the_registry() -> None:
    from mylm.cli.runner import context_budget

    assert context_budget(Settings(model="qwen3:8b")) == 32768
    assert context_budget(Settings(model="qwen3:8b", context_tokens=1000)) == 1000
    assert context_budget(Settings(model="unknown")) is None


def test_raw_route_uses_the_registrys_chat_format() -> None:
    from mylm.cli.runner import make_endpoint

    assert make_endpoint(Settings(provider="openai-completions", model="llama3.1:8b")).chat_format == "llama3"
    assert make_endpoint(Settings(provider="openai", model="llama3.1:8b")).chat_format is None
    chosen = Settings(provider="openai-completions", model="llama3.1:8b", chat_format="chatml")
    assert make_endpoint(chosen).chat_format == "chatml"


def test_models_that_refuse_stop_strings_get_none() -> None:
    llm = ScriptedLLM(["a", "b"])
    Agent(llm, stop_strings=False).run("x")
    assert llm.requests[0].stop == ()
    Agent(llm).run("y")
    assert llm.requests[1].stop != ()


def test_cli_models_shows_what_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    import mylm.providers
    from tests.cli.cli_support import invoke

    monkeypatch.setattr(mylm.providers, "list_models", lambda endpoint: ["qwen3:8b", "my-finetune"])
    result = invoke(["models", "--base-url", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("qwen3:8b") and "context 32768" in lines[0] and "<think>" in lines[0]
    assert lines[1] == "my-finetune"
    known = invoke(["models", "--known"])
    assert known.exit_code == 0 and "qwen3*" in known.stdout and str(user_registry_path()) in known.stderr


def test_cli_ask_with_a_model_that_refuses_stops_sends_none() -> None:
    from tests.cli.cli_support import invoke

    llm = ScriptedLLM(["ok"])
    assert invoke(["ask", "-m", "o3-mini", "x"], llm).exit_code == 0
    assert llm.requests[0].stop == ()
    assert os.environ["XDG_CONFIG_HOME"]  # the user file looked up is the isolated one
    assert Path(os.environ["XDG_CONFIG_HOME"]) in user_registry_path().parents
