"""Traces of runs, exported over real OTLP/HTTP to a loopback receiver that decodes the protobuf."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.delegate.mcp_support import call, child_env, stdio, write_script
from tests.providers.servers import Completion, OpenAIServer
from tests.telemetry.otlp_receiver import OTLPReceiver, Span


def _missing() -> str | None:
    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto"):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ModuleNotFoundError:
            return module
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=f"{_missing()} is not installed: pip install 'mylm[otel,test]'"),
]

API_KEY = "sk-canary-apikey-7Q2mZ9xW4vK8rT1n"
DOTENV_VALUE = "canary-dotenv-9f8e7d6c5b4a"
PROMPT_WORD = "zebrafinch"
CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


def _ask(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mylm", "ask", *args], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL, check=False)


def _by_name(spans: list[Span]) -> dict[str, list[Span]]:
    found: dict[str, list[Span]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def _capture_content(home: Path) -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("otel_capture_content = true\n")


@pytest.mark.parametrize("capture", [False, True], ids=["shape-only", "content"])
def test_an_ask_run_is_one_trace_with_the_genai_span_tree_and_no_secret(
    capture: bool, isolated_user_state: Path
) -> None:
    workspace = isolated_user_state
    (workspace / ".env").write_text(f"DB_PASSWORD={DOTENV_VALUE}\n")
    if capture:
        _capture_content(workspace)
    replies = [Completion(call("read_file", path=".env")), Completion("The file sets a database password.")]
    with OTLPReceiver() as receiver, OpenAIServer(replies) as model:
        env = child_env(MYLM_API_KEY=API_KEY, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
        done = _ask(["--yes", "--base-url", model.base_url, "-m", "test-model",
                     f"what is in .env? {PROMPT_WORD} {API_KEY}"],
                    env, workspace)
        assert done.returncode == 0, done.stderr
        spans = receiver.wait_for("invoke_agent mylm")
    assert set(receiver.paths) == {"/v1/traces"}
    named = _by_name(spans)
    (run,) = named["invoke_agent mylm"]
    assert run.parent_id == "" and {s.trace_id for s in spans} == {run.trace_id}
    assert run.resource["service.name"] == "mylm"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent" and run.attributes["mylm.command"] == "ask"
    assert run.attributes["gen_ai.system"] == "openai" and run.attributes["gen_ai.request.model"] == "test-model"
    assert run.attributes["mylm.stop_reason"] == "final_answer" and run.attributes["mylm.iterations"] == 2
    assert run.attributes["gen_ai.usage.input_tokens"] == 34
    first, second = sorted(named["iteration 1"] + named["iteration 2"], key=lambda s: s.attributes["mylm.iteration"])
    assert first.parent_id == second.parent_id == run.span_id
    chats = sorted(named["chat test-model"], key=lambda s: s.start)
    assert [c.parent_id for c in chats] == [first.span_id, second.span_id]
    for chat, finish in zip(chats, ["tool_use", "end_turn"]):
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.system"] == "openai" and chat.attributes["gen_ai.request.model"] == "test-model"
        assert chat.attributes["gen_ai.response.finish_reasons"] == [finish]
        assert chat.attributes["gen_ai.usage.input_tokens"] == 17 and "gen_ai.usage.output_tokens" in chat.attributes
        assert 0 <= chat.attributes["gen_ai.response.time_to_first_chunk"] <= (chat.end - chat.start) / 1e9
    (tool,) = named["execute_tool read_file"]
    assert tool.parent_id == first.span_id
    assert tool.attributes["gen_ai.tool.name"] == "read_file" and tool.attributes["mylm.tool.status"] == "completed"
    assert tool.attributes["mylm.tool.outcome"] == "ok" and tool.attributes["mylm.tool.duration"] >= 0
    # --yes granted it: the read of .env ran, so its value was in the run to leak.
    assert tool.attributes["mylm.sandbox.profile"] == "workspace-write"
    assert ("mylm.approval", {"mylm.approval.decision": "allow", "mylm.approval.grant": "workspace-write"}) in tool.events
    exported = b"".join(receiver.bodies)
    assert API_KEY.encode() not in exported and DOTENV_VALUE.encode() not in exported
    if capture:
        assert PROMPT_WORD.encode() in exported and b"DB_PASSWORD" in exported
        assert "gen_ai.tool.call.result" in tool.attributes and "gen_ai.input.messages" in run.attributes
    else:
        assert PROMPT_WORD.encode() not in exported and b"DB_PASSWORD" not in exported
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))
                       for s in spans for k in s.attributes)


def test_corrections_are_events_on_their_iteration_and_failed_tools_are_errors(isolated_user_state: Path) -> None:
    replies = [Completion(""), Completion(call("read_file", wrong="x")), Completion("fine")]
    with OTLPReceiver() as receiver, OpenAIServer(replies) as model:
        done = _ask(["--base-url", model.base_url, "-m", "m", "--otel", receiver.url, "go"], child_env(),
                    isolated_user_state)
        assert done.returncode == 0, done.stderr
        spans = receiver.wait_for("invoke_agent mylm")
    named = _by_name(spans)
    (first,) = named["iteration 1"]
    assert ("mylm.correction", {"mylm.correction.kind": "format"}) in first.events
    (tool,) = named["execute_tool read_file"]
    assert tool.parent_id == named["iteration 2"][0].span_id
    assert tool.attributes["mylm.tool.status"] == "error" and tool.attributes["error.type"] == "error"
    assert tool.status == 2  # STATUS_CODE_ERROR
    assert named["invoke_agent mylm"][0].attributes["mylm.iterations"] == 3


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported(isolated_user_state: Path, tmp_path: Path) -> None:
    script = write_script(tmp_path / "script.json", [call("execute_command", command="ls"), "done"])
    probe = (
        "import sys\nfrom mylm.cli import main\nsys.argv = ['mylm', 'ask', '--yes', 'hi']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('OTEL', sorted(m for m in sys.modules if m.startswith('opentelemetry')), file=sys.stderr)\n"
    )
    env = child_env(script)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=isolated_user_state, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert done.stdout.strip() == "done", done.stderr
    assert "OTEL []" in done.stderr
    # The same probe with an endpoint does import it: the check above can fail.
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "1"
    traced = subprocess.run([sys.executable, "-c", probe], env=env, cwd=isolated_user_state, text=True,
                            capture_output=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert "opentelemetry.sdk" in traced.stderr


def test_a_delegated_mcp_run_is_traced(tmp_path: Path, isolated_user_state: Path) -> None:
    import anyio
    from mcp import Client

    script = write_script(tmp_path / "script.json", [call("execute_command", command="ls"), "listed"])

    async def main() -> None:
        with_otel = child_env(script, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
        async with Client(stdio([], with_otel, isolated_user_state)) as client:
            # The caller's own trace context: the delegated run continues the caller's trace.
            result = await client.call_tool("run_task", {"prompt": "list"}, meta={"traceparent": TRACEPARENT})
            assert result.structured_content["answer"] == "listed"

    with OTLPReceiver() as receiver:
        anyio.run(main)
        spans = receiver.wait_for("invoke_agent mylm")
    named = _by_name(spans)
    (run,) = named["invoke_agent mylm"]
    assert run.attributes["mylm.command"] == "mcp run_task"
    (request,) = named["tools/call run_task"]
    assert request.trace_id == run.trace_id == CALLER_TRACE and request.parent_id == CALLER_SPAN
    assert run.parent_id == request.span_id
    assert run.attributes["mylm.workspace"] == str(isolated_user_state.resolve())
    (tool,) = named["execute_tool execute_command"]
    assert tool.attributes["mylm.sandbox.profile"] == "read-only" and tool.trace_id == run.trace_id


def test_batch_tasks_are_traces_of_their_own_linked_to_one_batch_span(tmp_path: Path, isolated_user_state: Path) -> None:
    script = write_script(tmp_path / "script.json", [call("execute_command", command="ls"), "done"])
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "t1", "prompt": "one"}\n{"id": "t2", "prompt": "two"}\n')
    with OTLPReceiver() as receiver:
        done = subprocess.run(
            [sys.executable, "-m", "mylm", "batch", str(tasks), "-o", str(tmp_path / "out.jsonl"), "--otel",
             receiver.url], env=child_env(script), cwd=isolated_user_state, text=True, capture_output=True,
            timeout=120, stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stderr
        spans = receiver.wait_for("batch mylm")
    named = _by_name(spans)
    (batch,) = named["batch mylm"]
    assert batch.parent_id == "" and batch.attributes["mylm.batch.tasks"] == 2
    runs = named["invoke_agent mylm"]
    assert len(runs) == 2 and len({r.trace_id for r in runs} | {batch.trace_id}) == 3
    assert sorted(link[2]["mylm.task.id"] for r in runs for link in r.links) == ["t1", "t2"]
    assert all(r.links == [(batch.trace_id, batch.span_id, r.links[0][2])] for r in runs)
    assert all(r.attributes["mylm.command"] == "batch" and r.attributes["mylm.stop_reason"] == "final_answer"
               for r in runs)
    assert len(named["execute_tool execute_command"]) == 2


def test_each_prompt_of_a_chat_is_a_trace_of_its_own(tmp_path: Path, isolated_user_state: Path) -> None:
    script = write_script(tmp_path / "script.json", ["first answer", "second answer"])
    with OTLPReceiver() as receiver:
        done = subprocess.run(
            [sys.executable, "-m", "mylm", "chat", "--otel", receiver.url], input="one\ntwo\n",
            env=child_env(script), cwd=isolated_user_state, text=True, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        # Exported before the command exits: its shutdown waits for the exporter.
        spans = list(receiver.spans)
    runs = [s for s in spans if s.name == "invoke_agent mylm"]
    assert len(runs) == 2 and len({r.trace_id for r in runs}) == 2
    assert {r.attributes["mylm.command"] for r in runs} == {"chat"}


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("collector", ["refused", "503"])
def test_a_collector_that_cannot_take_traces_is_one_warning_and_no_retries_at_exit(
    collector: str, isolated_user_state: Path
) -> None:
    # Issue 30: `--otel http://127.0.0.1:9` printed four lines of the SDK's retries and held the exit ~8 s after
    # the answer. One line now, and the exporter gives up at exit instead of retrying (1, 2, 4 s of backoff):
    # the receiver answering 503 counts the attempts, so no clock is needed to see it.
    with OTLPReceiver(status=503) as receiver, OpenAIServer([Completion("Four.")]) as model:
        url = f"http://127.0.0.1:{_closed_port()}" if collector == "refused" else receiver.url
        done = _ask(["--base-url", model.base_url, "-m", "m", "--otel", url, "2+2?"], child_env(),
                    isolated_user_state)
    assert done.returncode == 0 and done.stdout == "Four.\n", done.stderr
    lines = [line for line in done.stderr.splitlines() if "trace" in line.lower() or "error" in line.lower()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"mylm: warning: cannot export traces to {url}/v1/traces: ")
    assert "Transient" not in done.stderr and "Traceback" not in done.stderr
    if collector == "refused":
        assert "connection refused" in lines[0]
    else:
        assert receiver.paths == ["/v1/traces"]  # one attempt: no retry held the exit


def test_otel_file_writes_the_trace_as_otlp_json_lines(isolated_user_state: Path, tmp_path: Path) -> None:
    # Issue 30: a trace to look at without installing a backend.
    import json

    target = tmp_path / "trace.jsonl"
    with OpenAIServer([Completion("Four.")]) as model:
        done = _ask(["--base-url", model.base_url, "-m", "m", "--otel", f"file:{target}", "2+2?"], child_env(),
                    isolated_user_state)
    assert done.returncode == 0 and done.stderr.count("warning") == 0, done.stderr
    assert target.stat().st_mode & 0o077 == 0  # a trace may hold prompts: the user's only
    spans = [span for line in target.read_text().splitlines()
             for resource in json.loads(line)["resourceSpans"] for scope in resource["scopeSpans"]
             for span in scope["spans"]]
    by_name = {span["name"]: span for span in spans}
    run, chat = by_name["invoke_agent mylm"], by_name["chat m"]
    assert len(run["traceId"]) == 32 and len(run["spanId"]) == 16 and "parentSpanId" not in run  # hex, per OTLP
    assert chat["traceId"] == run["traceId"] and chat["parentSpanId"] == by_name["iteration 1"]["spanId"]
    assert chat["kind"] == 3  # enums as integers, per OTLP JSON
    bad = _ask(["--otel", f"file:{tmp_path / 'missing' / 't.jsonl'}", "hi"], child_env(), isolated_user_state)
    assert bad.returncode == 2 and bad.stderr.startswith("mylm: error: --otel") and "does not exist" in bad.stderr
