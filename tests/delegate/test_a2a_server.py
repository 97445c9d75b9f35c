"""`mylm a2a` end to end: the official `a2a-sdk` client over HTTP against the real server process on loopback,
with a scripted model standing in for the endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import pytest

from tests.delegate.mcp_support import SleepingCommand, call, child_env, needs_sdk, saved_sessions, server_process, write_script

pytestmark = [pytest.mark.slow, needs_sdk("a2a", "a2a")]

MARKER = "A2A server on "


def a2a_server(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    return server_process(["a2a", "--port", "0", *args], env, cwd, MARKER)


def user_message(text: str, *, task_id: str = "", context_id: str = "", metadata: dict[str, Any] | None = None) -> Any:
    from a2a.helpers import new_text_message
    from a2a.types import a2a_pb2 as pb

    message = new_text_message(text, role=pb.Role.ROLE_USER, task_id=task_id or None, context_id=context_id or None)
    if metadata:
        message.metadata.update(metadata)
    return message


@asynccontextmanager
async def client_for(url: str, *, streaming: bool = True, key: str | None = None,
                     version: str | None = None) -> AsyncIterator[Any]:
    """An `a2a-sdk` client of the server (from its card, or for `version` on the same route)."""
    import httpx
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types import a2a_pb2 as pb

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx.AsyncClient(timeout=120, headers=headers)
    factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
    try:
        if version is None:
            client = await factory.create_from_url(url)
        else:
            client = factory.create(pb.AgentCard(name="mylm", supported_interfaces=[
                pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)]))
        yield client
    finally:
        await http.aclose()


async def collect(client: Any, message: Any) -> tuple[list[Any], Any]:
    """Every stream response of a SendMessage, and the last task seen."""
    responses = []
    task = None
    async for response in client.send_message(_request(message)):
        responses.append(response)
        if response.HasField("task"):
            task = response.task
    return responses, task


def _request(message: Any) -> Any:
    from a2a.types import a2a_pb2 as pb

    return pb.SendMessageRequest(message=message)


def statuses(responses: list[Any]) -> list[tuple[str, str]]:
    from a2a.helpers import get_message_text
    from a2a.types import a2a_pb2 as pb

    found = []
    for response in responses:
        if response.HasField("status_update"):
            status = response.status_update.status
            found.append((pb.TaskState.Name(status.state), get_message_text(status.message)))
    return found


def artifacts(responses: list[Any]) -> list[str]:
    from a2a.helpers import get_artifact_text

    return [get_artifact_text(r.artifact_update.artifact) for r in responses if r.HasField("artifact_update")]


def test_a_streamed_task_with_a_tool_call_runs_to_completion_and_lists(tmp_path: Path, isolated_user_state: Path) -> None:
    (isolated_user_state / "notes.txt").write_text("the code word is heron\n")
    script = write_script(tmp_path / "script.json", [call("read_file", path="notes.txt"), "The code word is heron."])

    async def main(url: str) -> tuple[Any, ...]:
        from a2a.types import a2a_pb2 as pb

        async with client_for(url) as client:
            card = None
            responses, _ = await collect(client, user_message("What is the code word?"))
            task_id = next(r.status_update.task_id for r in responses if r.HasField("status_update"))
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            listed = await client.list_tasks(pb.ListTasksRequest(include_artifacts=True))
            return card, responses, task, listed

    with a2a_server([], child_env(script), isolated_user_state) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url.rstrip('/')}/.well-known/agent-card.json") as response:
            card = json.load(response)
        _, responses, task, listed = asyncio.run(main(url))
    assert card["name"] == "mylm" and card["capabilities"]["streaming"] is True
    assert {s["id"] for s in card["skills"]} == {"run_task", "ask"}
    assert {(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]} == {
        ("JSONRPC", "1.0"), ("JSONRPC", "0.3")}
    seen = statuses(responses)
    texts = [text for _, text in seen]
    assert "Agentic iteration 1/10" in texts and "Agentic iteration 2/10" in texts
    assert any(t.startswith('Calling read_file {"path": "notes.txt"}') for t in texts)
    assert any(t.startswith("read_file returned") and "heron" in t for t in texts)
    assert seen[-1] == ("TASK_STATE_COMPLETED", "The code word is heron.")
    assert artifacts(responses) == ["The code word is heron."]
    from a2a.types import a2a_pb2 as pb

    assert task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert [t.id for t in listed.tasks] == [task.id] and listed.tasks[0].artifacts[0].name == "answer"
    (records,) = saved_sessions(Path(os.environ["XDG_DATA_HOME"]), "a2a")
    assert records[0]["context"] == task.context_id and records[-1]["stop_reason"] == "final_answer"


def test_without_streaming_a_task_completes_and_its_context_continues_the_conversation(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    (isolated_user_state / "a.txt").write_text("alpha\n")
    script = write_script(tmp_path / "script.json", [
        call("read_file", path="a.txt"), "It says alpha.",
        {"text": "You asked about a.txt, which says alpha.", "expect": "It says alpha."}])

    async def main(url: str) -> tuple[Any, Any]:
        async with client_for(url, streaming=False) as client:
            _, first = await collect(client, user_message("read a.txt"))
            _, second = await collect(client, user_message("what did I ask?", context_id=first.context_id))
            return first, second

    with a2a_server([], child_env(script), isolated_user_state) as url:
        first, second = asyncio.run(main(url))
    from a2a.helpers import get_artifact_text
    from a2a.types import a2a_pb2 as pb

    assert first.status.state == second.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(first.artifacts[0]) == "It says alpha."
    assert second.context_id == first.context_id and second.id != first.id
    assert get_artifact_text(second.artifacts[0]) == "You asked about a.txt, which says alpha."
    # One conversation, one session: the second run was appended to the first, after its history.
    (records,) = saved_sessions(Path(os.environ["XDG_DATA_HOME"]), "a2a")
    users = [r["content"] for r in records if r["type"] == "message" and r["role"] == "user"]
    assert users[0] == "read a.txt" and users[-1] == "what did I ask?"
    assert [r["stop_reason"] for r in records if r["type"] == "run_end"] == ["final_answer", "final_answer"]


def test_a_call_the_policy_asks_about_waits_in_input_required_until_the_client_answers(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    script = write_script(tmp_path / "script.json", [
        call("write_file", path="made.txt", content="hello\n"),
        call("write_file", path="second.txt", content="no\n"),
        "Wrote made.txt; second.txt was refused.",
    ])

    async def main(url: str) -> tuple[Any, ...]:
        async with client_for(url, streaming=False) as client:
            _, asked = await collect(client, user_message("make two files"))
            made_before = (isolated_user_state / "made.txt").exists()
            _, asked_again = await collect(client, user_message("yes", task_id=asked.id, context_id=asked.context_id))
            _, done = await collect(client, user_message("no, not that one", task_id=asked.id,
                                                         context_id=asked.context_id))
            return asked, made_before, asked_again, done

    with a2a_server([], child_env(script), isolated_user_state) as url:
        asked, made_before, asked_again, done = asyncio.run(main(url))
    from a2a.helpers import get_artifact_text, get_message_text
    from a2a.types import a2a_pb2 as pb

    assert asked.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED and not made_before
    question = get_message_text(asked.status.message)
    assert "create made.txt" in question and "Reply 'yes'" in question
    assert asked_again.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
    assert "second.txt" in get_message_text(asked_again.status.message)
    assert done.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(done.artifacts[0]) == "Wrote made.txt; second.txt was refused."
    assert (isolated_user_state / "made.txt").read_text() == "hello\n"
    assert not (isolated_user_state / "second.txt").exists()
    (records,) = saved_sessions(Path(os.environ["XDG_DATA_HOME"]), "a2a")
    assert any("the user declined this call: not that one" in r.get("content", "") for r in records)


def test_cancelling_a_task_mid_command_stops_the_run_and_its_process_group(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    sleeping = SleepingCommand(isolated_user_state)
    script = write_script(tmp_path / "script.json", [call("execute_command", command=sleeping.command), "unused"])

    async def main(url: str) -> tuple[Any, list[int], list[Any]]:
        from a2a.types import a2a_pb2 as pb

        async with client_for(url) as client:
            responses: list[Any] = []

            async def send() -> None:
                async for response in client.send_message(_request(user_message("wait"))):
                    responses.append(response)

            sending = asyncio.create_task(send())
            await asyncio.wait_for(asyncio.to_thread(sleeping.wait_ready), 120)
            while not sleeping.sleepers():
                await asyncio.sleep(0.05)
            task_id = next(r.status_update.task_id for r in responses if r.HasField("status_update"))
            cancelled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
            left = sleeping.sleepers()  # the answer comes once the command's group is reaped
            await asyncio.wait_for(sending, 60)
            return cancelled, left, responses

    with a2a_server(["--yes"], child_env(script), isolated_user_state) as url:
        cancelled, left, responses = asyncio.run(main(url))
    from a2a.types import a2a_pb2 as pb

    assert cancelled.status.state == pb.TaskState.TASK_STATE_CANCELED and left == []
    assert "partial run is saved" in " ".join(p.text for p in cancelled.status.message.parts)
    (records,) = saved_sessions(Path(os.environ["XDG_DATA_HOME"]), "a2a")
    assert records[-1]["type"] == "run_end" and records[-1]["stop_reason"] == "cancelled"


def test_a_0_3_client_is_served_on_the_same_route(tmp_path: Path, isolated_user_state: Path) -> None:
    (isolated_user_state / "a.txt").write_text("alpha\n")
    script = write_script(tmp_path / "script.json", [call("read_file", path="a.txt"), "It says alpha."])

    async def main(url: str) -> Any:
        async with client_for(url, streaming=False, version="0.3") as client:
            _, task = await collect(client, user_message("read a.txt"))
            return task

    with a2a_server([], child_env(script), isolated_user_state) as url:
        task = asyncio.run(main(url))
    from a2a.helpers import get_artifact_text
    from a2a.types import a2a_pb2 as pb

    assert task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(task.artifacts[0]) == "It says alpha."


def _post(url: str, headers: dict[str, str]) -> tuple[int, str]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                              "A2A-Version": "1.0", **headers})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_key_is_required_when_set_and_foreign_hosts_and_origins_are_refused(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    script = write_script(tmp_path / "script.json", ["Hello."])
    key = "k3y-for-the-a2a-test"

    async def main(url: str) -> tuple[Any, str]:
        async with client_for(url, streaming=False, key=key) as client:
            _, task = await collect(client, user_message("hi", metadata={"tools": False}))
        try:
            async with client_for(url, streaming=False, version="1.0") as anonymous:
                await collect(anonymous, user_message("hi"))
        except Exception as error:  # noqa: BLE001 - the SDK's own error for a 401
            return task, str(error)
        return task, "not refused"

    with a2a_server([], child_env(script, MYLM_A2A_KEY=key), isolated_user_state) as url:
        with urllib.request.urlopen(f"{url.rstrip('/')}/.well-known/agent-card.json") as response:
            card = json.load(response)  # the card stays public: it says how to authenticate
        no_key = _post(url, {})
        wrong_key = _post(url, {"Authorization": "Bearer nope"})
        with_key = _post(url, {"Authorization": f"Bearer {key}"})
        rebinding = _post(url, {"Authorization": f"Bearer {key}", "Host": "evil.example"})
        cross_site = _post(url, {"Authorization": f"Bearer {key}", "Origin": "http://evil.example"})
        same_site = _post(url, {"Authorization": f"Bearer {key}", "Origin": url.rstrip("/")})
        task, refused = asyncio.run(main(url))
    from a2a.types import a2a_pb2 as pb

    assert "bearer" in card["securitySchemes"]
    assert no_key[0] == 401 and "no key was sent" in no_key[1]
    assert wrong_key[0] == 401 and "a wrong key was sent" in wrong_key[1]
    assert with_key[0] == 200 and '"result"' in with_key[1]
    assert rebinding[0] == 421 and "evil.example" in rebinding[1]
    assert cross_site[0] == 403 and "evil.example" in cross_site[1]
    assert same_site[0] == 200
    assert task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert "401" in refused or "key" in refused


def test_off_loopback_without_a_key_is_a_usage_error(isolated_user_state: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    script = write_script(tmp_path / "script.json", ["unused"])
    done = subprocess.run([sys.executable, "-m", "mylm", "a2a", "--host", "0.0.0.0", "--port", "0"],
                          env=child_env(script), cwd=isolated_user_state, capture_output=True, text=True,
                          timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "not a loopback address" in done.stderr and "Traceback" not in done.stderr
