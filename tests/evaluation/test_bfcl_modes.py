"""`mylm eval` on BFCL questions in each mode, against a loopback OpenAI-compatible server that streams scripted
replies in small delayed chunks: what each mode sends, what it reads back, and the table and JSON it prints."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mylm.core.errors import ConfigError
from mylm.core.types import ToolCall
from mylm.evaluation import bfcl
from mylm.protocol.parser import format_tool_call
from tests.cli.cli_support import invoke
from tests.providers.servers import Completion, OpenAIServer, Raw

DATA = Path(__file__).resolve().parent.parent / "data" / "bfcl"
GOOD = format_tool_call(ToolCall("calculate_triangle_area", {"base": 10, "height": 5}))
NATIVE_GOOD = Completion("", tool_calls=[{"id": "call_1", "name": "calculate_triangle_area",
                                          "arguments": '{"base": 10, "height": 5}'}])
#: What Qwen2.5-Coder wrote through llama-server's native route (issue 27): a call fenced in the content.
FENCED = ('To find the area I will call the function.\n```json\n{"name": "calculate_triangle_area", '
          '"arguments": {"base": 10, "height": 5}}\n```')
BMI = format_tool_call(ToolCall("determine_body_mass_index", {"weight": 10.0, "height": 5.0}))
#: The same for simple_python_2 (math.hypot, math_hypot on the wire); a fenced call of another tool is not one.
FENCED_HYPOT = '```json\n{"name": "math_hypot", "arguments": {"x": 4, "y": 5}}\n```'



def _eval(server: OpenAIServer, *args: str) -> Any:
    return invoke(["eval", "--base-url", server.base_url, "-m", "m", "--bfcl-data", str(DATA), *args])


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _generations(server: OpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.path.endswith("/chat/completions")]


def test_protocol_modes_send_mylm_s_prompt_with_and_without_the_grammar() -> None:
    with OpenAIServer([GOOD, FENCED]) as server:
        result = _eval(server, "--category", "simple_python", "--limit", "1", "--mode",
                       "protocol,protocol-nogrammar", "--json")
        bodies = _generations(server)
    assert result.exit_code == 0, result.stderr
    items = [line for line in _lines(result.stdout) if line["type"] == "item"]
    assert [(i["mode"], i["passed"], i["in_text"], i["wrong_count"]) for i in items] == [
        # The fenced JSON call Qwen2.5-Coder writes without a grammar is read as the call it is.
        ("protocol", True, False, False), ("protocol-nogrammar", True, False, False)]
    assert items[0]["detail"]["calls"] == [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}]
    assert "grammar" in bodies[0] and "grammar" not in bodies[1]
    assert "tools" not in bodies[0] and "calculate_triangle_area" in bodies[0]["messages"][0]["content"]


def test_native_sends_the_endpoint_s_own_tools_as_clients_do_and_reads_tool_calls() -> None:
    # simple_python_1 is math.factorial: OpenAI's API takes no dots, so BFCL's handlers send math_factorial.
    native = Completion("", tool_calls=[{"id": "c", "name": "math_factorial", "arguments": '{"number": 5}'}])
    with OpenAIServer([NATIVE_GOOD, native, FENCED_HYPOT, FENCED]) as server:
        result = _eval(server, "--category", "simple_python", "--limit", "4", "--mode", "native", "--json")
        bodies = _generations(server)
    assert result.exit_code == 0, result.stderr
    items = [line for line in _lines(result.stdout) if line["type"] == "item"]
    assert [(i["id"], i["passed"], i["in_text"]) for i in items] == [
        ("simple_python_0", True, False), ("simple_python_1", True, False), ("simple_python_2", False, True),
        ("simple_python_3", False, False)]
    assert items[1]["detail"]["calls"][0]["name"] == "math.factorial"  # scored under BFCL's own name
    body = bodies[1]
    assert "parallel_tool_calls" not in body and "grammar" not in body
    tool = body["tools"][0]["function"]
    assert tool["name"] == "math_factorial"
    assert tool["parameters"]["type"] == "object"  # BFCL's "dict"
    assert body["messages"] == [{"role": "user", "content": "Calculate the factorial of 5 using math functions."}]


def test_serve_mode_asks_an_in_process_mylm_serve_as_an_openai_client_does() -> None:
    served_call = format_tool_call(ToolCall("math_factorial", {"number": 5}))
    with OpenAIServer([GOOD, served_call]) as server:
        result = _eval(server, "--category", "simple_python", "--limit", "2", "--mode", "serve", "--json")
        bodies = _generations(server)
    assert result.exit_code == 0, result.stderr
    items = [line for line in _lines(result.stdout) if line["type"] == "item"]
    assert [(i["passed"], i["detail"]["calls"][0]["name"]) for i in items] == [
        (True, "calculate_triangle_area"), (True, "math.factorial")]
    # Upstream, mylm serve asked in mylm's protocol (the client's tools in the prompt, the grammar on).
    assert all("tools" not in b and "grammar" in b for b in bodies)
    assert "math_factorial" in bodies[1]["messages"][0]["content"]


def test_an_irrelevance_question_passes_only_without_a_call() -> None:
    # irrelevance_0 asks for a triangle's area with only determine_body_mass_index at hand (issue 27's example).
    with OpenAIServer([BMI, "<final_answer>None of the tools solves equations.</final_answer>"]) as server:
        result = _eval(server, "--category", "irrelevance", "--limit", "2", "--mode", "protocol", "--json")
    items = [line for line in _lines(result.stdout) if line["type"] == "item"]
    assert [i["passed"] for i in items] == [False, True]
    items.reverse()
    assert items[1]["wrong_count"] and items[1]["detail"]["expected_calls"] == 0


def test_the_table_has_a_row_per_category_and_mode_and_the_totals() -> None:
    replies = [GOOD, BMI, NATIVE_GOOD, Completion("I cannot help with a triangle.")]
    with OpenAIServer(replies) as server:
        result = _eval(server, "--category", "simple_python,irrelevance", "--limit", "1", "--mode",
                       "protocol", "--mode", "native", "--offset", "0")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["category", "mode", "accuracy", "passed", "in", "text", "wrong", "#", "errors",
                                "median", "s"]
    rows = [line.split() for line in lines[1:] if line and not line.startswith(("-", "best"))]
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("simple_python", "protocol", "1/1"), ("irrelevance", "protocol", "0/1"),
        ("simple_python", "native", "1/1"), ("irrelevance", "native", "1/1"),
        ("all", "protocol", "1/2"), ("all", "native", "2/2"),
    ]
    assert "best mode for the agent: protocol" in result.stdout


def test_json_lines_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    with OpenAIServer([GOOD]) as server:
        result = _eval(server, "--category", "simple_python", "--offset", "0", "--limit", "1", "--output", str(out))
    assert result.exit_code == 0, result.stderr
    assert "category" in result.stdout  # the table still prints
    lines = _lines(out.read_text())
    assert [line["type"] for line in lines] == ["item", "row", "run"]
    assert lines[1] == {"type": "row", "category": "simple_python", "mode": "protocol", "items": 1, "passed": 1,
                        "in_text": 0, "wrong_count": 0, "errors": 0, "median_seconds": lines[1]["median_seconds"],
                        "accuracy": 1.0}
    assert lines[2]["best_mode"] == "protocol" and lines[2]["saved"] is None


def test_an_endpoint_error_is_an_item_error_and_a_dead_endpoint_one_line() -> None:
    with OpenAIServer([Completion("x", error_after={"error": {"message": "model crashed", "type": "server_error"}})
                       ]) as server:
        result = _eval(server, "--category", "simple_python", "--limit", "1", "--json")
    item = _lines(result.stdout)[0]
    assert result.exit_code == 0 and item["error"] and "model crashed" in item["error"] and not item["passed"]
    dead = invoke(["eval", "--base-url", "http://127.0.0.1:9/v1", "-m", "m", "--bfcl-data", str(DATA),
                   "--category", "simple_python", "--limit", "1"])
    assert dead.exit_code == 1 and dead.stderr.count("\n") == 1 and "127.0.0.1:9" in dead.stderr


def test_native_mode_is_skipped_where_the_provider_has_no_tool_calling() -> None:
    with OpenAIServer([GOOD]) as server:
        result = invoke(["eval", "--provider", "openai-completions", "--base-url", server.base_url, "-m", "m",
                         "--bfcl-data", str(DATA), "--category", "simple_python", "--limit", "1", "--mode",
                         "native,protocol", "--json"])
    assert result.exit_code == 0, result.stderr
    assert "skipping mode native" in result.stderr
    assert [i["mode"] for i in _lines(result.stdout) if i["type"] == "item"] == ["protocol"]


def test_unknown_category_or_mode_and_missing_data_are_one_line() -> None:
    for args, words in ((["--category", "nope"], "unknown --category 'nope'"),
                        (["--mode", "fast"], "unknown --mode 'fast'"),
                        (["--category", "simple_python"], "no BFCL data found")):
        result = invoke(["eval", "--base-url", "http://127.0.0.1:9/v1", *args])
        assert result.exit_code == 2 and words in result.stderr, result.stderr


def test_bfcl_data_is_found_in_a_directory_a_wheel_or_the_cache(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "bfcl_eval-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in DATA.rglob("BFCL_v*.json"):
            archive.write(path, "bfcl_eval/data/" + path.relative_to(DATA).as_posix())
    for where in (DATA, wheel, tmp_path):
        questions = bfcl.load(bfcl.source_at(where), "parallel", offset=1, limit=2)
        assert [q.id for q in questions] == ["parallel_1", "parallel_2"] and questions[0].answers
    with pytest.raises(ConfigError, match="no BFCL data found"):
        bfcl.locate(None)
    cache = bfcl.cache_dir()
    cache.mkdir(parents=True)
    (cache / wheel.name).write_bytes(wheel.read_bytes())
    assert bfcl.locate(None).wheel == cache / wheel.name
    with pytest.raises(ConfigError, match="no BFCL data there"):
        bfcl.source_at(tmp_path / "cache-less")


def test_bfcl_types_become_json_schema_as_bfcl_s_openai_handlers_convert_them() -> None:
    schema = bfcl.json_schema({"type": "dict", "required": ["a"], "properties": {
        "a": {"type": "float", "description": "A."}, "b": {"type": "tuple", "items": {"type": "integer"}},
        "c": {"type": "any"}, "d": {"type": "dict", "properties": {"e": {"type": "float", "description": "E."}}},
        "f": {"type": "array", "items": {"type": "dict", "properties": {"g": {"type": "boolean"}}}},
    }})
    props = schema["properties"]
    assert schema["type"] == "object" and schema["required"] == ["a"]
    assert props["a"] == {"type": "number", "format": "float", "description": "A. This is a float type value."}
    assert props["b"] == {"type": "array", "items": {"type": "integer"}}
    assert props["c"]["type"] == "string" and props["d"]["type"] == "object"
    assert props["d"]["properties"]["e"]["type"] == "number"
    assert props["f"]["items"] == {"type": "object", "properties": {"g": {"type": "boolean"}}}


def _fake_wheel(directory: Path) -> Path:
    """A `bfcl-eval` wheel holding the excerpt, for pip to find."""
    wheel = directory / "bfcl_eval-9.9.9-py3-none-any.whl"
    info = "bfcl_eval-9.9.9.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in DATA.rglob("BFCL_v*.json"):
            archive.write(path, "bfcl_eval/data/" + path.relative_to(DATA).as_posix())
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: bfcl-eval\nVersion: 9.9.9\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def test_fetch_bfcl_downloads_the_wheel_with_pip_without_dependencies(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    index.mkdir()
    _fake_wheel(index)
    # pip's own configuration points it at the index (here a local directory): no network.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    with OpenAIServer([GOOD]) as server:
        result = invoke(["eval", "--base-url", server.base_url, "-m", "m", "--fetch-bfcl", "--category",
                         "simple_python", "--limit", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    assert (bfcl.cache_dir() / "bfcl_eval-9.9.9-py3-none-any.whl").is_file()
    assert [line["passed"] for line in _lines(result.stdout) if line["type"] == "item"] == [True]
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    failed = invoke(["eval", "--fetch-bfcl", "--category", "simple_python"])
    assert failed.exit_code == 1 and "pip could not download bfcl-eval" in failed.stderr


def test_a_made_up_tool_kept_through_every_correction_is_handed_out_as_mylm_serve_does_not_at_all() -> None:
    # irrelevance_1, Qwen2.5-Coder-1.5B: asked to sum numbers with only an unrelated tool, it called math.sum
    # three times. Out of corrections, `mylm serve` gives its client the reply's text and no call; the eval
    # scores what a client gets, and keeps what the model tried in the detail.
    made_up = format_tool_call(ToolCall("math.sum", {"numbers": [1, 2, 3]}))
    with OpenAIServer([made_up] * 3 + ["<final_answer>6</final_answer>"]) as server:
        result = _eval(server, "--category", "irrelevance", "--limit", "2", "--mode", "protocol", "--json")
    items = [line for line in _lines(result.stdout) if line["type"] == "item"]
    first = items[0]
    assert first["passed"] and not first["wrong_count"] and first["detail"]["calls"] == []
    assert first["detail"]["refused"] == [{"name": "math.sum", "arguments": {"numbers": [1, 2, 3]}}]
    assert first["detail"]["replies"] == [made_up] * 3  # each reply as the model wrote it, for reading a miss


def test_a_question_cut_by_the_time_limit_keeps_what_the_model_wrote() -> None:
    # BFCL irrelevance_88 ran out the 900 s limit with a 4,096-token reply whose text was never recorded.
    def event(text: str) -> bytes:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    runaway = Raw([event("The area is "), event("2000000")], then="hang")
    with OpenAIServer([runaway]) as server:
        result = _eval(server, "--category", "simple_python", "--limit", "1", "--mode", "protocol", "--json",
                       "--timeout", "2")
    assert result.exit_code == 0, result.stderr
    item = next(line for line in _lines(result.stdout) if line["type"] == "item")
    assert item["error"] and not item["passed"]
    assert item["detail"]["replies"][-1].startswith("The area is 2000000"), item
