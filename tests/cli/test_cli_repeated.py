"""`mylm ask` when the model repeats the same call to the same result: its own line, exit code and JSON reason."""

from __future__ import annotations

import json

from cli_support import call, invoke

from mylm.testing import ScriptedLLM


def test_cli_ask_repeated_call_stops_with_its_own_line_and_exit_code() -> None:
    same = call("execute_command", command="echo same")
    llm = ScriptedLLM([same] * 3 + ["It prints same.", "never asked"])
    result = invoke(["ask", "--yes", "--max-iterations", "10", "x"], llm)
    assert result.exit_code == 5, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mylm: stopped: the model called execute_command 3 times in a row"), last
    # The answer it gave when asked for one without tools is the run's answer, on stdout.
    assert result.stdout.strip().endswith("It prints same.")
    assert "Traceback" not in result.stderr and llm.remaining == 1


def test_cli_ask_json_reports_the_repeated_call() -> None:
    same = call("execute_command", command="echo same")
    result = invoke(["ask", "--yes", "--json", "x"], ScriptedLLM([same] * 3 + ["It prints same."]))
    assert result.exit_code == 5, result.stderr
    end = json.loads(result.stdout.strip().splitlines()[-1])
    assert end["type"] == "run_end" and end["stop_reason"] == "repeated_call"
    assert "execute_command 3 times" in end["error"] and end["final_text"] == "It prints same."


def test_cli_chat_repeated_call_ends_the_turn_with_a_line_and_keeps_the_chat_going() -> None:
    same = call("execute_command", command="echo same")
    llm = ScriptedLLM([same] * 3 + ["It prints same.", "Back."])
    result = invoke(["chat", "--yes"], llm, stdin="loop\nagain\n")
    assert result.exit_code == 0, result.stderr
    assert "mylm: stopped: the model called execute_command 3 times in a row" in result.stderr
    assert "mylm: error:" not in result.stderr and result.stdout.endswith("Back.\n")
