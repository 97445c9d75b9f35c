"""`mylm acp` end to end: the `agent-client-protocol` SDK's client side over stdio against the real `mylm acp`
process, with a scripted model standing in for the endpoint, and this test as the editor (its permission
answers, its file buffers, its terminal)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from tests.delegate.mcp_support import SleepingCommand, call, child_env, needs_sdk, saved_sessions, write_script

pytestmark = [pytest.mark.slow, needs_sdk("acp", "acp")]


class Editor:
    """The client side: records every session update, answers permission requests from a list, serves files
    from its own buffers (unsaved text) when `fs` is on, and runs terminals when `terminal` is on."""

    def __init__(self, answers: list[str] | None = None, buffers: dict[str, str] | None = None) -> None:
        self.updates: list[Any] = []
        self.answers = list(answers or [])
        self.asked: list[Any] = []
        self.buffers = dict(buffers or {})
        self.written: dict[str, str] = {}
        self.terminals: dict[str, subprocess.Popen[bytes]] = {}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        from acp.schema import AllowedOutcome, RequestPermissionResponse

        self.asked.append((tool_call, [o.option_id for o in options]))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answers.pop(0)))

    async def read_text_file(self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
                             **kwargs: Any) -> Any:
        from acp.schema import ReadTextFileResponse

        text = self.buffers[path] if path in self.buffers else Path(path).read_text()
        lines = text.splitlines(keepends=True)[(line or 1) - 1:]
        return ReadTextFileResponse(content="".join(lines[:limit] if limit else lines))

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> None:
        self.written[path] = content
        self.buffers[path] = content

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None, cwd: str | None = None,
                              **kwargs: Any) -> Any:
        from acp.schema import CreateTerminalResponse

        terminal = f"t{len(self.terminals) + 1}"
        self.terminals[terminal] = subprocess.Popen([command, *(args or [])], cwd=cwd, stdout=subprocess.PIPE,
                                                    stderr=subprocess.STDOUT, start_new_session=True)
        return CreateTerminalResponse(terminal_id=terminal)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        from acp.schema import WaitForTerminalExitResponse

        code = await asyncio.to_thread(self.terminals[terminal_id].wait)
        return WaitForTerminalExitResponse(exit_code=code)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        from acp.schema import TerminalOutputResponse

        process = self.terminals[terminal_id]
        output = process.stdout.read().decode() if process.stdout and process.poll() is not None else ""
        return TerminalOutputResponse(output=output, truncated=False)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> None:
        os.killpg(self.terminals[terminal_id].pid, 9)

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> None:
        process = self.terminals[terminal_id]
        if process.stdout:
            process.stdout.close()

    def on_connect(self, conn: Any) -> None:
        pass

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.updates if u.session_update == kind)

    def tool_updates(self) -> list[Any]:
        return [u for u in self.updates if u.session_update in ("tool_call", "tool_call_update")]


@asynccontextmanager
async def agent(editor: Editor, env: dict[str, str], cwd: Path, *args: str, fs: bool = False,
                terminal: bool = False) -> AsyncIterator[Any]:
    """`mylm acp ARGS` started by the SDK's client side, initialized with the given capabilities."""
    from acp import PROTOCOL_VERSION, spawn_agent_process
    from acp.schema import ClientCapabilities, FileSystemCapabilities

    log = open(cwd.parent / "acp-stderr.log", "ab")  # noqa: SIM115 - closed below
    try:
        async with spawn_agent_process(editor, sys.executable, "-m", "mylm", "acp", *args, env=env, cwd=cwd,
                                       transport_kwargs={"stderr": log}) as (conn, _process):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=terminal))
            yield conn
    finally:
        log.close()


def one_prompt(editor: Editor, env: dict[str, str], cwd: Path, text: str, *args: str, **capabilities: bool) -> Any:
    """A new session in `cwd` and one prompt in it; the prompt's response."""

    async def main() -> Any:
        async with agent(editor, env, cwd, *args, **capabilities) as conn:
            session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
            return await conn.prompt(session_id=session.session_id, prompt=prompt_blocks(text))

    return asyncio.run(main())


