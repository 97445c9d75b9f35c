"""One CLI turn: Ctrl-C landing in the printer, compaction, and how each ending is recorded."""

from __future__ import annotations

from pathlib import Path

from mylm.agent import Agent
from mylm.cli.record import Recorder
from mylm.cli.runner import run_exchange
from mylm.config import Settings
from mylm.core.redact import Redactor
from mylm.sessions import INTERRUPTED, load, read_records, sessions_dir
from mylm.testing import ScriptedLLM
from mylm.core.types import Message, StopReason, TextEvent


def recorder() -> Recorder:
    return Recorder.start(command="chat", settings=Settings(), redactor=Redactor(), resume=None, save=True)


def test_runner_ctrl_c_in_the_printer_cancels_and_keeps_the_partial_turn(tmp_path: Path) -> None:
    agent = Agent(ScriptedLLM(["a fairly long answer that streams in pieces"], chunk_size=5))
    shown: list[str] = []

    def handle(event: object) -> None:
        if isinstance(event, TextEvent):
            shown.append(event.text)
            if len(shown) == 2:
                raise KeyboardInterrupt  # as if Ctrl-C arrived while we were printing

    turn = run_exchange(agent, "q", (), handle)
    assert turn.result.stop_reason is StopReason.CANCELLED
    assert turn.history[-1].role == "assistant" and turn.history[-1].content.endswith(INTERRUPTED)
    assert [m.role for m in turn.added] == ["user", "assistant"]


def test_runner_printer_failure_stops_the_run_but_returns_it(tmp_path: Path) -> None:
    agent = Agent(ScriptedLLM(["answer text"]))

    def handle(event: object) -> None:
        raise BrokenPipeError

    turn = run_exchange(agent, "q", (), handle)
    assert isinstance(turn.output_error, BrokenPipeError) and turn.history[0] == Message("user", "q")


def test_runner_compacted_conversation_continues_and_is_recorded(tmp_path: Path) -> None:
    old = tuple(Message("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 80) for i in range(10))
    llm = ScriptedLLM(["A summary of the early turns.", "The answer."])
    agent = Agent(llm, context_budget=600, keep_recent_messages=2)
    rec = recorder()
    rec.prompt("new question")
    turn = run_exchange(agent, "new question", old, lambda event: None)
    rec.exchange(turn)
    rec.close()
    assert turn.result.compacted and turn.history == turn.result.history
    assert len(turn.history) < len(old) + 2 and turn.history[-1] == Message("assistant", "The answer.")
    (path,) = sorted(sessions_dir().glob("*.jsonl"))
    assert [r["type"] for r in read_records(path)[0]][-2:] == ["compacted", "run_end"]
    assert load(path).history == turn.history


def test_runner_failed_turn_adds_no_marker_text_and_the_next_request_still_alternates(tmp_path: Path) -> None:
    from mylm.core.errors import EndpointUnreachableError

    agent = Agent(ScriptedLLM([EndpointUnreachableError("down")]))
    turn = run_exchange(agent, "q", (Message("user", "a"), Message("assistant", "b")), lambda event: None)
    # How the run ended is metadata, never text the model would read as its own reply.
    assert [(m.role, m.content) for m in turn.history[2:]] == [("user", "q")]
    llm = ScriptedLLM(["fine"])
    run_exchange(Agent(llm), "again", turn.history, lambda event: None)
    assert [m.role for m in llm.requests[0].messages] == ["system", "user", "assistant", "user"]
    assert llm.requests[0].messages[-1].content == "q\n\nagain"
