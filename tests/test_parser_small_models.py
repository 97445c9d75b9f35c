"""What the first capable small models (Qwen2.5-Coder 0.5B/1.5B Instruct) write when no grammar holds them, and
how the parser reads it (issues 27, 30, 31). The texts are the models' own, quoted from the issues or recorded
in tests/data/parser/ (the corpus files name where each was seen)."""

from __future__ import annotations

import pytest

from mylm.protocol import StreamParser, parse_completion
from mylm.protocol.parsed import ParsedTurn

TOOLS = {"read_file": ["path"], "list_dir": ["path"], "write_file": ["path", "content"],
         "execute_command": ["command"], "search_memory": ["query", "limit"]}


def streamed(text: str, size: int = 3, **options: object) -> ParsedTurn:
    parser = StreamParser(coalesce=1, **options)  # type: ignore[arg-type]
    for i in range(0, len(text), size):
        parser.feed(text[i : i + size])
    parser.close()
    assert parser.result is not None
    return parser.result


# ------------------------------------------------------------------- a reply that opens with <observation>


@pytest.mark.parametrize("text", [
    # Issue 27 item 5: with `<observation>` a stop string, the server cut the reply at its first characters.
    "",
    "<observation",
    "<observation>",
    "<observation>\nhello.txt contains: Hello, world!\n</observation>\nThe file says Hello, world!",
])
def test_a_reply_that_opens_with_an_invented_observation_says_so(text: str) -> None:
    turn = parse_completion(text, tools=TOOLS)
    assert turn.tool_calls == () and turn.error is not None
    assert turn.invented_observation == (text != "")
    assert turn.discarded == text  # what the model wrote, for a correction that quotes it
    assert streamed(text, tools=TOOLS) == turn


def test_an_invented_result_after_a_call_is_flagged_and_kept_aside() -> None:
    text = ('<tool_code>\n<name>read_file</name>\n<parameters>{"path": "hello.txt"}</parameters>\n</tool_code>\n'
            "Observation: Hello, world!\nThe file says hello.")
    turn = parse_completion(text, tools=TOOLS)
    assert [c.name for c in turn.tool_calls] == ["read_file"]
    assert turn.invented_observation and turn.discarded == "Observation: Hello, world!\nThe file says hello."
    assert streamed(text, tools=TOOLS) == turn


def test_an_ordinary_reply_invents_nothing() -> None:
    turn = parse_completion("The file says hello.", tools=TOOLS)
    assert not turn.invented_observation and turn.discarded == ""
