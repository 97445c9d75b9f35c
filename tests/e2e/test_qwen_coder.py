"""End-to-end: the real Qwen2.5-Coder-0.5B-Instruct, in-process (`--provider local`), run by mylm's agent.

Tiny tool tasks a capable model can do, each asserting what such a model must do: a well-formed call to the
right tool was run, the run ended with an answer (or the file the task asked for), the answer is right, and
nothing ran away (no turn cut by the token cap, few turns). Greedy decoding (temperature 0, fixed seed) under
the agent's defaults (the grammar where the engine takes one), short prompts and a small token cap keep each
task short on two shared cores. The model comes from scripts/install_models.sh (or `mylm models pull
qwen2.5-coder-0.5b`); `.ci/run` exports MYLM_TEST_MODELS and MYLM_REQUIRE_MODELS=1, so these run in CI.

Every run prints its transcript (the model's raw replies and the tool calls): it is what a failing test, or an
`xfail` below, is about.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mylm import Agent, RunResult, StopReason, ToolResultEvent
from mylm.evaluation import RecordingLLM
from mylm.llm import LLM
from mylm.providers import Endpoint, create_llm
from mylm.tools.files import file_tools
from mylm.tools.paths import Workspace
from tests.support import need_real_model

MODEL = "qwen2.5-coder-0.5b"
#: Enough for a call or a short answer from this model; a reply that needs more is a runaway.
MAX_TOKENS = 96
MAX_ITERATIONS = 3


@dataclass(frozen=True)
class Transcript:
    result: RunResult
    replies: tuple[str, ...]
    finishes: tuple[str | None, ...]
    calls: tuple[tuple[str, str, bool], ...]  # tool name, output, is_error

    def ran(self, tool: str, seeing: str = "") -> bool:
        """Whether a call to `tool` ran without error (its arguments were well-formed), `seeing` in its output."""
        return any(name == tool and seeing in output and not error for name, output, error in self.calls)

    def answered(self, *words: str) -> bool:
        """Whether the run ended with an answer holding one of `words` (case-insensitive)."""
        answer = self.result.final_text.lower()
        return self.result.stop_reason is StopReason.FINAL_ANSWER and any(w.lower() in answer for w in words)

    def show(self) -> str:
        replies = zip(self.replies, self.finishes, strict=True)
        turns = "\n".join(f"  reply {i} ({finish}): {text!r}" for i, (text, finish) in enumerate(replies, 1))
        calls = "\n".join(f"  ran {n}: {out[:200]!r}{' (error)' if e else ''}" for n, out, e in self.calls)
        return (
            f"stop: {self.result.stop_reason.value}, answer: {self.result.final_text!r}, "
            f"error: {self.result.error}\n{turns}\n{calls}"
        )


@pytest.fixture(scope="module")
def qwen() -> Iterator[LLM]:
    path = need_real_model(MODEL)
    options = {"temperature": 0.0, "seed": 7, "n_ctx": 4096, "n_threads": 2}
    yield create_llm(Endpoint(provider="local", model=str(path), options=options))
    from mylm.providers.local_engine import close_all

    close_all()


def run(llm: LLM, workspace: Path, prompt: str, tools: tuple[str, ...]) -> Transcript:
    recorder = RecordingLLM(llm)
    chosen = [t for t in file_tools(Workspace(workspace)) if t.name in tools]
    agent = Agent(
        recorder, chosen, max_iterations=MAX_ITERATIONS, max_tokens=MAX_TOKENS, timeout=900.0,
        workspace=workspace,
    )
    result = agent.run(prompt)
    transcript = Transcript(
        result,
        tuple(t.text for t in recorder.turns),
        tuple(t.finish.reason if t.finish else None for t in recorder.turns),
        tuple((e.name, e.output, e.is_error) for e in result.events if isinstance(e, ToolResultEvent)),
    )
    print(transcript.show())
    return transcript


def no_runaway(transcript: Transcript) -> None:
    """No reply ran into the token cap, and the run ended before the iteration limit."""
    assert all(f not in ("max_tokens", "length") for f in transcript.finishes), transcript.show()
    assert transcript.result.stop_reason is not StopReason.MAX_ITERATIONS, transcript.show()
    assert len(transcript.replies) <= MAX_ITERATIONS


#: Why a task fails today: the agent's behaviour with this model, quoted from the real transcript (greedy, seed 7,
#: 29 November). What is left is the model's own habit of making the call it just made again, at an iteration limit
#: of three.
#: The lead is changing that behaviour (issue 27); an xfail that passes is reported, and is then made a plain test.
TODAY = {
    "read": "answers 'secret' unread and is sent back to read secret.txt (unlooked), then replies the bare word "
    "'read_file' (run as a call with no arguments: path is missing), repeats that, and sends an empty reply: "
    "max_iterations",
    "list": "announces list_dir in prose (sent back: unlooked), replies the bare word 'list_dir' (run as the call), "
    "calls list_dir again with the same result; its right answer (tool.py) comes as the fourth reply, past the "
    "iteration limit of three",
    "write": "the first write_file call is right; it repeats it twice (\"Hello, mylm\\n\"), then sends an empty "
    "reply: max_iterations",
    "count": "an empty reply, then the bare answer '1' with no call; sent back to list the directory (unlooked), "
    "it answers '1' again, which is taken",
}


def today(task: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=False, reason=TODAY[task])


#: files, prompt, the tools offered, the call that must run (tool, text in its output), words one of which answers.
ANSWERING = [
    pytest.param(
        {"secret.txt": "The code word is PELICAN.\n"}, "What is the code word in secret.txt?",
        ("read_file", "list_dir"), ("read_file", "PELICAN"), ("PELICAN",), id="read-a-word", marks=today("read"),
    ),
    pytest.param(
        {"notes.md": "# notes\n", "tool.py": "print('hi')\n", "data.csv": "a,b\n"},
        "Which file in this directory is a Python file?",
        ("list_dir", "read_file"), ("list_dir", "tool.py"), ("tool.py",), id="name-the-python-file",
        marks=today("list"),
    ),
    pytest.param(
        {"app.py": "x = 1\n", "util.py": "x = 1\n", "setup.py": "x = 1\n", "README.md": "# readme\n"},
        "How many Python files are in this directory?",  # the quick start's question
        ("list_dir",), ("list_dir", "setup.py"), ("3", "three"), id="count-python-files", marks=today("count"),
    ),
]


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize(("files", "prompt", "tools", "call", "answers"), ANSWERING)
def test_calls_the_tool_then_answers_from_its_output(
    qwen: LLM,
    isolated_user_state: Path,
    files: dict[str, str],
    prompt: str,
    tools: tuple[str, ...],
    call: tuple[str, str],
    answers: tuple[str, ...],
) -> None:
    for name, text in files.items():
        (isolated_user_state / name).write_text(text)
    transcript = run(qwen, isolated_user_state, prompt, tools)
    assert transcript.ran(*call), transcript.show()
    assert transcript.answered(*answers), transcript.show()
    no_runaway(transcript)


@pytest.mark.engine
@pytest.mark.slow
@today("write")
def test_writes_the_file_it_was_asked_for(qwen: LLM, isolated_user_state: Path) -> None:
    transcript = run(
        qwen, isolated_user_state, "Create a file hello.txt containing exactly: Hello, mylm", ("write_file",)
    )
    assert transcript.ran("write_file"), transcript.show()
    assert (isolated_user_state / "hello.txt").read_text().strip() == "Hello, mylm", transcript.show()
    assert transcript.result.stop_reason in (StopReason.FINAL_ANSWER, StopReason.DONE_TOOL), transcript.show()
    no_runaway(transcript)


def test_the_ggufs_chat_template_teaches_the_tool_dialect_the_registry_records() -> None:
    """The registry says Qwen2.5 calls tools as Hermes-style `<tool_call>` JSON; the model's template agrees."""
    path = need_real_model(MODEL, needs=("gguf",))
    import gguf

    from mylm.models.registry import lookup

    field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode()
    info = lookup(MODEL)
    assert info is not None and info.tool_dialect == "hermes" and info.chat_format == "chatml"
    assert "<tool_call>" in template and '"arguments": ' in template and "<tool_response>" in template
    assert "<|im_start|>" in template
