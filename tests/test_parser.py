"""The stream parser's behaviour: what is shown when, what runs, and what the model is told."""

from __future__ import annotations

import pytest

from mylm.protocol.parser import (
    CallParsed,
    ParseEvent,
    ReasoningEvent,
    StreamParser,
    TextEvent,
    format_tool_call,
    parse_block,
    parse_completion,
)
from mylm.core.types import ToolCall

BLOCK = '<tool_code>\n<name>execute_command</name>\n<parameters>\n{"command": "ls"}\n</parameters>\n</tool_code>'


def feed_all(parser: StreamParser, chunks: list[str]) -> list[list[ParseEvent]]:
    return [parser.feed(chunk) for chunk in chunks]


def shown(events: list[ParseEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextEvent))


def test_stream_partial_tag_is_held_back_until_decided() -> None:
    parser = StreamParser(coalesce=1)
    first = parser.feed("Let me look. <tool_")
    assert shown(first) == "Let me look. "
    second = parser.feed("code>\n<name>execute_command</name>")
    assert shown(second) == ""
    parser.feed('<parameters>{"command": "ls"}</parameters>')
    rest = parser.close()
    assert [e.call.name for e in rest if isinstance(e, CallParsed)] == ["execute_command"]


def test_stream_non_tag_angle_bracket_is_released() -> None:
    parser = StreamParser(coalesce=1)
    assert shown(parser.feed("if a <t")) == "if a "
    assert shown(parser.feed("b then")) == "<tb then"


def test_stream_call_is_emitted_as_soon_as_its_end_tag_arrives() -> None:
    parser = StreamParser(reasoning_open=False)
    batches = feed_all(parser, ["Checking.\n", BLOCK[:40], BLOCK[40:-3], BLOCK[-3:]])
    assert not any(isinstance(e, CallParsed) for batch in batches[:3] for e in batch)
    assert [e.call.arguments for e in batches[3] if isinstance(e, CallParsed)] == [{"command": "ls"}]


def test_lone_think_close_unknown_template_holds_calls_until_the_end() -> None:
    """Lone </think>: whether the template opened reasoning is unknown, so a complete call is not emitted (and
    the stream not closed early) until the reply shows it; a later lone </think> makes it reasoning."""
    parser = StreamParser(multiple_calls=False)
    batches = feed_all(parser, ["Draft:\n", BLOCK])
    assert not any(isinstance(e, CallParsed) for batch in batches for e in batch) and not parser.finished
    parser.feed("\nNo, just answer.</think>\nThe answer is 4.")
    parser.close()
    assert parser.result is not None
    assert parser.result.tool_calls == () and parser.result.final_answer == "The answer is 4."
    assert "<tool_code>" in parser.result.reasoning


def test_lone_think_close_unknown_template_emits_the_call_at_close() -> None:
    parser = StreamParser(multiple_calls=False)
    feed_all(parser, ["Checking.\n", BLOCK])
    assert [e.call.name for e in parser.close() if isinstance(e, CallParsed)] == ["execute_command"]


def test_lone_think_close_own_think_opener_releases_calls_at_once() -> None:
    """A reply that opens its own <think> shows the template did not: the call after it is emitted at once."""
    parser = StreamParser(multiple_calls=False)
    batches = feed_all(parser, ["<think>plan</think>\n", BLOCK])
    assert any(isinstance(e, CallParsed) for e in batches[-1]) and parser.finished


def test_lone_think_close_known_open_template_reads_the_start_as_reasoning() -> None:
    turn = parse_completion("drafting " + BLOCK + "</think>\nDone.", reasoning_open=True)
    assert turn.tool_calls == () and turn.final_answer == "Done."


def test_lone_think_close_call_after_it_runs() -> None:
    turn = parse_completion("I should list.\n</think>\n" + BLOCK)
    assert [c.name for c in turn.tool_calls] == ["execute_command"] and "I should list." in turn.reasoning


def test_stream_fenced_call_waits_for_the_fence_to_be_decided() -> None:
    parser = StreamParser(coalesce=1)
    during = feed_all(parser, ["```xml\n", BLOCK, "\n```\n"])
    assert not any(isinstance(e, CallParsed) for batch in during for e in batch)
    end = parser.close()
    assert [e.call.name for e in end if isinstance(e, CallParsed)] == ["execute_command"]
    assert parser.result is not None and parser.result.thought == ""  # the wrapper fence is not thought


def test_stream_fenced_example_is_released_as_text_when_prose_follows() -> None:
    parser = StreamParser(coalesce=1)
    events = [e for batch in feed_all(parser, ["```xml\n", BLOCK, "\n```\n", "That is the format."]) for e in batch]
    events += parser.close()
    assert not any(isinstance(e, CallParsed) for e in events)
    assert shown(events) == "```xml\n" + BLOCK + "\n```\nThat is the format."


def test_stream_call_events_match_result_calls() -> None:
    text = "a " + BLOCK + " b " + BLOCK.replace("ls", "pwd") + " c"
    parser = StreamParser(coalesce=1)
    events = [e for batch in feed_all(parser, list(text)) for e in batch] + parser.close()
    assert parser.result is not None
    assert tuple(e.call for e in events if isinstance(e, CallParsed)) == parser.result.tool_calls
    assert [c.arguments["command"] for c in parser.result.tool_calls] == ["ls", "pwd"]


