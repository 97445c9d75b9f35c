"""Task files and the results file: parsing, whole lines, resuming after a torn line."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from mylm.batch import (
    ResultsFile,
    ResultsFileError,
    Task,
    TaskFileError,
    load_tasks,
    make_workspace,
    parse_tasks,
)


def test_tasks_parse_with_relative_workspace_and_extra_fields(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "p", "workspace": "repo", "max_iterations": 3, "expected": 7}\n\n'
                    '{"id": 2, "prompt": "q", "timeout": 1.5}\n')
    first, second = load_tasks(path)
    assert first == Task("a", "p", tmp_path / "repo", 3, None, {"expected": 7})
    assert second.id == "2" and second.timeout == 1.5 and second.workspace is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "p"}', '"id" must be a non-empty string'),
        ('{"id": "a"}', '"prompt" must be a non-empty string'),
        ('{"id": "a", "prompt": "p", "max_iterations": 0}', "positive whole number"),
        ('{"id": "a", "prompt": "p", "max_iterations": 1.5}', "positive whole number"),
        ('[1]', "must be a JSON object"),
        ('{"id": "a", ', "not valid JSON"),
    ],
)
def test_bad_task_lines_name_the_line(line: str, message: str) -> None:
    with pytest.raises(TaskFileError, match="tasks line 2") as caught:
        parse_tasks(['{"id": "ok", "prompt": "fine"}', line])
    assert message in str(caught.value)


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(TaskFileError, match="already used on line 1"):
        parse_tasks(['{"id": "a", "prompt": "p"}', '{"id": "a", "prompt": "q"}'])


def test_results_file_resumes_past_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"id":"a","stop_reason":"final_answer"}\n{"id":"b","stop_re')
    with ResultsFile(path) as results:
        assert set(results.done) == {"a"}
        assert results.dropped_bytes == len(b'{"id":"b","stop_re')
        results.append({"id": "b", "stop_reason": "final_answer"})
    lines = path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]


def test_results_file_refuses_a_file_that_is_not_results(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("hello world\n")
    with pytest.raises(ResultsFileError, match="line 1 is not a result line"):
        ResultsFile(path)


def test_lines_from_many_threads_stay_whole(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    big = "x" * 200_000  # far beyond any pipe buffer: one write() still puts it in one piece
    with ResultsFile(path, fsync="never") as results:
        threads = [threading.Thread(target=lambda i=i: [results.append({"id": f"{i}-{k}", "text": big})
                                                         for k in range(5)]) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 40 and all(r["text"] == big for r in records)


def test_workspace_copy_keeps_symlinks_as_links(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.txt").write_text("hi")
    (tmp_path / "secret").write_text("outside")
    (source / "link").symlink_to(tmp_path / "secret")
    copy = make_workspace("t/1", source, tmp_path / "ws")
    assert (copy / "a.txt").read_text() == "hi"
    assert (copy / "link").is_symlink()
    assert copy.parent == tmp_path / "ws" and "t_1" in copy.name
