"""The delegate core the three front ends share: the held workspace, and the bridge from the approval hook (in
the run's worker thread) to a front end that asks someone, cancelled with the run."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from mylm.approval import Answer, ApprovalPolicy
from mylm.core.cancel import CancelToken
from mylm.delegate import HeldWorkspace, Question, RunHooks, RunSetup
from mylm.core.errors import CancelledError
from mylm.tools import builtin_tools
from mylm.core.types import ToolCall


def _tool(workspace: Path, name: str):  # type: ignore[no-untyped-def]
    return next(t for t in builtin_tools(workspace=workspace, memory=False) if t.name == name)


def test_a_workspace_swapped_for_a_link_refuses_every_later_call(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    held = HeldWorkspace.open(tmp_path / "sub")
    try:
        hooks = RunHooks(RunSetup(), held, CancelToken(), asyncio.new_event_loop())
        hook = hooks.permission(ApprovalPolicy(workspace=held.path, yes=True))
        call = ToolCall("write_file", {"path": "x.txt", "content": "x"})
        assert hook(call, _tool(held.path, "write_file")).allowed
        os.rename(tmp_path / "sub", tmp_path / "sub.old")
        (tmp_path / "sub").symlink_to(outside)
        refused = hook(call, _tool(held.path, "write_file"))
        assert not refused.allowed and "was replaced" in refused.reason
    finally:
        held.close()
        hooks.loop.close()


def test_a_question_goes_to_the_front_end_and_its_answer_decides(tmp_path: Path) -> None:
    asked: list[Question] = []

    async def ask(question: Question) -> Answer:
        asked.append(question)
        return Answer("no", "not today")

    async def main() -> tuple[bool, str]:
        hooks = RunHooks(RunSetup(ask=ask), None, CancelToken(), asyncio.get_running_loop())
        hook = hooks.permission(ApprovalPolicy(workspace=tmp_path))
        call = ToolCall("write_file", {"path": "x.txt", "content": "x"})
        verdict = await asyncio.to_thread(hook, call, _tool(tmp_path, "write_file"))
        return verdict.allowed, verdict.reason

    allowed, reason = asyncio.run(main())
    assert not allowed and reason == "the user declined this call: not today"
    assert asked[0].decision.action == "ask" and asked[0].call.name == "write_file"


def test_cancelling_the_run_withdraws_the_question_and_stops_the_hook(tmp_path: Path) -> None:
    waiting = threading.Event()
    withdrawn: list[bool] = []

    async def ask(question: Question) -> Answer:
        waiting.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            withdrawn.append(True)
            raise
        return Answer("yes")

    async def main() -> None:
        token = CancelToken()
        hooks = RunHooks(RunSetup(ask=ask), None, token, asyncio.get_running_loop())
        hook = hooks.permission(ApprovalPolicy(workspace=tmp_path))
        call = ToolCall("write_file", {"path": "x.txt", "content": "x"})
        pending = asyncio.ensure_future(asyncio.to_thread(hook, call, _tool(tmp_path, "write_file")))
        await asyncio.to_thread(waiting.wait)
        token.cancel()
        with pytest.raises(CancelledError):
            await pending

    asyncio.run(main())
    assert withdrawn == [True]