def prompt_blocks(text: str) -> list[Any]:
    from acp import text_block

    return [text_block(text)]


def test_a_prompt_streams_text_reasoning_and_a_tool_call_with_its_updates(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    workspace = isolated_user_state
    (workspace / "notes.txt").write_text("the code word is heron\n")
    script = write_script(tmp_path / "script.json", [
        {"text": call("read_file", path="notes.txt"), "reasoning": "I should read the notes."},
        "The code word is heron."])
    editor = Editor()

    response = one_prompt(editor, child_env(script), workspace, "What is the code word?")
    assert response.stop_reason == "end_turn"
    assert "The code word is heron." in editor.text() and "I will use a tool." in editor.text()
    assert editor.text("agent_thought_chunk") == "I should read the notes."
    started, *updates = editor.tool_updates()
    assert started.session_update == "tool_call" and started.kind == "read" and started.status == "pending"
    assert started.title == "Read notes.txt" and started.locations[0].path == str(workspace.resolve() / "notes.txt")
    assert [u.status for u in updates] == ["in_progress", "completed"]
    assert all(u.tool_call_id == started.tool_call_id for u in updates)
    assert "heron" in updates[-1].content[0].content.text
    assert editor.kinds().index("tool_call") < editor.kinds().index("tool_call_update")


def test_permission_allow_once_allow_always_and_reject(tmp_path: Path, isolated_user_state: Path) -> None:
    workspace = isolated_user_state
    (workspace / "old.txt").write_text("before\n")
    script = write_script(tmp_path / "script.json", [
        call("write_file", path="old.txt", content="after\n"),     # allow once
        call("write_file", path="b.txt", content="b\n"),           # allow always: write_file now runs unasked
        call("write_file", path="c.txt", content="c\n"),
        call("execute_command", command="touch d.txt"),           # rejected
        "Done.",
    ])
    editor = Editor(answers=["allow_once", "allow_always", "reject_once"])

    response = one_prompt(editor, child_env(script), workspace, "change files", "--sandbox", "off")
    assert response.stop_reason == "end_turn"
    asked = [(t.title, options) for t, options in editor.asked]
    assert [title for title, _ in asked] == ["replace old.txt with 6 bytes (2 lines)", "create b.txt with 2 bytes (2 lines)",
                                             "run `touch d.txt` in " + str(workspace.resolve())]
    assert asked[0][1] == ["allow_once", "allow_always", "reject_once"]
    assert (workspace / "old.txt").read_text() == "after\n" and (workspace / "c.txt").read_text() == "c\n"
    assert not (workspace / "d.txt").exists()
    starts = [u for u in editor.tool_updates() if u.session_update == "tool_call"]
    diff = starts[0].content[0]
    assert diff.type == "diff" and diff.old_text == "before\n" and diff.new_text == "after\n"
    assert starts[3].kind == "execute"
    final = [u.status for u in editor.tool_updates() if u.session_update == "tool_call_update"]
    assert final.count("completed") == 3 and final[-1] == "failed"


def test_cancel_stops_the_run_and_its_command(tmp_path: Path, isolated_user_state: Path) -> None:
    sleeping = SleepingCommand(isolated_user_state)
    script = write_script(tmp_path / "script.json", [call("execute_command", command=sleeping.command), "unused"])
    editor = Editor()

    async def main() -> tuple[Any, list[int]]:
        async with agent(editor, child_env(script), isolated_user_state, "--yes") as conn:
            session = await conn.new_session(cwd=str(isolated_user_state), mcp_servers=[])
            prompting = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=prompt_blocks("wait")))
            await asyncio.wait_for(asyncio.to_thread(sleeping.wait_ready), 120)
            while not sleeping.sleepers():
                await asyncio.sleep(0.05)
            await conn.cancel(session_id=session.session_id)
            response = await asyncio.wait_for(prompting, 60)
            return response, sleeping.sleepers()  # the prompt is answered once the group is reaped

    response, left = asyncio.run(main())
    assert response.stop_reason == "cancelled" and left == []
    (records,) = saved_sessions(Path(os.environ["XDG_DATA_HOME"]), "acp")
    assert records[-1]["type"] == "run_end" and records[-1]["stop_reason"] == "cancelled"


