"""The transcript store: permissions, whole-record appends, replay, lookup, redaction, concurrent writers (T9, T11)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mylm.core.redact import Redactor
from mylm.core.paths import data_dir
from mylm.sessions import (
    INTERRUPTED,
    Transcript,
    close_dangling,
    find,
    latest,
    load,
    private_sessions_dir,
    read_header,
    read_records,
    replay,
    sessions_dir,
)
from mylm.core.types import Message


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_sessions_live_in_the_user_data_dir_owner_only(isolated_user_state: Path) -> None:
    directory = private_sessions_dir()
    assert directory == Path(os.environ["XDG_DATA_HOME"]) / "mylm" / "sessions" == sessions_dir()
    with Transcript.create(directory, redactor=Redactor(), header={"command": "ask"}) as transcript:
        transcript.messages([Message("user", "hi")])
    assert mode(directory) == 0o700 and mode(data_dir()) == 0o700
    assert mode(transcript.path) == 0o600
    assert transcript.path.parent == directory and transcript.path.name.endswith(".jsonl")


def test_sessions_existing_loose_modes_are_tightened(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    transcript = Transcript.create(directory, redactor=Redactor())
    transcript.close()
    os.chmod(transcript.path, 0o644)
    Transcript.open(transcript.path, redactor=Redactor()).close()
    assert mode(directory) == 0o700 and mode(transcript.path) == 0o600


def test_sessions_records_are_whole_lines_and_replay_to_the_conversation(tmp_path: Path) -> None:
    with Transcript.create(tmp_path, redactor=Redactor(), header={"command": "chat"}) as t:
        t.messages([Message("user", "one"), Message("assistant", "1")])
        t.reset()
        t.messages([Message("user", "two"), Message("assistant", "2\nwith a newline")])
        t.append({"type": "run_end", "stop_reason": "final_answer"})
    lines = t.path.read_text().splitlines()
    assert len(lines) == 7 and all(json.loads(line)["time"] for line in lines)
    session = load(t.path)
    assert session.header["command"] == "chat" and session.id == t.id
    assert session.history == (Message("user", "two"), Message("assistant", "2\nwith a newline"))
    assert session.title == "one"


def test_sessions_compacted_record_replaces_what_came_before() -> None:
    records = [
        {"type": "message", "role": "user", "content": "a"},
        {"type": "message", "role": "assistant", "content": "b"},
        {"type": "compacted", "messages": [{"role": "user", "content": "summary"}, {"role": "assistant", "content": "b"}]},
        {"type": "message", "role": "user", "content": "c"},
        {"type": "message", "role": "assistant", "content": "d"},
    ]
    assert [m.content for m in replay(records)] == ["summary", "b", "c", "d"]


def test_sessions_a_crash_after_the_prompt_resumes_with_alternating_roles(tmp_path: Path) -> None:
    with Transcript.create(tmp_path, redactor=Redactor()) as t:
        t.messages([Message("user", "q1"), Message("assistant", "a1"), Message("user", "q2")])
    history = load(t.path).history
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[-1].content == INTERRUPTED and history[1].content == "a1"


def test_sessions_close_dangling_marks_a_cut_reply_once() -> None:
    cut = close_dangling([Message("user", "q"), Message("assistant", "partial")])
    assert cut[-1].content == f"partial\n{INTERRUPTED}"
    assert close_dangling(list(cut)) == cut
    assert close_dangling([Message("user", "q"), Message("assistant", "done")], cut=False)[-1].content == "done"


def test_sessions_torn_or_foreign_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"type": "message", "role": "user", "content": "ok"}\n{"type": "mess\n[1, 2]\n\n')
    records, skipped = read_records(path)
    assert len(records) == 1 and skipped == 2
    assert load(path).history[0] == Message("user", "ok")


def test_sessions_lone_surrogates_do_not_crash_the_writer(tmp_path: Path) -> None:
    with Transcript.create(tmp_path, redactor=Redactor()) as t:
        t.messages([Message("user", "bad \udcff byte")])
    assert load(t.path).history[0].content == "bad \udcff byte"


def test_sessions_secrets_are_redacted_before_writing(tmp_path: Path) -> None:
    redactor = Redactor.from_environment({"MYLM_API_KEY": "sk-test-CANARY-0000000000000000", "FOO_TOKEN": "CANARY2-zzzz"})
    with Transcript.create(tmp_path, redactor=redactor, header={"base_url": "http://h/v1?key=CANARY2-zzzz"}) as t:
        t.messages([Message("user", "my key sk-test-CANARY-0000000000000000"), Message("assistant", "FOO_TOKEN=CANARY2-zzzz")])
        t.compacted([Message("user", "CANARY2-zzzz")])
    text = t.path.read_text()
    assert "CANARY" not in text and text.count("[REDACTED]") == 4


def test_sessions_find_by_id_prefix_or_suffix(tmp_path: Path) -> None:
    a = Transcript.create(tmp_path, redactor=Redactor())
    b = Transcript.create(tmp_path, redactor=Redactor())
    a.close(), b.close()
    assert find(tmp_path, a.id) == a.path and find(tmp_path, b.id + ".jsonl") == b.path
    assert find(tmp_path, a.id[-6:]) == a.path
    assert find(tmp_path, a.id[:8]) is None  # both start with the same date: ambiguous
    assert find(tmp_path, "../etc/passwd") is None and find(tmp_path, "") is None


def test_sessions_latest_is_the_most_recently_written(tmp_path: Path) -> None:
    assert latest(tmp_path) is None
    first = Transcript.create(tmp_path, redactor=Redactor())
    second = Transcript.create(tmp_path, redactor=Redactor())
    second.close()
    first.messages([Message("user", "later")])
    first.close()
    os.utime(second.path, ns=(1, 1))  # mtime resolution is coarse on some filesystems: make the order explicit
    assert latest(tmp_path) == first.path


def test_sessions_latest_in_a_directory_reads_only_the_headers(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    mine = Transcript.create(tmp_path, redactor=Redactor(), header={"cwd": str(here)})
    other = Transcript.create(tmp_path, redactor=Redactor(), header={"cwd": str(there)})
    headless = Transcript.create(tmp_path, redactor=Redactor())
    for transcript, mtime in ((mine, 1), (other, 2), (headless, 3)):
        transcript.close()
        os.utime(transcript.path, ns=(mtime, mtime))
    assert latest(tmp_path) == headless.path
    assert latest(tmp_path, cwd=here) == mine.path and latest(tmp_path, cwd=there) == other.path
    assert latest(tmp_path, cwd=tmp_path) is None
    assert read_header(other.path)["cwd"] == str(there) and read_header(tmp_path / "missing.jsonl") == {}


APPENDER = """
import sys
from pathlib import Path
from mylm.core.redact import Redactor
from mylm.sessions import Transcript
path, worker, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
transcript = Transcript.open(Path(path), redactor=Redactor())
for n in range(count):
    transcript.append({"type": "message", "role": "user", "content": f"{worker}:{n}:" + "x" * size})
"""


@pytest.mark.slow
def test_sessions_concurrent_writers_lose_and_corrupt_nothing(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    """THREATS T11: 8 processes x 300 records of 12 KB appended to one transcript."""
    transcript = Transcript.create(tmp_path, redactor=Redactor())
    transcript.close()
    workers, count, size = 8, 300, 12 * 1024
    command = [sys.executable, "-c", APPENDER, str(transcript.path)]
    processes = [subprocess.Popen([*command, str(w), str(count), str(size)], env=subprocess_env) for w in range(workers)]
    assert [p.wait() for p in processes] == [0] * workers
    records, skipped = read_records(transcript.path)
    assert skipped == 0
    seen = {tuple(r["content"].split(":")[:2]) for r in records if r["type"] == "message"}
    assert len(seen) == workers * count


def test_sessions_closed_transcript_refuses_appends(tmp_path: Path) -> None:
    transcript = Transcript.create(tmp_path, redactor=Redactor())
    transcript.close()
    with pytest.raises(ValueError, match="closed"):
        transcript.append({"type": "reset"})
