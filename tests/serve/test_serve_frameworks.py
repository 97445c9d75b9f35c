"""The agent frameworks of docs/serve.md run their own tool loops through `mylm serve`, with the drivers
scripts/drive_clients.py runs against a real model (scripts/clients/): LangChain `create_agent`, the OpenAI Agents
SDK with each model class, pydantic-ai's `run_stream`, LlamaIndex's `FunctionAgent`, smolagents'
`ToolCallingAgent`, AutoGen's `AssistantAgent`, Strands Agents, Agno's `Agent`, the Vercel AI SDK, and the CLIs of
Continue and Cline.

Real: each framework and its defaults, the file tools really reading a temporary workspace, `mylm serve` and its
prompt, parser and wire code. Scripted: only the model, a loopback OpenAI server streaming in small delayed
chunks that answers by what it is sent, as a model that knows nothing but mylm's text protocol. A framework that is
not installed skips, except in CI (`MYLM_REQUIRE_CLIENTS=1`, and `MYLM_REQUIRE_NPM=1` where npm installed the
Node packages), where .ci/run installs them all.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts.clients.frameworks import DRIVERS
from scripts.drive_clients import command
from tests.providers.servers import Completion, OpenAIServer, RecordedRequest, Reply
from tests.serve.support import call, serving

pytestmark = pytest.mark.slow

#: The module each driver needs.
NEEDS = {"langchain": "langchain.agents", "agents-chat": "agents", "agents-responses": "agents",
         "pydantic-ai": "pydantic_ai", "llamaindex": "llama_index.llms.openai_like", "smolagents": "smolagents",
         "autogen": "autogen_ext.models.openai", "strands": "strands.models.openai", "agno": "agno.models.openai.like",
         "crewai": "crewai", "google-adk": "google.adk.models.lite_llm"}
#: Drivers run by another interpreter where their framework cannot share one with the others: LlamaIndex's OpenAI
#: integration requires openai<3, the Agents SDK openai>=3, and so does Strands' (.ci/run gives LlamaIndex a venv of
#: its own, and Strands, AutoGen and Agno another).
INTERPRETERS = {"llamaindex": "MYLM_TEST_LLAMAINDEX_PYTHON", "autogen": "MYLM_TEST_AGENTS_PYTHON",
                "strands": "MYLM_TEST_AGENTS_PYTHON", "agno": "MYLM_TEST_AGENTS_PYTHON",
                "crewai": "MYLM_TEST_LITELLM_PYTHON", "google-adk": "MYLM_TEST_LITELLM_PYTHON"}
#: Drivers .ci/run does not install (CrewAI and Google's ADK come with hundreds of packages, about ten minutes on
#: two cores): they run where MYLM_TEST_LITELLM_PYTHON names an interpreter that has them, and skip elsewhere.
BY_HAND = {"crewai", "google-adk"}
ROOT = Path(__file__).resolve().parents[2]
# Read at import: the tests' isolation clears MYLM_ variables before each test runs.
PYTHONS = {name: os.environ.get(variable, "") for name, variable in INTERPRETERS.items()}
NPM = Path(os.environ.get("MYLM_TEST_NPM") or "/nonexistent")
REQUIRED = os.environ.get("MYLM_REQUIRE_CLIENTS") == "1"
REQUIRED_NPM = os.environ.get("MYLM_REQUIRE_NPM") == "1"
TASK = "What is the release code name written in notes.txt?"
#: A task of two calls, the second writing what the first read (scripts/drive_clients.py's `write`).
WRITE = "Write the release code name from notes.txt into a new file named release.txt, and nothing else."


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def answer(body: dict[str, Any]) -> str:
    """What a model that knows only mylm's protocol says: read notes.txt, then quote the code name it saw (or, asked
    to write it, write it to release.txt and say so)."""
    messages = body.get("messages") or []
    last = _text(messages[-1].get("content")) if messages else ""
    writing = "release.txt" in json.dumps(messages)
    # A client that takes its answer as a call of its own tool (smolagents' `final_answer`, with `tool_choice:
    # "required"`) gets it so, as a model shown that tool and made to call one would give it.
    by_call = "<name>final_answer</name>" in _text(messages[0].get("content")) if messages else False

    def final(text: str) -> str:
        return call("final_answer", json.dumps({"answer": text}), "Done.") if by_call else text

    if writing and "<observation>" in last and "wrote" in last:
        return final("The code name is in release.txt now.")
    seen = re.search(r"code name is (\S+?)\.", last) if "<observation>" in last else None
    if seen and writing:
        return call("write_file", json.dumps({"path": "release.txt", "content": seen.group(1)}), "Writing it now.")
    if seen:
        return final(f"The code name is {seen.group(1)}.")
    return call("read_file", '{"path": "notes.txt"}', "I will read the notes first.")


class ReadingModel(OpenAIServer):
    """The tests' OpenAI server, each reply chosen by the request's content instead of taken from a script."""

    def _record(self, request: RecordedRequest) -> Reply | None:
        with self._lock:  # re-entrant: choosing the reply and recording the request stay one step
            if self.is_generation(request.method, request.path):
                self._script = [Completion(answer(request.body or {}))]
            return super()._record(request)


def _interpreter(name: str) -> str | None:
    """The Python that has this driver's framework, or None."""
    python = PYTHONS.get(name) or sys.executable
    found = subprocess.run([python, "-c", f"import {NEEDS[name]}"], capture_output=True, check=False)
    return python if found.returncode == 0 else None


