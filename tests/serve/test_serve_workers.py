"""`mylm serve --workers N` as real processes on loopback: both workers answer on the one port, a stored response
is found whichever worker gets the follow-up, the per-client connection limit is the whole server's, a dead
worker is reported and replaced, and a Ctrl-C stops every worker."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mylm.serve.workers import shares
from tests.providers.servers import OpenAIServer
from tests.serve.support import call
from tests.serve.test_serve_responses import WEATHER

pytestmark = pytest.mark.slow

#: The server as a terminal starts it: SIGINT at its default (CI's background jobs inherit it ignored, and a
#: server started with SIGINT ignored rightly keeps it ignored).
LAUNCH = ("import signal, sys\n"
          "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
          "from mylm.cli import main\n"
          "sys.argv = ['mylm', 'serve', '--port', '0', *sys.argv[1:]]\n"
          "main()\n")
#: Fresh connections tried before concluding that only one worker ever accepts.
TRIES = 400


class Served:
    """A `mylm serve --workers N` process group, and the address it listens on."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.process.stderr is not None
        self.banner = self.process.stderr.readline()
        found = re.search(r"http://([\d.]+):(\d+)/v1", self.banner)
        if found is None:
            self.process.kill()
            raise AssertionError(f"no URL in {self.banner!r}: {self.process.stderr.read()}")
        self.host, self.port = found.group(1), int(found.group(2))
        self.connections: list[http.client.HTTPConnection] = []

    def connect(self) -> http.client.HTTPConnection:
        """A new connection (closed when the test ends, if the test has not closed it)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        self.connections.append(connection)
        return connection

    def workers(self) -> list[int]:
        """The pids of the server's children (its workers)."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[1]) == self.process.pid and fields[0] != "Z":
                        found.append(int(entry.name))
        return sorted(found)

    def stop(self) -> None:
        for connection in self.connections:
            connection.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate()


