"""`mylm ask --provider X` end to end against each wire format's loopback server, with a real tool run."""

from __future__ import annotations

import pytest

from tests.providers.native_servers import AnthropicServer, GeminiServer, LlamaCppServer, OllamaServer
from tests.providers.servers import LoopbackServer, OpenAIServer
from tests.test_end_to_end import mylm, tool_turn

pytestmark = pytest.mark.slow

CASES = [
    ("openai", OpenAIServer, []),
    ("openai-completions", OpenAIServer, ["--chat-format", "chatml"]),
    ("ollama", OllamaServer, []),
    ("ollama", OllamaServer, ["--chat-format", "llama3"]),  # /api/generate with raw: true
    ("llamacpp", LlamaCppServer, []),
    ("anthropic", AnthropicServer, []),
    ("gemini", GeminiServer, []),
]


@pytest.mark.parametrize(("provider", "server_class", "extra"), CASES,
                         ids=[f"{p}{'-' + e[1] if e else ''}" for p, _, e in CASES])
def test_end_to_end_provider_runs_a_tool_and_answers(
    provider: str, server_class: type[LoopbackServer], extra: list[str], subprocess_env: dict[str, str]
) -> None:
    with server_class() as server:
        server.script([tool_turn("echo wire-$((6*7))"), f"The {provider} answer: wire-42."])
        base = server.base_url if server_class is OpenAIServer else server.root_url
        done = mylm(["ask", "--yes", "--provider", provider, *extra, "--base-url", base, "-m", "test-model", "go"],
                    subprocess_env, MYLM_API_KEY="key-e2e")
        posts = [r for r in server.requests if server.is_generation(r.method, r.path)]
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"The {provider} answer: wire-42.\n"
    assert len(posts) == 2
    # llama-server is sent the messages' text as token ids: read the prompt as the server does.
    sent = [server.prompt_text(p) if isinstance(server, LlamaCppServer) else p.raw.decode() for p in posts]
    assert "wire-42" in sent[1] and "&lt;observation" not in sent[1]  # the command's real output
    assert "<tool_definitions>" in sent[0]