def test_with_fs_the_agent_reads_the_editors_unsaved_text_and_writes_through_it(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    workspace = isolated_user_state
    (workspace / "app.py").write_text("print('saved on disk')\n")
    unsaved = "print('unsaved in the editor')\n"
    script = write_script(tmp_path / "script.json", [
        call("read_file", path="app.py"),
        call("edit_file", path="app.py", old="unsaved in the editor", new="edited"),
        call("read_file", path="../outside.txt"),
        "It printed the unsaved text; I edited it.",
    ])
    path = str(workspace.resolve() / "app.py")
    editor = Editor(answers=["allow_once"], buffers={path: unsaved})

    response = one_prompt(editor, child_env(script), workspace, "look at app.py", fs=True)
    assert response.stop_reason == "end_turn"
    outputs = [u.content[0].content.text for u in editor.tool_updates()
               if u.session_update == "tool_call_update" and u.content and u.status in ("completed", "failed")]
    assert "unsaved in the editor" in outputs[0] and "saved on disk" not in outputs[0]
    assert editor.written == {path: "print('edited')\n"}
    assert (workspace / "app.py").read_text() == "print('saved on disk')\n"  # the editor saves, not mylm
    assert "outside the workspace" in outputs[-1] or "leads outside" in outputs[-1]


def test_with_terminal_commands_run_in_the_editors_terminal_after_asking(
    tmp_path: Path, isolated_user_state: Path
) -> None:
    script = write_script(tmp_path / "script.json", [call("execute_command", command="echo from-the-editor"), "Ok."])
    editor = Editor(answers=["allow_once"])

    response = one_prompt(editor, child_env(script), isolated_user_state, "echo", terminal=True)
    assert response.stop_reason == "end_turn"
    # Even a read-only command asks: nothing confines the editor's terminal.
    assert len(editor.asked) == 1 and list(editor.terminals) == ["t1"]
    updates = editor.tool_updates()
    assert any(u.content and u.content[0].type == "terminal" for u in updates)
    assert "exit code 0\nfrom-the-editor" in updates[-1].content[0].content.text


def test_session_load_replays_the_conversation_and_continues_it(tmp_path: Path, isolated_user_state: Path) -> None:
    # Two processes, each with its own scripted model.
    env = child_env(write_script(tmp_path / "first.json", ["First answer."]))
    later = child_env(write_script(tmp_path / "second.json", [{"text": "Second answer.", "expect": "First answer."}]))
    first, second = Editor(), Editor()

    async def main() -> tuple[str, Any]:
        async with agent(first, env, isolated_user_state) as conn:
            session = await conn.new_session(cwd=str(isolated_user_state), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=prompt_blocks("first question"))
        async with agent(second, later, isolated_user_state) as conn:
            await conn.load_session(cwd=str(isolated_user_state), session_id=session.session_id, mcp_servers=[])
            replayed = list(second.updates)
            response = await conn.prompt(session_id=session.session_id, prompt=prompt_blocks("second question"))
        return session.session_id, (replayed, response)

    session_id, (replayed, response) = asyncio.run(main())
    assert [(u.session_update, u.content.text) for u in replayed] == [
        ("user_message_chunk", "first question"), ("agent_message_chunk", "First answer.")]
    assert response.stop_reason == "end_turn"
    (records,) = saved_sessions(Path(os.environ["XDG_DATA_HOME"]), "acp")
    assert records[0]["id"] == session_id
    assert [r["content"] for r in records if r["type"] == "message"] == [
        "first question", "First answer.", "second question", "Second answer."]
