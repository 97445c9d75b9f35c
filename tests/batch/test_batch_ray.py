"""The Ray executor on a local Ray instance started here, loopback only (few tests: Ray starts slowly)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from mylm.batch import BatchEvent, Task, run_batch
from mylm.core.cancel import CancelToken
from mylm.cli.batch_agent import BatchAgentFactory
from tests.providers.servers import Hang, OpenAIServer

if os.environ.get("MYLM_REQUIRE_RAY"):
    import ray  # CI installed the extra: a missing Ray is a failure, not a skip
else:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'mylm[ray]'; .ci/run does)")

from mylm.batch.cluster import RayExecutor  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    home = tmp_path_factory.mktemp("ray-home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOME", str(home))  # Ray keeps its token and session files under HOME and /tmp/ray
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address="local", include_dashboard=False, num_cpus=2, _node_ip_address="127.0.0.1",
                 log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


def factory(server: OpenAIServer) -> BatchAgentFactory:
    endpoint = {"provider": "openai", "base_url": server.base_url, "model": "m"}
    return BatchAgentFactory(endpoint=endpoint, max_iterations=3, timeout=60, max_tokens=256, prompts=None,
                             trusted=False, yes=False, instructions="", context_budget=None)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tasks_run_on_ray_workers_and_the_driver_writes_the_results(cluster: None, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "data.txt").write_text("payload\n")
    out = tmp_path / "out.jsonl"
    tasks = [Task(f"t{i}", "answer", source) for i in range(5)]
    with OpenAIServer(["Done."] * 5) as server:
        summary = run_batch(tasks, factory(server), concurrency=3, results=out, keep_workspaces=True,
                            executor=RayExecutor(3))
    assert summary.done == 5 and summary.failed == 0
    records = lines(out)
    assert sorted(r["id"] for r in records) == [f"t{i}" for i in range(5)]
    assert all(r["final_text"] == "Done." for r in records)
    workspaces = {r["workspace"] for r in records}
    assert len(workspaces) == 5 and all((Path(w) / "data.txt").read_text() == "payload\n" for w in workspaces)
    assert {r.headers.get("user-agent", "").split("/")[0] for r in server.requests} == {"mylm"}


def test_a_stopped_ray_batch_keeps_finished_results_and_resumes(cluster: None, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cancel = CancelToken()
    tasks = [Task(f"t{i}", "answer") for i in range(3)]
    with OpenAIServer(["Quick.", Hang(), Hang()]) as server:
        def watch(event: BatchEvent) -> None:
            if event.type == "task_end":
                threading.Thread(target=lambda: (server.wait_for_requests(3), cancel.cancel())).start()

        stopped = run_batch(tasks, factory(server), concurrency=3, results=out, cancel=cancel, on_event=watch,
                            executor=RayExecutor(3))
        assert stopped.interrupted and stopped.done == 1
        assert [r["final_text"] for r in lines(out)] == ["Quick."]
        assert server.disconnected.is_set()  # the hanging requests were aborted, not waited out
        server.script(["Later."] * 2)
        resumed = run_batch(tasks, factory(server), concurrency=3, results=out, executor=RayExecutor(3))
    assert resumed.skipped == 1 and resumed.done == 2
    assert sorted(r["id"] for r in lines(out)) == [f"t{i}" for i in range(3)]
