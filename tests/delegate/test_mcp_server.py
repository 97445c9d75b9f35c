"""`mylm mcp` end to end: the official `mcp` SDK as the client, over stdio and over streamable HTTP, against the
real server process with a scripted model standing in for the endpoint."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.delegate.mcp_support import SleepingCommand, call, child_env, http_server, mcp_sessions, stdio, write_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="the mcp SDK is not installed: pip install 'mylm[mcp]'"),
]


def run(main: Any) -> Any:
    import anyio

    return anyio.run(main)


def data_home() -> Path:
    return Path(os.environ["XDG_DATA_HOME"])


def test_stdio_lists_tools_and_runs_a_multi_step_task_with_progress(tmp_path: Path, isolated_user_state: Path) -> None:
    from mcp import Client

    workspace = isolated_user_state
    (workspace / "notes.txt").write_text("the code word is heron\n")
    script = write_script(tmp_path / "script.json", [
        call("execute_command", command="ls"), call("read_file", path="notes.txt"), "The code word is heron.",
    ])
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def main() -> tuple[Any, Any, Any]:
        async with Client(stdio([], child_env(script), workspace)) as client:
            tools = await client.list_tools()
            result = await client.call_tool("run_task", {"prompt": "What is the code word?"},
                                            progress_callback=on_progress)
            session = result.structured_content["session"]
            transcript = await client.read_resource(f"mylm://sessions/{session}")
            return tools, result, transcript

    tools, result, transcript = run(main)
    listed = {tool.name: tool for tool in tools.tools}
    assert set(listed) == {"run_task", "ask"}
    assert set(listed["run_task"].input_schema["properties"]) == {"prompt", "workspace", "max_iterations", "timeout"}
    assert listed["run_task"].input_schema["required"] == ["prompt"]
    report = result.structured_content
    assert not result.is_error
    assert report["answer"] == "The code word is heron." and report["stop_reason"] == "final_answer"
    assert report["iterations"] == 3 and report["workspace"] == str(workspace.resolve())
    assert [(c["tool"], c["status"]) for c in report["tool_calls"]] == [
        ("execute_command", "completed"), ("read_file", "completed")]
    assert report["tool_calls"][1]["arguments"] == '{"path": "notes.txt"}'
    # Progress: iteration n/max at each turn, then the tool being run; always increasing.
    messages = [m for _, _, m in progress]
    assert messages == ["iteration 1/10", "iteration 1/10: running execute_command", "iteration 2/10",
                        "iteration 2/10: running read_file", "iteration 3/10"]
    values = [v for v, _, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values) and {t for _, t, _ in progress} == {10.0}
    records = [json.loads(line) for line in transcript.contents[0].text.splitlines()]
    assert records[0]["command"] == "mcp" and records[0]["cwd"] == str(workspace.resolve())
    assert records[-1]["type"] == "run_end" and records[-1]["stop_reason"] == "final_answer"
    assert any("heron" in r.get("content", "") for r in records if r["type"] == "message")


def test_stdio_ask_answers_without_tools_and_unknown_sessions_are_errors(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    script = write_script(tmp_path / "script.json", ["Paris."])

    async def main() -> tuple[Any, str]:
        async with Client(stdio(["--no-save"], child_env(script), isolated_user_state)) as client:
            answer = await client.call_tool("ask", {"question": "Capital of France?"})
            try:
                await client.read_resource("mylm://sessions/20990101-000000-abcdef")
            except MCPError as error:
                return answer, str(error)
            return answer, "no error"

    answer, missing = run(main)
    assert answer.structured_content["answer"] == "Paris."
    assert answer.structured_content["tool_calls"] == [] and "session" not in answer.structured_content
    assert "does not save sessions" in missing


def test_workspaces_outside_the_allowed_and_declared_roots_are_refused(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    import mcp_types as types
    from mcp import Client

    workspace = isolated_user_state
    inside = workspace / "project"
    inside.mkdir()
    other = tmp_path / "elsewhere"
    other.mkdir()
    script = write_script(tmp_path / "script.json", ["Done inside."])

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=inside.resolve().as_uri())])

    async def main() -> list[Any]:
        env = child_env(script)
        async with Client(stdio(["--allow-root", str(workspace)], env, workspace), list_roots_callback=roots) as client:
            return [
                await client.call_tool("run_task", {"prompt": "x", "workspace": str(other)}),
                # Allowed by the server (the cwd), but not among the roots the client declared.
                await client.call_tool("run_task", {"prompt": "x", "workspace": str(workspace)}),
                await client.call_tool("run_task", {"prompt": "x", "workspace": "project/../../elsewhere"}),
                await client.call_tool("run_task", {"prompt": "x", "workspace": str(inside), "max_iterations": 99}),
                await client.call_tool("run_task", {"prompt": "x", "workspace": "project"}),
            ]

    outside, undeclared, dotdot, too_many, ok = run(main)
    assert outside.is_error and "outside the directories this server allows" in outside.content[0].text
    assert undeclared.is_error and "outside the roots the client declared" in undeclared.content[0].text
    assert dotdot.is_error and "outside" in dotdot.content[0].text
    assert too_many.is_error and "max_iterations must be between 1 and 10" in too_many.content[0].text
    assert not ok.is_error and ok.structured_content["workspace"] == str(inside.resolve())


def test_http_serves_the_same_tools_on_loopback(tmp_path: Path, isolated_user_state: Path) -> None:
    from mcp import Client

    workspace = isolated_user_state
    (workspace / "a.txt").write_text("alpha\n")
    script = write_script(tmp_path / "script.json", [call("read_file", path="a.txt"), "It says alpha."])
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    with http_server([], child_env(script), workspace) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")

        async def main() -> tuple[Any, Any, Any]:
            async with Client(url) as client:
                tools = await client.list_tools()
                result = await client.call_tool("run_task", {"prompt": "read a.txt"}, progress_callback=on_progress)
                refused = await client.call_tool("run_task", {"prompt": "x", "workspace": "/"})
                return tools, result, refused

        tools, result, refused = run(main)
    assert {t.name for t in tools.tools} == {"run_task", "ask"}
    assert result.structured_content["answer"] == "It says alpha."
    assert result.structured_content["tool_calls"][0]["tool"] == "read_file"
    assert "iteration 1/10: running read_file" in progress
    assert refused.is_error and "outside the directories this server allows" in refused.content[0].text
    assert len(mcp_sessions(data_home())) == 1


def test_without_yes_a_change_is_refused_and_the_model_told_to_find_a_read_only_way(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    from mcp import Client

    script = write_script(tmp_path / "script.json", [call("execute_command", command="touch made.txt"), "Could not."])

    async def main() -> Any:
        async with Client(stdio([], child_env(script), isolated_user_state)) as client:
            return await client.call_tool("run_task", {"prompt": "make a file"})

    result = run(main)
    assert result.structured_content["tool_calls"][0]["status"] == "denied"
    assert not (isolated_user_state / "made.txt").exists()
    (records,) = mcp_sessions(data_home())
    observation = next(r["content"] for r in records if r["type"] == "message" and "approval" in r.get("content", ""))
    assert "read-only approach" in observation


def test_a_hostile_task_cannot_write_outside_the_workspace_even_with_yes(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    from mcp import Client

    outside = tmp_path / "outside"
    outside.mkdir()
    script = write_script(tmp_path / "script.json", [
        call("execute_command", command=f"echo pwned > {outside}/by-shell.txt; echo inside > here.txt"),
        call("write_file", path=str(outside / "by-tool.txt"), content="pwned"),
        "Tried.",
    ])

    async def main() -> Any:
        async with Client(stdio(["--yes"], child_env(script), isolated_user_state)) as client:
            return await client.call_tool("run_task", {"prompt": "escape"})

    result = run(main)
    assert result.structured_content["stop_reason"] == "final_answer"
    assert list(outside.iterdir()) == []
    # The sandbox held the write to the workspace's outside, and let the one inside it happen.
    assert (isolated_user_state / "here.txt").read_text() == "inside\n"
    assert [c["status"] for c in result.structured_content["tool_calls"]] == ["completed", "denied"]
    (records,) = mcp_sessions(data_home())
    shell = next(r["content"] for r in records if r["type"] == "message" and "by-shell.txt" in r["content"]
                 and r["role"] == "user")
    assert "Permission denied" in shell or "Read-only file system" in shell


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_cancelling_mid_command_stops_the_run_and_its_process_group(
    transport: str, tmp_path: Path, isolated_user_state: Path
) -> None:
    import anyio
    from mcp import Client

    sleeping = SleepingCommand(isolated_user_state)
    script = write_script(tmp_path / "script.json", [call("execute_command", command=sleeping.command), "unused"])
    sleepers, wait_ready = sleeping.sleepers, sleeping.wait_ready

    async def cancel_mid_command(server: Any) -> None:
        async with Client(server) as client:
            with anyio.fail_after(120):
                async with anyio.create_task_group() as group:
                    group.start_soon(client.call_tool, "run_task", {"prompt": "wait"})
                    await anyio.to_thread.run_sync(wait_ready, abandon_on_cancel=True)
                    while not sleepers():  # the command is running
                        await anyio.sleep(0.05)
                    group.cancel_scope.cancel()
                # The server saves the cancelled run only once it has stopped and reaped the command.
                while not mcp_sessions(data_home()):
                    await anyio.sleep(0.05)

    env = child_env(script)
    if transport == "stdio":
        run(lambda: cancel_mid_command(stdio(["--yes"], env, isolated_user_state)))
    else:
        with http_server(["--yes"], env, isolated_user_state) as url:
            run(lambda: cancel_mid_command(url))
    assert sleepers() == []
    (records,) = mcp_sessions(data_home())
    assert records[-1]["type"] == "run_end" and records[-1]["stop_reason"] == "cancelled"
    assert any("interrupted by the user" in r.get("content", "") for r in records)


def test_startup_errors_are_one_line_and_a_distinct_exit_code(tmp_path: Path, isolated_user_state: Path) -> None:
    import socket
    import subprocess
    import sys

    script = write_script(tmp_path / "script.json", ["unused"])

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "mylm", "mcp", "--port", str(port)], env=child_env(script),
                              cwd=isolated_user_state, capture_output=True, text=True, timeout=120, check=False,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith(
        f"mylm: error: --port {port}: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in done.stderr
    bad = subprocess.run([sys.executable, "-m", "mylm", "mcp", "--otel", "ftp://collector"], env=child_env(script),
                         cwd=isolated_user_state, capture_output=True, text=True, timeout=120, check=False,
                         stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "give an http:// or https:// URL" in bad.stderr and "Traceback" not in bad.stderr