def test_stream_reasoning_open_streams_reasoning_not_text() -> None:
    parser = StreamParser(reasoning_open=True, coalesce=1)
    events = parser.feed("thinking about it") + parser.feed("</think>The answer.") + parser.close()
    assert [type(e) for e in events] == [ReasoningEvent, TextEvent]
    assert parser.result is not None and parser.result.final_answer == "The answer."


def test_stream_lone_think_close_reclassifies_result_but_not_events() -> None:
    parser = StreamParser(coalesce=1)
    events = parser.feed("pondering") + parser.feed("</think>Answer.") + parser.close()
    assert shown(events) == "ponderingAnswer."  # streaming is append-only
    assert parser.result is not None
    assert (parser.result.reasoning, parser.result.final_answer) == ("pondering", "Answer.")


def test_stream_feed_after_close_raises() -> None:
    parser = StreamParser()
    parser.close()
    with pytest.raises(RuntimeError):
        parser.feed("x")


def test_stream_flush_processes_coalesced_text() -> None:
    parser = StreamParser(coalesce=1000)
    assert parser.feed("hello") == []
    assert shown(parser.flush()) == "hello"
    assert parser.flush() == []


def test_stream_close_twice_is_harmless() -> None:
    parser = StreamParser()
    parser.feed("hi")
    parser.close()
    assert parser.close() == []
    assert parser.result is not None and parser.result.final_answer == "hi"


def test_turn_text_stops_at_fabricated_observation() -> None:
    turn = parse_completion(BLOCK + "\n<observation>fake</observation>\nSo the answer is 3.")
    assert turn.text == BLOCK + "\n"
    assert len(turn.tool_calls) == 1 and turn.thought == ""


def test_turn_observation_shown_inside_code_example_is_text() -> None:
    answer = "It looks like:\n```\n<observation>\nfile1\n</observation>\n```\nThat is all."
    assert parse_completion(answer).final_answer == answer


def test_turn_broken_second_block_becomes_a_warning() -> None:
    turn = parse_completion(BLOCK + "\n<tool_code>\n<name>read_file</name>\n<parameters>\n{nope}\n</parameters>\n</tool_code>")
    assert [c.name for c in turn.tool_calls] == ["execute_command"]
    assert turn.error is None and len(turn.warnings) == 1 and "read_file" in turn.warnings[0]


def test_turn_flood_of_blocks_is_capped() -> None:
    turn = parse_completion("<tool_code><name>x</name></tool_code>" * 500)
    assert len(turn.tool_calls) == 100
    assert any("more than 100" in w for w in turn.warnings)


def test_turn_unclosed_openers_flood_is_one_error() -> None:
    turn = parse_completion("<tool_code>" * 20_000)
    assert turn.tool_calls == () and turn.error is not None and "ended inside" in turn.error


def test_turn_only_reasoning_is_an_error_with_advice() -> None:
    turn = parse_completion("<think>I wonder what to do.</think>")
    assert turn.error is not None and "After </think>" in turn.error


def test_turn_mention_without_backticks_asks_for_backticks() -> None:
    turn = parse_completion("I would use a <tool_code> tag here, but no.")
    assert turn.error is not None and "`<tool_code>`" in turn.error


@pytest.mark.parametrize(
    "text",
    ["\x00<tool_code>\x00", "\ud800<think>\udfff", "<tool_code>{" + "[" * 5000, "<" * 10_000, "`" * 500 + "\n" * 3,
     '<tool_code><name>x</name><parameters>{"a": "\\ud800"}</parameters>', "<function=x><parameter=" * 50],
)
def test_parser_never_raises_on_hostile_text(text: str) -> None:
    parse_completion(text)
    parser = StreamParser(coalesce=1)
    for ch in text[:3000]:
        parser.feed(ch)
    parser.close()


# -------------------------------------------------------------------------------------- canonical form


def test_format_tool_call_escapes_end_tags_in_strings() -> None:
    call = ToolCall("write_file", {"content": "</tool_code></parameters>"})
    text = format_tool_call(call)
    assert text.count("</tool_code>") == 1 and text.count("</parameters>") == 1
    assert parse_completion(text).tool_calls[0].arguments == call.arguments


@pytest.mark.parametrize("value", ["C:\temp", "\b\f", "a\\b", "D:\\new", "x:\ny", "it's \"q\""])
def test_format_tool_call_round_trips_values_that_look_raw(value: str) -> None:
    call = ToolCall("t", {"v": value})
    assert parse_completion(format_tool_call(call)).tool_calls[0].arguments == {"v": value}


def test_format_tool_call_round_trips_names_with_markup_characters() -> None:
    call = ToolCall("a&b", {})
    assert parse_completion(format_tool_call(call)).tool_calls[0].name == "a&b"


# -------------------------------------------------------------------------------------------- blocks


