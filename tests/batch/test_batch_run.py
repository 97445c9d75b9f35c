"""`run_batch` against a loopback OpenAI server: fresh workspaces, results, retries, the rate gate, cancel."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from mylm import Agent
from mylm.batch import BatchEvent, RateGate, Task, run_batch
from mylm.core.cancel import CancelToken
from mylm.protocol.parser import format_tool_call
from mylm.providers import Endpoint, create_llm
from mylm.tools import builtin_tools
from mylm.core.types import Permission, ToolCall
from tests.providers.helpers import FAST_RETRY
from tests.providers.servers import Completion, Hang, HTTPError, OpenAIServer


def factory(server: OpenAIServer, *, max_iterations: int = 4) -> Any:
    def make(task: Task, workspace: Path) -> Agent:
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        llm.retry = FAST_RETRY  # type: ignore[attr-defined]
        tools = builtin_tools(workspace=workspace, memory=False)
        return Agent(llm, tools, max_iterations=max_iterations, timeout=30, workspace=workspace,
                     permission=lambda call, tool: Permission.allow())
    return make


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_task_gets_its_own_copy_of_the_workspace(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "note.txt").write_text("original\n")
    write = format_tool_call(ToolCall("write_file", {"path": "note.txt", "content": "changed\n"}))
    read = format_tool_call(ToolCall("read_file", {"path": "note.txt"}))
    tasks = [Task("w", "change it", source), Task("r", "read it", source)]
    out = tmp_path / "out.jsonl"
    with OpenAIServer([write, "Changed.", read, "It says original."]) as server:
        summary = run_batch(tasks, factory(server), concurrency=1, results=out, keep_workspaces=True)
    assert summary.done == 2 and summary.failed == 0
    by_id = {r["id"]: r for r in lines(out)}
    kept = Path(by_id["w"]["workspace"])
    assert (kept / "note.txt").read_text() == "changed\n"
    assert (source / "note.txt").read_text() == "original\n"  # the source is never touched
    # The second task saw a fresh copy, not the first task's change.
    observation = server.requests[3].body["messages"][-1]["content"]
    assert "original" in observation and "changed" not in observation
    assert by_id["r"]["final_text"] == "It says original." and by_id["r"]["iterations_used"] == 2


def test_workspaces_are_removed_unless_kept(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with OpenAIServer(["One.", "Two."]) as server:
        summary = run_batch([Task("a", "p"), Task("b", "p")], factory(server), concurrency=2,
                            workspace_root=root)
    assert summary.done == 2 and all(r["workspace"] is None for r in summary.records)
    assert list(root.iterdir()) == []


def test_resume_skips_ids_already_in_the_results(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "stop_reason": "final_answer"}\n')
    with OpenAIServer(["B done."]) as server:
        summary = run_batch([Task("a", "p"), Task("b", "p")], factory(server), results=out)
    assert summary.skipped == 1 and summary.done == 1
    assert len(server.requests) == 1
    assert [r["id"] for r in lines(out)] == ["a", "b"]


def test_an_endpoint_error_is_retried_as_a_whole_task(tmp_path: Path) -> None:
    events: list[BatchEvent] = []
    failure = HTTPError(400, {"error": {"message": "bad day", "type": "invalid_request_error"}})
    with OpenAIServer([failure, "Fine now."]) as server:
        summary = run_batch([Task("a", "p")], factory(server), retries=1, on_event=events.append)
    (record,) = summary.records
    assert record["stop_reason"] == "final_answer" and record["attempts"] == 2
    assert [e.type for e in events if e.type == "task_retry"] == ["task_retry"]


def test_retries_exhausted_leave_the_error_in_the_result(tmp_path: Path) -> None:
    failure = HTTPError(400, {"error": {"message": "bad day", "type": "invalid_request_error"}})
    with OpenAIServer([failure, failure]) as server:
        summary = run_batch([Task("a", "p")], factory(server), retries=1)
    (record,) = summary.records
    assert record["stop_reason"] == "error" and "bad day" in record["error"] and record["attempts"] == 2
    assert summary.failed == 1


def test_a_429_slows_the_whole_batch_instead_of_failing(tmp_path: Path) -> None:
    events: list[BatchEvent] = []
    limited = HTTPError(429, {"error": {"message": "slow down", "type": "rate_limit_error"}},
                        headers={"retry-after-ms": "50"})
    with OpenAIServer([limited, "A.", "B.", "C."]) as server:
        summary = run_batch([Task(t, "p") for t in "abc"], factory(server), concurrency=2,
                            on_event=events.append)
    assert summary.failed == 0 and summary.done == 3 and summary.rate_limited == 1
    assert sorted(r["final_text"] for r in summary.records) == ["A.", "B.", "C."]
    (slowed,) = [e for e in events if e.type == "rate_limited"]
    assert slowed.to_dict() == {"type": "rate_limited", "delay": 0.05, "limit": 1}


def test_the_gate_halves_then_recovers_its_limit() -> None:
    gate = RateGate(8, clock=lambda: 0.0)
    assert gate.slow_down(None) == 1.0 and gate.limit == 4
    assert gate.slow_down(None) == 2.0 and gate.limit == 2
    gate.paused_until = 0.0
    for _ in range(2):
        gate.acquire()
        gate.release(True)
    assert gate.limit == 3


def test_cancel_stops_the_batch_and_writes_no_result_for_cancelled_tasks(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cancel = CancelToken()
    events: list[BatchEvent] = []
    with OpenAIServer(["Quick.", Hang(), Hang(), Hang(), "never asked"]) as server:
        def watch(event: BatchEvent) -> None:
            events.append(event)
            if event.type == "task_end":  # the quick one is done; the others hang at the server
                threading.Thread(target=lambda: (server.wait_for_requests(3), cancel.cancel())).start()

        summary = run_batch([Task(t, "p") for t in "abcd"], factory(server), concurrency=3, results=out,
                            cancel=cancel, on_event=watch)
    assert summary.interrupted and summary.done == 1 and summary.remaining == 3
    (record,) = lines(out)
    assert record["final_text"] == "Quick."
    assert server.remaining >= 1  # nothing started after the cancel reached the server
    assert [e.type for e in events][-2:] == ["batch_stopping", "batch_end"]


def test_a_missing_workspace_is_that_task_s_error(tmp_path: Path) -> None:
    with OpenAIServer(["B."]) as server:
        tasks = [Task("a", "p", tmp_path / "nope"), Task("b", "p")]
        summary = run_batch(tasks, factory(server), concurrency=1)
    by_id = {r["id"]: r for r in summary.records}
    assert by_id["a"]["stop_reason"] == "error" and "not a directory" in by_id["a"]["error"]
    assert by_id["b"]["final_text"] == "B."


def test_usage_and_task_limits_reach_the_result(tmp_path: Path) -> None:
    call = format_tool_call(ToolCall("list_dir", {"path": "."}))
    with OpenAIServer([Completion(call, prompt_tokens=11), "Summary."]) as server:
        summary = run_batch([Task("a", "p", max_iterations=1)], factory(server))
    (record,) = summary.records
    assert record["stop_reason"] == "max_iterations" and record["iterations_used"] == 1
    assert record["usage"]["prompt_tokens"] == 28 and summary.tokens > 0


def test_usage_is_null_when_the_server_reported_none(tmp_path: Path) -> None:
    # Issue 20: batch results said 0/0 where `ask --json` says null; a task that never ran has none either.
    bad = Task("missing", "p", tmp_path / "no-such-dir")
    with OpenAIServer(["Done."], usage=False) as server:
        summary = run_batch([Task("a", "p"), bad], factory(server), concurrency=1)
    by_id = {r["id"]: r for r in summary.records}
    assert by_id["a"]["final_text"] == "Done." and by_id["a"]["usage"] is None
    assert by_id["missing"]["stop_reason"] == "error" and by_id["missing"]["usage"] is None