def _require(what: str, present: bool, required: bool = REQUIRED, hint: str = ".ci/run installs it") -> None:
    if not present:
        if required:
            pytest.fail(f"{what} is not installed, and CI requires the client drivers to run")
        pytest.skip(f"{what} is not installed ({hint})")


def _workspace(root: Path) -> str:
    code_name = f"juniper-{secrets.token_hex(3)}"
    (root / "notes.txt").write_text(f"Release notes, draft.\nThe release code name is {code_name}.\n")
    (root / "greet.py").write_text("def greet(name):\n    return name\n")
    return code_name


def _observed(model: ReadingModel, code_name: str) -> list[str]:
    """The texts of the last user messages the model was sent after its call (the tool's result in mylm's
    protocol)."""
    bodies = [r.body for r in model.requests if isinstance(r.body, dict) and r.body.get("messages")]
    return [_text(b["messages"][-1].get("content")) for b in bodies
            if code_name in _text(b["messages"][-1].get("content"))]


def _drive(name: str, root: Path, task: str) -> tuple[subprocess.CompletedProcess[str], ReadingModel]:
    """The driver `name` run on `task` in `root` through `mylm serve` in front of the scripted model; it must exit 0."""
    python = _interpreter(name)
    _require(f"{NEEDS[name]} (for the {name} driver)", python is not None, REQUIRED and name not in BY_HAND,
             f"set {INTERPRETERS[name]} to a Python that has it" if name in BY_HAND else ".ci/run installs it")
    assert python is not None
    with ReadingModel() as model, serving(model.base_url) as url:
        done = subprocess.run([python, str(ROOT / "scripts" / "clients" / "frameworks.py"), name, url + "/v1",
                               str(root), task], capture_output=True, text=True, timeout=300, check=False,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, model


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_a_framework_reads_the_file_with_its_own_tool_and_answers(name: str, tmp_path: Path) -> None:
    """The driver runs as scripts/drive_clients.py runs it: a process of its own (`frameworks.py NAME URL ROOT
    TASK`), printing its tool calls on stderr and its answer on stdout."""
    code_name = _workspace(tmp_path)
    done, model = _drive(name, tmp_path, TASK)
    assert code_name in done.stdout
    assert [line for line in done.stderr.splitlines() if line.startswith("tool: ")] == ["tool: read_file(notes.txt)"]
    observed = _observed(model, code_name)
    assert observed and "<observation>" in observed[0], observed
    # The framework's own tool definitions reached the model in mylm's protocol.
    sent = json.dumps([r.body for r in model.requests if isinstance(r.body, dict)])
    assert "<name>read_file</name>" in sent and "<name>list_files</name>" in sent


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_a_framework_runs_two_calls_in_turn_and_writes_the_file(name: str, tmp_path: Path) -> None:
    """A task of two calls: the write's arguments carry what the read returned, so the framework must run the first
    call and send its result back before the second."""
    code_name = _workspace(tmp_path)
    done, _ = _drive(name, tmp_path, WRITE)
    assert (tmp_path / "release.txt").read_text() == code_name
    assert [line for line in done.stderr.splitlines() if line.startswith("tool: ")] == [
        "tool: read_file(notes.txt)", "tool: write_file(release.txt)"]
    assert "release.txt" in done.stdout


def test_the_vercel_ai_sdk_reads_the_file_with_its_own_tool_and_answers(tmp_path: Path) -> None:
    """`generateText` with `stopWhen` (scripts/clients/vercel.mjs), from the Node packages .ci/run installs into
    MYLM_TEST_NPM."""
    npm = NPM
    _require("node with the ai, @ai-sdk/openai-compatible and zod packages (MYLM_TEST_NPM)",
             shutil.which("node") is not None and (npm / "node_modules" / "ai").is_dir(), REQUIRED_NPM)
    project = tmp_path / "project"
    project.mkdir()
    code_name = _workspace(project)
    script = npm / f"test_vercel_{secrets.token_hex(4)}.mjs"  # ESM resolves packages from the script's directory
    shutil.copyfile(ROOT / "scripts" / "clients" / "vercel.mjs", script)
    try:
        with ReadingModel() as model, serving(model.base_url) as url:
            done = subprocess.run(["node", str(script), url + "/v1", str(project), TASK], capture_output=True,
                                  text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr
    assert code_name in done.stdout
    assert done.stderr.splitlines() == ["tool: read_file(notes.txt)"]
    assert _observed(model, code_name)


@pytest.mark.parametrize(("task", "calls"), [(TASK, ["tool: read_file(notes.txt)"]),
                                             (WRITE, ["tool: read_file(notes.txt)", "tool: write_file(release.txt)"])])
def test_the_llm_cli_runs_its_functions_and_answers(task: str, calls: list[str], tmp_path: Path) -> None:
    """Simon Willison's `llm` CLI with the model declared in its extra-openai-models.yaml (`supports_tools: true`)
    and the file tools of scripts/clients/llm_tools.py (`llm --functions`), as scripts/drive_clients.py runs it."""
    llm = Path(sys.executable).parent / "llm"
    _require("the llm CLI (pip install llm)", llm.is_file())
    project, user_dir = tmp_path / "project", tmp_path / "llm"
    project.mkdir()
    user_dir.mkdir()
    code_name = _workspace(project)
    with ReadingModel() as model, serving(model.base_url) as url:
        (user_dir / "extra-openai-models.yaml").write_text(
            f'- model_id: mylm\n  model_name: local\n  api_base: "{url}/v1"\n  supports_tools: true\n')
        done = subprocess.run([str(llm), "-m", "mylm", "--functions", str(ROOT / "scripts" / "clients" / "llm_tools.py"),
                               task], cwd=project, capture_output=True, text=True, timeout=120, check=False,
                              stdin=subprocess.DEVNULL, env={**os.environ, "LLM_USER_PATH": str(user_dir)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("tool: ")] == calls
    offered = set(re.findall(r"<name>(\w+)</name>", json.dumps([r.body for r in model.requests])))
    assert {"list_files", "read_file", "write_file"} <= offered and "Path" not in offered
    if task == TASK:
        assert code_name in done.stdout
    else:
        assert (project / "release.txt").read_text() == code_name and "release.txt" in done.stdout
    assert _observed(model, code_name)


def _offered(system: str) -> dict[str, list[str]]:
    """The tools mylm's prompt shows the model, by name, each with its schema's properties (required first)."""
    offered = {}
    for name, parameters in re.findall(r"<tool>\s*<name>([^<]+)</name>.*?<parameters>(.*?)</parameters>", system,
                                       re.DOTALL):
        schema = json.loads(parameters)
        required = list(schema.get("required", []))
        offered[name] = required + [p for p in schema.get("properties", {}) if p not in required]
    return offered


def tool_answer(body: dict[str, Any]) -> str:
    """`answer`'s model for a client whose file tools are named and shaped its own way (Continue's `Read` with
    `filepath`; Cline's `read_files` with a list of absolute paths and its `editor`): it finds the read and write
    tools among those it is shown, by name, and fills their parameters."""
    messages = body.get("messages") or []
    system = _text(messages[0].get("content")) if messages else ""
    offered = _offered(system)
    read = next((n for n in offered if n.lower() in ("read", "read_file", "read_files")), None)
    write = next((n for n in offered if n.lower() in ("write", "write_file", "editor")), None)
    if read is None or write is None:
        return "Yes."  # a question mylm asks apart, with no tools (does the tool fit the question?)
    # Cline's tools take absolute paths; its system prompt says where it works.
    cwd = re.search(r"Working Directory: (\S+)", system)

    def where(name: str) -> str:
        return f"{cwd.group(1)}/{name}" if cwd else name

    last = _text(messages[-1].get("content")) if messages else ""
    writing = "release.txt" in _text(messages[1].get("content")) if len(messages) > 1 else False
    seen = re.search(r"code name is (\S+?)\.", last) if "<observation>" in last else None
    if writing and "<observation>" in last and not seen:
        return "The code name is in release.txt now."
    if seen and writing:
        path, content = ("path", "new_text") if write == "editor" else offered[write][:2]
        return call(write, json.dumps({path: where("release.txt"), content: seen.group(1)}), "Writing it now.")
    if seen:
        return f"The code name is {seen.group(1)}."
    arguments = ({"files": [{"path": where("notes.txt")}]} if read == "read_files"
                 else {offered[read][0]: "notes.txt"})
    return call(read, json.dumps(arguments), "I will read the notes first.")


class ToolReadingModel(OpenAIServer):
    """`ReadingModel` for `tool_answer`."""

    def _record(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            if self.is_generation(request.method, request.path):
                self._script = [Completion(tool_answer(request.body or {}))]
            return super()._record(request)


#: The CLIs whose file tools are their own (`tool_answer`), as scripts/drive_clients.py runs them from the npm
#: packages .ci/run installs into MYLM_TEST_NPM: their binary, and the tools that reach the model by name.
#: Continue's `cn -p` (headless) declares its model in a config.yaml (`provider: openai`, an `apiBase`,
#: `capabilities: [tool_use]`); Cline (`cline TASK`, its tools approved without a terminal, a compiled binary) keeps
#: an OpenAI-compatible provider in its data directory, and offers two dozen tools taking lists of absolute paths
#: (`read_files` with `files: [{path}]`) and an `editor`.
CLIS = {"continue": ("cn", ("Read", "Write")), "cline": ("cline", ("read_files", "editor"))}


@pytest.mark.parametrize("task", [TASK, WRITE])
@pytest.mark.parametrize("client", sorted(CLIS))
def test_a_cli_with_its_own_file_tools_runs_them_and_answers(client: str, task: str, tmp_path: Path) -> None:
    binary, tools = CLIS[client]
    found = NPM / "node_modules" / ".bin" / binary
    _require(f"the {client} CLI (MYLM_TEST_NPM)", shutil.which("node") is not None and found.exists(), REQUIRED_NPM)
    project, home = tmp_path / "project", tmp_path / f"{client}-home"  # the tests' isolation made tmp_path/home
    project.mkdir()
    home.mkdir()
    code_name = _workspace(project)
    with ToolReadingModel() as model, serving(model.base_url) as url:
        how = command(client, task, url + "/v1", project, home, NPM, sys.executable)
        assert not isinstance(how, str), how
        argv, env = how
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=180, check=False,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    if task == TASK:
        assert code_name in done.stdout
    else:
        assert (project / "release.txt").read_text().strip() == code_name and "release.txt" in done.stdout
    assert _observed(model, code_name)
    # The client's own tools reached the model in mylm's protocol, by their own names.
    sent = json.dumps([r.body for r in model.requests if isinstance(r.body, dict)])
    assert all(f"<name>{name}</name>" in sent for name in tools)