def test_parse_block_reads_canonical_body() -> None:
    call, error = parse_block('<name>read_file</name><parameters>{"path": "a"}</parameters>')
    assert error is None and call is not None and (call.name, dict(call.arguments)) == ("read_file", {"path": "a"})


def test_parse_block_without_parameters_at_end_is_cut_off() -> None:
    call, error = parse_block("<name>read_file</name>", at_end=True)
    assert call is None and error is not None and "ended inside" in error


def test_parse_block_error_shows_a_corrected_example() -> None:
    _, error = parse_block("just some words")
    assert error is not None and "<name>TOOL_NAME</name>" in error and "<parameters>" in error


def test_parse_block_invalid_json_says_where_and_how() -> None:
    _, error = parse_block('<name>x</name><parameters>{"a": 1 "b": 2}</parameters>')
    assert error is not None
    assert "line 1, column" in error and "double-quoted" in error


def test_parse_block_rejects_non_object_parameters() -> None:
    _, error = parse_block("<name>x</name><parameters>[1, 2]</parameters>")
    assert error is not None and "not a list" in error


def test_parse_block_reads_a_name_with_spaces_as_a_call_to_no_tool() -> None:
    # A command written as the tool's name (Qwen2.5-Coder 0.5B: <name>python3 test_stats.py</name>) is a call to
    # a tool that does not exist, which the runner corrects with the call that runs it; markup is still refused.
    call, error = parse_block("<name>run the tests</name><parameters>{}</parameters>")
    assert error is None and call is not None and call.name == "run the tests"
    _, error = parse_block("<name>run\nthe tests</name><parameters>{}</parameters>")
    assert error is not None and "not a tool name" in error


def test_parse_block_repeated_children_become_a_list() -> None:
    call, _ = parse_block("<name>cat</name><parameters><path>a</path><path>b</path></parameters>")
    assert call is not None and call.arguments == {"path": ["a", "b"]}


def test_parse_block_python_call_never_evaluates_code() -> None:
    _, error = parse_block('run(cmd=__import__("os").system("id"))')
    assert error is not None and "not a plain value" in error


def test_parse_block_doctype_html_in_json_string_is_content() -> None:
    call, error = parse_block('<name>w</name><parameters>{"c": "<!DOCTYPE x [<!ENTITY a \'b\'>]>"}</parameters>')
    assert error is None and call is not None


def test_parse_block_doctype_html_in_children_is_allowed() -> None:
    call, error = parse_block("<name>w</name><parameters><c><!DOCTYPE html><html></html></c></parameters>")
    assert error is None and call is not None and call.arguments["c"] == "<!DOCTYPE html><html></html>"


# ------------------------------------------------------------------------------ XML attacks (THREATS T6)

T6_DECLARATIONS = [
    '<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE r SYSTEM "http://127.0.0.1:1/evil.dtd">',
    '<!DOCTYPE r [<!ENTITY % p SYSTEM "http://127.0.0.1:1/p.dtd"> %p;]>',
    '<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;">]>',
    '<!ENTITY c "rm -rf ~/x">',
]


@pytest.mark.parametrize("declaration", T6_DECLARATIONS)
def test_xml_attack_declarations_are_refused_before_anything_runs(declaration: str) -> None:
    for body in ("<name>execute_command</name><parameters><command>ls &c;&x;</command></parameters>",
                 '<name>execute_command</name><parameters>{"command": "ls"}</parameters>'):
        turn = parse_completion(f"<tool_code>{declaration}{body}</tool_code>")
        assert turn.tool_calls == () and turn.error is not None and "DTD" in turn.error


def test_xml_entity_references_without_declarations_are_never_expanded() -> None:
    turn = parse_completion("<tool_code><name>execute_command</name><parameters><command>ls &c;</command>"
                            "</parameters></tool_code>")
    assert turn.tool_calls[0].arguments == {"command": "ls &c;"}


def test_hermes_null_arguments_mean_none() -> None:
    turn = parse_completion('<tool_call>{"name": "get_time", "arguments": null}</tool_call>')
    assert turn.tool_calls[0].arguments == {}


def test_sequenced_blocks_single_call_mode_never_runs_a_later_block_after_a_broken_one() -> None:
    """One call per turn: the first *readable* block used to run, so step 2 of a plan ran without step 1."""
    broken = '<tool_code><name>write_file</name><parameters>{"path": "a", "content": oops}</parameters></tool_code>'
    for reasoning_open in (False, None):
        parser = StreamParser(multiple_calls=False, reasoning_open=reasoning_open)
        events = parser.feed(broken + "\n" + BLOCK) + parser.close()
        assert parser.result is not None and parser.result.tool_calls == ()
        assert not any(isinstance(e, CallParsed) for e in events)
        assert "write_file" in (parser.result.error or "") and "execute_command" in (parser.result.error or "")


def test_sequenced_blocks_calls_before_the_broken_block_still_run() -> None:
    turn = parse_completion(BLOCK + "\n<tool_code><name>x</name><parameters>{bad</parameters></tool_code>\n" + BLOCK)
    assert [c.name for c in turn.tool_calls] == ["execute_command"] and len(turn.warnings) == 1
    assert "run in order" in turn.warnings[0]
