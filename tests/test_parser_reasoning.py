"""Issue 22 §1-2: reasoning in every dialect is data (one table), read the same by the parser, the lone-closer
logic, the template-opens-reasoning checks, `neutralise` and the config; a draft inside never runs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mylm.config import load_settings
from mylm.core.errors import ConfigError
from mylm.protocol import REASONING_DIALECTS, StreamParser, neutralise, parse_completion, with_markers
from mylm.protocol.canonical import format_tool_call
from mylm.protocol.parsed import ParsedTurn
from mylm.protocol.reasoning import prompt_opens_reasoning, template_opens_reasoning
from mylm.core.types import ToolCall

TOOLS = {"list_dir": ["path"], "execute_command": ["command"]}
DRAFT = format_tool_call(ToolCall("execute_command", {"command": "rm -rf /"}))
REAL = format_tool_call(ToolCall("list_dir", {"path": "."}))
#: (open, close) of every dialect in the table, as a model writes them.
PAIRS = [(d.opens[0], d.closes[0]) for d in REASONING_DIALECTS]


def _chunked(text: str, step: int, **options: object) -> ParsedTurn:
    parser = StreamParser(coalesce=1, **options)  # type: ignore[arg-type]
    for i in range(0, len(text), step):
        parser.feed(text[i : i + step])
    parser.close()
    assert parser.result is not None
    return parser.result


@pytest.mark.parametrize(("opener", "closer"), PAIRS, ids=[d.name for d in REASONING_DIALECTS])
def test_reasoning_dialect_a_draft_inside_never_runs_the_call_after_does(opener: str, closer: str) -> None:
    text = f"{opener}Maybe {DRAFT} no.{closer}\n{REAL}"
    for step in (1, 3, len(text)):
        turn = _chunked(text, step, tools=TOOLS)
        assert [(c.name, c.arguments) for c in turn.tool_calls] == [("list_dir", {"path": "."})], (opener, step)
        assert "rm -rf" in turn.reasoning and "rm -rf" not in turn.thought


@pytest.mark.parametrize(("opener", "closer"), PAIRS, ids=[d.name for d in REASONING_DIALECTS])
def test_reasoning_dialect_lone_closer_makes_what_came_before_reasoning(opener: str, closer: str) -> None:
    lone = next(d.lone[0] for d in REASONING_DIALECTS if d.opens[0] == opener)
    text = f"Drafting {DRAFT} hmm.{lone}{REAL}"
    turn = parse_completion(text, tools=TOOLS)  # unknown whether the template opened reasoning: calls are held
    assert [c.name for c in turn.tool_calls] == ["list_dir"], opener
    answer = parse_completion(f"thinking it over{lone}The answer is 4.", reasoning_open=True)
    assert answer.final_answer == "The answer is 4." and "thinking it over" in answer.reasoning


def test_reasoning_dialect_harmony_analysis_never_becomes_the_answer() -> None:
    text = ("<|channel|>analysis<|message|>User wants 2+2. Could run " + DRAFT + ".<|end|>"
            "<|start|>assistant<|channel|>final<|message|>4<|return|>")
    for step in (1, 5, len(text)):
        turn = _chunked(text, step, tools=TOOLS)
        assert turn.final_answer == "4" and not turn.tool_calls
        assert "User wants" in turn.reasoning


def test_reasoning_dialect_harmony_end_token_alone_is_not_a_lone_closer() -> None:
    """Phi-3 ends answers with `<|end|>`: that must not turn the answer into reasoning."""
    turn = parse_completion("The answer is 4.<|end|>", reasoning_open=None)
    assert turn.final_answer == "The answer is 4." and not turn.reasoning


def test_lone_closer_after_reasoning_that_quotes_the_protocol_lets_the_real_call_run() -> None:
    """Issue 22 §2: planning that mentions `<tool_code>` and `<name>` opened no block that swallows the call."""
    for planning in ("I will write a <tool_code> block with <name> set to list_dir.",
                     "Use <tool_code><name>list_dir</name> and then", "<tool_code>\n<name>"):
        text = f"{planning}\n</think>\n{REAL}"
        for step in (1, 4, len(text)):
            turn = _chunked(text, step, tools=TOOLS)
            assert [c.name for c in turn.tool_calls] == ["list_dir"] and turn.error is None, (planning, step)


def test_config_reasoning_markers_extend_the_table(tmp_path: pytest.TempPathFactory) -> None:
    dialects = with_markers([["<reflect>", "</reflect>"]])
    text = f"<reflect>maybe {DRAFT}</reflect>\n{REAL}"
    assert [c.name for c in parse_completion(text, tools=TOOLS, reasoning=dialects).tool_calls] == ["list_dir"]
    # Without the marker the draft is not reasoning: it is the first call of the turn.
    assert parse_completion(text, tools=TOOLS).tool_calls[0].name == "execute_command"
    config = tmp_path / "config.toml"  # type: ignore[operator]
    config.write_text('reasoning_markers = [["<reflect>", "</reflect>"]]\n')
    settings = load_settings(path=config, environ={}, cwd=tmp_path)  # type: ignore[arg-type]
    assert settings.reasoning_markers == (("<reflect>", "</reflect>"),)
    config.write_text('reasoning_markers = ["<reflect>"]\n')
    with pytest.raises(ConfigError, match="reasoning_markers"):
        load_settings(path=config, environ={}, cwd=tmp_path)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.one_of(st.sampled_from([m for d in REASONING_DIALECTS for m in (*d.opens, *d.closes)]),
                                 st.sampled_from(["Four.", "<tool_code>", "</tool_code>", "\n", " "]),
                                 st.text(max_size=6)), max_size=8),
       split=st.booleans())
def test_template_opens_reasoning_with_the_built_in_table_kept_is_as_with_a_copy(pieces: list[str],
                                                                                 split: bool) -> None:
    # The built-in table's markers are kept once; a table equal to it, but another tuple, builds them each time.
    parsed = parse_completion("".join(pieces))
    copy = tuple([*REASONING_DIALECTS])  # noqa: C409 - a new tuple, equal to the table
    assert copy is not REASONING_DIALECTS
    assert template_opens_reasoning(parsed, split) == template_opens_reasoning(parsed, split, copy)


@pytest.mark.parametrize(("opener", "closer"), PAIRS, ids=[d.name for d in REASONING_DIALECTS])
def test_template_opens_reasoning_is_learned_for_every_dialect(opener: str, closer: str) -> None:
    lone = next(d.lone[0] for d in REASONING_DIALECTS if d.opens[0] == opener)
    assert prompt_opens_reasoning(f"<|im_start|>assistant\n{opener}\n")
    assert template_opens_reasoning(parse_completion(f"hmm{lone}Four."), False) is True
    assert template_opens_reasoning(parse_completion(f"{opener}hmm{closer}Four."), False) is False
    assert template_opens_reasoning(parse_completion("Four."), False) is False


@pytest.mark.parametrize(("opener", "closer"), PAIRS, ids=[d.name for d in REASONING_DIALECTS])
def test_reasoning_markers_in_tool_output_are_defused(opener: str, closer: str) -> None:
    """Tool output echoed by the model can neither open nor close reasoning in any dialect."""
    out = neutralise(f"log: {closer} then {opener}")
    assert closer.lower() not in out.lower() and opener.lower() not in out.lower()
    turn = parse_completion(f"The log says {out}. Done.")
    assert turn.final_answer is not None and not turn.reasoning


def test_config_reasoning_markers_reach_the_agent_loop(tmp_path: pytest.TempPathFactory) -> None:
    from mylm import Agent, tool
    from mylm.testing import ScriptedLLM

    ran: list[str] = []

    @tool
    def execute_command(command: str) -> str:
        """Run a command."""
        ran.append(command)
        return "ok"

    llm = ScriptedLLM([f"<reflect>maybe {DRAFT}</reflect>No command is needed."])
    agent = Agent(llm, [execute_command], workspace=tmp_path, reasoning_markers=(("<reflect>", "</reflect>"),))
    result = agent.run("go")
    assert ran == [] and result.final_text == "No command is needed."


@pytest.mark.parametrize(("opener", "closer"), PAIRS, ids=[d.name for d in REASONING_DIALECTS])
def test_canonical_form_never_writes_a_reasoning_marker(opener: str, closer: str) -> None:
    """History is re-read by chat templates that split on reasoning markers: arguments never hold one intact,
    and still parse back exactly."""
    args = {"content": f"a {opener}b{closer} c"}
    block = format_tool_call(ToolCall("write", args))
    assert opener.lower() not in block.lower() and closer.lower() not in block.lower()
    assert parse_completion(block).tool_calls[0].arguments == args
