"""`python -m mylm ask` as a user runs it: a real process against a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from mylm.protocol.parser import format_tool_call
from mylm.core.types import ToolCall
from tests.providers.servers import HTTPError, OpenAIServer

pytestmark = pytest.mark.slow


def tool_turn(command: str) -> str:
    return "I will run it.\n" + format_tool_call(ToolCall("execute_command", {"command": command}))


def mylm(args: list[str], env: dict[str, str], **overrides: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m mylm` detached from any terminal (as in CI), with the given settings."""
    return subprocess.run(
        [sys.executable, "-m", "mylm", *args],
        env={**env, **overrides},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,  # no controlling terminal: approvals cannot be asked
    )


def test_end_to_end_tool_call_real_output_and_answer(subprocess_env: dict[str, str]) -> None:
    with OpenAIServer() as server:
        server.script([tool_turn("echo e2e-$((6*7))"), "The command printed e2e-42."])
        done = mylm(["ask", "--yes", "What does it print?"], subprocess_env,
                    MYLM_BASE_URL=server.base_url, MYLM_MODEL="test-model", MYLM_API_KEY="sk-e2e-key")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "The command printed e2e-42.\n"
        assert "execute_command" in done.stderr
        first, second = (r for r in server.requests if r.method == "POST")
    body = first.body
    assert first.path == "/v1/chat/completions"
    assert body["model"] == "test-model" and body["stream"] is True
    # The first reply may be a template's reasoning (a later lone </think>), so </tool_code> stops only once
    # a reply has shown the template does not open reasoning (docs/parser.md).
    assert body["stop"] == ["<observation>"] and second.body["stop"] == ["</tool_code>", "<observation>"]
    assert body["messages"][0]["role"] == "system" and "<tool_definitions>" in body["messages"][0]["content"]
    assert body["messages"][-1] == {"role": "user", "content": "What does it print?"}
    assert first.headers["authorization"] == "Bearer sk-e2e-key"
    observation = second.body["messages"][-1]
    assert observation["role"] == "user"
    assert observation["content"].startswith("<observation>") and "e2e-42" in observation["content"]
    # The second request extends the first byte for byte (prompt caches keep hitting).
    assert second.body["messages"][: len(body["messages"])] == body["messages"]


def test_end_to_end_no_terminal_no_yes_refuses_the_tool(subprocess_env: dict[str, str], tmp_path) -> None:
    marker = tmp_path / "should-not-exist"
    with OpenAIServer() as server:
        server.script([tool_turn(f"touch {marker}"), "I was not allowed to run it."])
        done = mylm(["ask", "make the file"], subprocess_env, MYLM_BASE_URL=server.base_url, MYLM_MODEL="m")
        refusal = [r for r in server.requests if r.method == "POST"][1].body["messages"][-1]["content"]
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert "refused execute_command" in done.stderr and "--yes" in done.stderr
    assert "no one can be asked" in refusal


def test_end_to_end_json_lines(subprocess_env: dict[str, str]) -> None:
    with OpenAIServer() as server:
        server.script([tool_turn("echo j"), "done"])
        done = mylm(["ask", "--yes", "--json", "x"], subprocess_env, MYLM_BASE_URL=server.base_url, MYLM_MODEL="m")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[-1]["type"] == "run_end" and records[-1]["stop_reason"] == "final_answer"
    assert any(r["type"] == "tool_result" and "j" in r["output"] for r in records)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_end_to_end_endpoint_down_is_one_line_exit_1(subprocess_env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    done = mylm(["ask", "hello"], subprocess_env, MYLM_BASE_URL=url, MYLM_MODEL="m")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mylm: error: ") and url.rsplit("/", 1)[0] in lines[0]
    assert "MYLM_BASE_URL" in lines[0] or "--base-url" in lines[0]
    assert "gave up after" not in lines[0]  # nothing listens on a loopback port: no point retrying
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_end_to_end_bad_key_names_the_variable(subprocess_env: dict[str, str]) -> None:
    with OpenAIServer() as server:
        server.script([HTTPError(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})])
        done = mylm(["ask", "hello"], subprocess_env, MYLM_BASE_URL=server.base_url, MYLM_MODEL="m",
                    MYLM_API_KEY="sk-wrong-CANARY")
    assert done.returncode == 1
    assert "MYLM_API_KEY" in done.stderr and "Incorrect API key" in done.stderr
    assert "CANARY" not in done.stderr and "Traceback" not in done.stderr


def test_end_to_end_raw_completions_with_a_chat_format(subprocess_env: dict[str, str]) -> None:
    with OpenAIServer() as server:
        server.script([tool_turn("echo raw-$((2*21))"), "It printed raw-42."])
        done = mylm(["ask", "--yes", "--provider", "openai-completions", "--chat-format", "llama3", "go"],
                    subprocess_env, MYLM_BASE_URL=server.base_url, MYLM_MODEL="base")
        # (the provider's one probe of llama-server's `/tokenize` aside)
        first, second = (r for r in server.requests if server.is_generation(r.method, r.path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "It printed raw-42.\n"
    assert first.path == "/v1/completions"
    prompt = first.body["prompt"]
    assert prompt.startswith("<|start_header_id|>system<|end_header_id|>") and "<tool_definitions>" in prompt
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "<|eot_id|>" in first.body["stop"] and "</tool_code>" in second.body["stop"]
    assert "raw-42" in second.body["prompt"] and second.body["prompt"].startswith(prompt[: len(prompt) - 60])


def test_end_to_end_library_warnings_stay_quiet_without_verbose(subprocess_env: dict[str, str], tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([tool_turn("pwd"), "summary"]))
    done = mylm(["ask", "--yes", "--max-iterations", "1", "x"], subprocess_env, MYLM_SCRIPTED_LLM=str(script))
    assert done.returncode == 3 and done.stdout == "summary\n"
    assert "Max agentic iterations" not in done.stderr  # logged, but shown only with -v
    verbose = mylm(["ask", "-v", "--yes", "--max-iterations", "1", "x"], subprocess_env,
                   MYLM_SCRIPTED_LLM=str(script))
    assert "Max agentic iterations reached without final response" in verbose.stderr
