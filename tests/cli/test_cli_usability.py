"""What a new user met in the first hour (issue 13): foreign bytes, a doubled answer, ignored paths, late template
checks, cut-off answers, marker text in sessions, and the small ones."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import call, finish, invoke, spawn, transcripts, write_script

from mylm.core.errors import RunTimeoutError
from mylm.sessions import load
from mylm.testing import ScriptedLLM, ScriptedReply
from mylm.core.types import Usage


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(args: list[bytes | str], env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "mylm", *args], env=env, capture_output=True, **kwargs)  # type: ignore[call-overload, no-any-return]


# ----------------------------------------------------------------------------- 1: bytes that are not UTF-8


@pytest.mark.parametrize("data", [b"caf\xe9 au lait\n", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\xff\xcb\x48\xcd"])
def test_foreign_stdin_is_replaced_and_said_once(subprocess_env: dict[str, str], tmp_path: Path, data: bytes) -> None:
    env = dict(subprocess_env, MYLM_SCRIPTED_LLM=str(write_script(tmp_path / "s.json", ["A summary."])))
    done = _run(["ask", "summarise"], env, input=data)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout == b"A summary.\n"
    assert "Traceback" not in err
    assert err.count("not valid UTF-8") == 1


def test_foreign_bytes_with_the_endpoint_down_end_in_one_line(subprocess_env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    env = {k.encode(): v.encode() for k, v in subprocess_env.items()}
    env[b"MYLM_MODEL"] = b"m\xe9del"
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"mylm", b"ask", b"--base-url", url.encode(), b"caf\xe9"],
        env=env, input=b"caf\xe9\n", capture_output=True,
    )
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1, lines
    assert "Traceback" not in done.stderr.decode()
    assert sum("not valid UTF-8" in line for line in lines) == 1
    assert lines[-1].startswith("mylm: error: cannot reach")


def test_tool_output_that_is_not_utf8_reaches_the_model_replaced() -> None:
    from mylm import Agent, tool

    @tool
    def names() -> str:
        """File names, one of them not UTF-8 (as os.listdir returns it)."""
        return b"caf\xe9.txt".decode("utf-8", "surrogateescape")

    llm = ScriptedLLM([call("names"), "ok"])
    Agent(llm, [names]).run("list")
    sent = llm.requests[1].messages[-1].content
    assert "caf\ufffd.txt" in sent
    sent.encode("utf-8")  # what a request encoder does: no lone surrogate left


# -------------------------------------------------------------------------- 2: one answer in a shared log


def test_answer_is_printed_once_when_stdout_and_stderr_are_one_file(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [call("list_dir", thought="Looking around first."), "The answer is 42."])
    log = tmp_path / "log"
    with open(log, "wb") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "mylm", "ask", "q"], env=dict(subprocess_env, MYLM_SCRIPTED_LLM=str(script)),
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert text.count("The answer is 42.") == 1
    assert text.count("Looking around first.") == 1


# ------------------------------------------------------------------------- 3: explicit paths that are not


def test_missing_prompts_directory_is_an_error() -> None:
    result = invoke(["ask", "--prompts", "/no/such/dir", "x"], ScriptedLLM(["y"]))
    assert result.exit_code == 2
    assert "/no/such/dir is not a directory" in result.stderr


def test_missing_config_file_named_by_mylm_config_is_an_error() -> None:
    result = invoke(["ask", "x"], ScriptedLLM(["y"]), env={"MYLM_CONFIG": "/no/such/file.toml"})
    assert result.exit_code == 2
    assert "MYLM_CONFIG names /no/such/file.toml" in result.stderr


# ------------------------------------------------------------------------------- 4: templates checked early


def test_broken_observation_template_is_reported_before_any_request(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "observation.j2").write_text("<observation>\n{{ output }}\n{{ no_such_variable }}\n</observation>\n")
    llm = ScriptedLLM([call("execute_command", command="touch ran"), "done"])
    result = invoke(["ask", "--yes", "--prompts", str(prompts), "x"], llm)
    assert result.exit_code == 2
    assert f"{prompts / 'observation.j2'}:3: 'no_such_variable' is undefined" in result.stderr
    assert llm.requests == [] and not Path("ran").exists()


def test_config_value_of_the_wrong_type_names_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('model = "m"\n\nmax_iterations = "lots"\n')
    result = invoke(["ask", "x"], ScriptedLLM(["y"]), env={"MYLM_CONFIG": str(config)})
    assert result.exit_code == 2
    assert f"from config {config}, line 3: 'lots' is not a whole number" in result.stderr


def test_bad_approval_value_names_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('model = "m"\n\n[tools.approval]\napprove_edits = true\nallow_commands = "ls"\n')
    result = invoke(["ask", "x"], ScriptedLLM(["y"]), env={"MYLM_CONFIG": str(config)})
    assert result.exit_code == 2
    assert f"config file {config}, line 5: [tools.approval] allow_commands" in result.stderr


def test_prompts_edit_checks_the_copy_and_reset_restores_the_default(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    editor = tmp_path / "editor"
    editor.write_text("#!/bin/sh\nprintf '<observation>\\n{{ nope }}\\n</observation>\\n' > \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    # In a terminal, as an editor needs one.
    output, status = finish(spawn(["prompts", "edit", "observation"], dict(subprocess_env, EDITOR=str(editor))))
    assert status == 2
    assert "observation.j2:2: 'nope' is undefined" in output
    assert "mylm prompts reset observation.j2" in output
    copy = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "prompts" / "observation.j2"
    assert copy.is_file()
    reset = invoke(["prompts", "reset", "observation"])
    assert reset.exit_code == 0 and not copy.exists()
    assert invoke(["prompts", "show", "observation"]).stderr.startswith("# observation.j2: default")


# ------------------------------------------------------------------------------------ 5: cut-off answers


def test_prompts_edit_without_a_terminal_starts_no_editor(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    # Issue 20: vim started into a pipe. The copy is still made, and the line says where it is.
    marker = tmp_path / "editor-ran"
    editor = tmp_path / "editor"
    editor.write_text(f"#!/bin/sh\ntouch {marker}\n")
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    done = _run(["prompts", "edit", "system"], dict(subprocess_env, EDITOR=str(editor)), stdin=subprocess.DEVNULL)
    copy = Path(os.environ["XDG_CONFIG_HOME"]) / "mylm" / "prompts" / "system.j2"
    assert done.returncode == 1 and not marker.exists() and copy.is_file()
    assert done.stderr.decode().splitlines()[-1] == (
        f"mylm: error: no terminal to run the editor in; edit {copy} yourself (--no-editor only prints the path)"
    )


def test_cut_off_answer_is_said_on_stderr_and_in_json() -> None:
    reply = ScriptedReply("The first half of", finish_reason="length")
    result = invoke(["ask", "x"], ScriptedLLM([reply]))
    assert result.exit_code == 0
    assert result.stdout == "The first half of\n"
    assert "cut off at the output limit of 4096 tokens" in result.stderr and "max_tokens" in result.stderr
    as_json = invoke(["ask", "--json", "x"], ScriptedLLM([reply]))
    assert json.loads(as_json.stdout.splitlines()[-1])["stop_reason"] == "max_tokens"


# ------------------------------------------------------------------------- 7: how a turn ended is metadata


def test_a_timed_out_turn_leaves_no_marker_text_for_the_next_run() -> None:
    assert invoke(["ask", "first"], ScriptedLLM([RunTimeoutError("deadline passed")])).exit_code == 4
    (path,) = transcripts()
    assert all("[timeout]" not in m.content for m in load(path).history)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[-1]["type"] == "run_end" and records[-1]["stop_reason"] == "timeout"
    llm = ScriptedLLM(["ok"])
    assert invoke(["ask", "--continue", "second"], llm).exit_code == 0
    sent = llm.requests[0].messages
    assert all("[timeout]" not in m.content for m in sent)
    assert [m.role for m in sent] == ["system", "user"] and sent[-1].content == "first\n\nsecond"


# ------------------------------------------------------------------------------------- 8: the small ones


def test_verbose_log_lines_start_on_their_own_line() -> None:
    llm = ScriptedLLM([call("list_dir", thought="Let me look at the files in this directory."), "Done."])
    result = invoke(["ask", "-v", "x"], llm)
    assert result.exit_code == 0
    lines = result.stderr.splitlines()
    assert any(line.startswith("[INFO]") for line in lines)
    assert [line for line in lines if "[INFO]" in line and not line.startswith("[INFO]")] == []


def test_ctrl_c_at_the_approval_question_ends_the_line() -> None:
    from mylm.cli import Terminal

    class Interrupted(io.StringIO):
        def readline(self, size: int | None = -1) -> str:
            raise KeyboardInterrupt

    stream = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        Terminal(stream).ask("Allow? [y]es / [n]o: ")
    assert stream.getvalue() == "Allow? [y]es / [n]o: \n"


def test_json_usage_is_null_when_the_server_sent_none() -> None:
    unreported = invoke(["ask", "--json", "x"], ScriptedLLM(["y"]))
    assert json.loads(unreported.stdout.splitlines()[-1])["usage"] is None
    reported = invoke(["ask", "--json", "x"], ScriptedLLM([ScriptedReply("y", usage=Usage(12, 3))]))
    assert json.loads(reported.stdout.splitlines()[-1])["usage"] == {"prompt_tokens": 12, "completion_tokens": 3}


def test_session_with_piped_stdin_is_titled_with_the_prompt() -> None:
    result = invoke(["ask", "summarise", "this"], ScriptedLLM(["ok"]), stdin="a long log line\n" * 50)
    assert result.exit_code == 0
    (path,) = transcripts()
    assert load(path).title == "summarise this"
    assert "summarise this" in invoke(["sessions", "list"]).stdout


def test_docs_list_every_builtin_tool() -> None:
    from mylm.cli.runner import model_tools
    from mylm.tools import builtin_tools
    from tests.support import REPO_ROOT

    names = [t.name for t in model_tools(builtin_tools(workspace=Path.cwd()))]
    tools_page = (REPO_ROOT / "docs" / "tools.md").read_text()
    words = {7: "seven", 8: "eight", 9: "nine"}
    assert f"mylm gives the model {words[len(names)]} builtin tools" in tools_page
    for name in names:
        assert f"| `{name}` |" in tools_page
    pages = [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")]
    assert not any("compressed bodies are refused" in page.read_text() for page in pages)


# ------------------------------------------------------------------------------------ 12: --tool-choice


def test_tool_choice_flag() -> None:
    llm = ScriptedLLM(["Plain answer."])
    assert invoke(["ask", "--tool-choice", "none", "x"], llm).exit_code == 0
    assert "<tool_definitions>" not in llm.requests[0].messages[0].content
    bad = invoke(["ask", "--tool-choice", "nope", "x"], ScriptedLLM(["y"]))
    assert bad.exit_code == 2 and "--tool-choice" in bad.stderr and "execute_command" in bad.stderr


# ------------------------------------------------------------------------- issue 20: the smaller points


@pytest.mark.parametrize("table, key", [
    ('[tools.approval]\nallow_commands = "ls"\n', "[tools.approval] allow_commands"),
    ("[tools.approval]\nno_such_key = true\n", "[tools.approval] has unknown key(s) no_such_key"),
    ('[tools]\ncommand_timeout = "long"\n', "[tools] command_timeout"),
])
def test_config_rejects_the_tool_tables_ask_rejects(tmp_path: Path, table: str, key: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text('model = "m"\n\n' + table)
    for args in (["config"], ["config", "--json"], ["ask", "x"]):
        result = invoke(args, ScriptedLLM(["y"]), env={"MYLM_CONFIG": str(config)})
        assert result.exit_code == 2, (args, result.stdout)
        assert result.stderr.startswith(f"mylm: error: config file {config}, line 4: {key}"), result.stderr


def test_ask_max_tokens_flag_reaches_the_request() -> None:
    llm = ScriptedLLM(["ok"])
    assert invoke(["ask", "--max-tokens", "77", "x"], llm).exit_code == 0
    assert llm.requests[0].max_tokens == 77
    bad = invoke(["ask", "--max-tokens", "0", "x"], ScriptedLLM(["ok"]))
    assert bad.exit_code == 2 and bad.stderr.startswith("mylm: error: max-tokens from flag: 0")


def test_prompts_list_labels_the_directory_by_where_it_was_set(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "system.j2").write_text((Path(__file__).parents[2] / "prompts" / "system.j2").read_text())
    by_env = invoke(["prompts", "list"], env={"MYLM_PROMPTS": str(mine)}).stdout
    assert [line.split()[1] for line in by_env.splitlines() if line.startswith("system.j2")] == ["$MYLM_PROMPTS"]
    by_flag = invoke(["prompts", "list", "--prompts", str(mine)]).stdout
    assert [line.split()[1] for line in by_flag.splitlines() if line.startswith("system.j2")] == ["--prompts"]
    paths = invoke(["prompts", "path"], env={"MYLM_PROMPTS": str(mine)}).stdout.splitlines()
    assert paths[0].split() == ["$MYLM_PROMPTS", str(mine)] and sum(str(mine) in line for line in paths) == 1


def test_a_missing_extra_is_named_with_the_install_command_that_works_for_this_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 30: messages and docs said `pip install 'mylm[serve]'`, but mylm is not on the package index: a copy
    # installed from a checkout is told to install from that checkout.
    import importlib.metadata

    import mylm._version
    from mylm._version import install_command

    checkout = Path(__file__).resolve().parents[2]
    assert install_command("serve") == f"pip install -e '{checkout}[serve]'"  # the tests run from a checkout

    class Installed:
        def __init__(self, record: str | None) -> None:
            self.record = record

        def read_text(self, name: str) -> str | None:
            return self.record if name == "direct_url.json" else None

    def installed(record: str | None) -> None:
        monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed(record))

    installed('{"url": "file:///home/me/src/my%20lm", "dir_info": {}}')
    assert install_command("otel") == "pip install '/home/me/src/my lm[otel]'"
    # From a package index (no record of a directory, no checkout around the package): the index form.
    installed(None)
    monkeypatch.setattr(mylm._version, "__file__", str(tmp_path / "site-packages" / "mylm" / "_version.py"))
    assert install_command("serve") == "pip install 'mylm[serve]'"