def request(connection: http.client.HTTPConnection, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request on `connection` (kept open); its status and JSON body."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    connection.request(method, path, body=data, headers=headers)
    answer = connection.getresponse()
    return answer.status, json.loads(answer.read() or b"null")


def worker_of(connection: http.client.HTTPConnection) -> dict[str, Any]:
    """`/health` on `connection`: which worker holds it (number and pid)."""
    status, health = request(connection, "GET", "/health")
    assert status == 200
    return health  # type: ignore[no-any-return]


def connection_to(served: Served, *, not_worker: int) -> http.client.HTTPConnection:
    """A new connection a worker other than `not_worker` accepted."""
    for _ in range(TRIES):
        connection = served.connect()
        if worker_of(connection)["worker"] != not_worker:
            return connection
        connection.close()
    raise AssertionError(f"worker {not_worker} accepted all of {TRIES} connections")


@pytest.fixture
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(delay=0.002) as server:
        yield server


@pytest.fixture
def two(subprocess_env: dict[str, str], upstream: OpenAIServer) -> Iterator[Served]:
    served = Served(subprocess_env, "--workers", "2", "--base-url", upstream.base_url, "-m", "m", "--constrain",
                    "off", "--max-connections-per-client", "6")
    try:
        yield served
    finally:
        served.stop()


def test_both_workers_answer_on_the_one_port(two: Served) -> None:
    assert "2 workers" in two.banner
    children = two.workers()
    assert len(children) == 2
    seen: dict[int, int] = {}
    for _ in range(TRIES):
        connection = two.connect()
        health = worker_of(connection)
        connection.close()
        seen[health["worker"]] = health["pid"]
        if len(seen) == 2:
            break
    assert sorted(seen) == [1, 2] and sorted(seen.values()) == children
    assert os.getpid() not in seen.values() and two.process.pid not in seen.values()


def test_a_stored_response_is_found_by_the_other_worker(two: Served, upstream: OpenAIServer) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}'), "It is sunny in Paris."])
    first = two.connect()
    status, answer = request(first, "POST", "/v1/responses", {"model": "m", "input": "Weather in Paris?",
                                                               "tools": [WEATHER]})
    assert status == 200
    stored_by = worker_of(first)["worker"]  # the same connection: the worker that answered and stored it
    call_id = next(item["call_id"] for item in answer["output"] if item["type"] == "function_call")
    other = connection_to(two, not_worker=stored_by)
    status, follow = request(other, "POST", "/v1/responses", {
        "model": "m", "tools": [WEATHER], "previous_response_id": answer["id"],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "sunny"}]})
    assert status == 200, follow
    assert follow["previous_response_id"] == answer["id"]
    assert follow["output"][-1]["content"][0]["text"] == "It is sunny in Paris."
    sent = [r.body for r in upstream.requests if upstream.is_generation(r.method, r.path)][-1]["messages"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert sent[1]["content"] == "Weather in Paris?" and "<name>get_weather</name>" in sent[2]["content"]
    # And it is kept by that worker in turn, for the first one.
    again = connection_to(two, not_worker=worker_of(other)["worker"])
    upstream.script(["Still sunny."])
    status, last = request(again, "POST", "/v1/responses", {"model": "m", "input": "And tomorrow?",
                                                             "previous_response_id": follow["id"]})
    assert status == 200 and last["output"][-1]["content"][0]["text"] == "Still sunny."


def test_the_per_client_connection_limit_is_the_whole_servers(two: Served) -> None:
    # --max-connections-per-client 6: six connections in all, however the kernel spreads them over the workers.
    held = [two.connect() for _ in range(5)]
    holders = {worker_of(connection)["worker"] for connection in held}
    for _ in range(TRIES):  # the kernel may hash all five to one worker (1 in 16): the sixth goes to the other
        sixth = two.connect()
        status, health = request(sixth, "GET", "/health")
        if status == 200 and holders | {health["worker"]} == {1, 2}:
            held.append(sixth)
            break
        sixth.close()
        time.sleep(0.01)  # a refused or closed one is released by its worker soon after, not at once
    holders = {worker_of(connection)["worker"] for connection in held}
    assert len(held) == 6 and holders == {1, 2}  # both workers hold some (else the limit was never shared)
    extra = two.connect()
    status, refusal = request(extra, "GET", "/health")
    assert status == 429 and "6 connections" in refusal["error"]["message"]
    extra.close()
    held.pop().close()
    for connection in held:
        assert worker_of(connection)["status"] == "ok"  # the held ones still serve


def test_a_dead_worker_is_reported_in_one_line_and_replaced(two: Served) -> None:
    victim = two.workers()[0]
    os.kill(victim, signal.SIGKILL)
    assert two.process.stderr is not None
    line = two.process.stderr.readline()
    assert re.fullmatch(rf"mylm serve: worker [12] \(pid {victim}\) was killed by SIGKILL; starting another\n",
                        line), line
    seen = set()
    for _ in range(TRIES):
        connection = two.connect()
        seen.add(worker_of(connection)["pid"])
        connection.close()
        if len(seen) == 2:
            break
    assert victim not in seen and len(seen) == 2 and sorted(seen) == two.workers()


def test_ctrl_c_drains_and_stops_every_worker(two: Served, upstream: OpenAIServer) -> None:
    children = two.workers()
    directory = next(Path(os.readlink(f"/proc/{children[0]}/fd/{fd}")).parent
                     for fd in os.listdir(f"/proc/{children[0]}/fd")
                     if os.readlink(f"/proc/{children[0]}/fd/{fd}").endswith("connections.lock"))
    assert directory.is_dir() and (directory / "responses.sqlite3").exists()
    upstream.script(["A long answer. " * 40])
    streaming = two.connect()
    streaming.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "talk"}]}),
        headers={"Content-Type": "application/json"})
    answer = streaming.getresponse()
    first = answer.readline()
    assert first.startswith(b"data: ")
    # A terminal's Ctrl-C: every process of the group gets SIGINT.
    os.killpg(two.process.pid, signal.SIGINT)
    rest = answer.read().decode()
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                   for line in (first.decode() + rest).splitlines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])
    assert text == "A long answer. " * 40  # drained, not cut
    assert two.process.wait(timeout=60) == 0
    assert two.process.stderr is not None
    assert two.process.stderr.read() == "mylm serve: stopped\n"  # nothing else: no traceback, no warning
    for pid in children:
        assert not Path(f"/proc/{pid}").exists()
    assert not directory.exists()


def test_sigterm_on_the_parent_alone_stops_every_worker(two: Served) -> None:
    children = two.workers()
    two.process.send_signal(signal.SIGTERM)
    assert two.process.wait(timeout=60) == 0
    for pid in children:
        assert not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("args", [["--workers", "0"], ["--workers", "3", "--max-concurrency", "2"]])
def test_bad_workers_are_a_usage_error(subprocess_env: dict[str, str], args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "mylm", "serve", "--port", "0", *args, "--base-url",
                           "http://127.0.0.1:9/v1"], env=subprocess_env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "--workers" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


def test_max_concurrency_is_divided_to_the_limit_set() -> None:
    assert shares(128, 2) == [64, 64] and shares(5, 3) == [2, 2, 1] and sum(shares(7, 4)) == 7
