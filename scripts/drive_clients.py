"""Real agent clients doing one small file task through `mylm serve` in front of a real model.

Each client runs with its own tools and defaults in a fresh workspace holding `notes.txt` (with a code name made up
for the run) and three small Python files, and gets one task (`--task`, each made so that only a client whose tools
really ran can pass it):

- `read` (the default): the code name in notes.txt; passes when the answer holds it;
- `find`: which file defines a function named in the question (the files' names do not give it away); passes when
  the answer names that file;
- `write`: write the code name into a new file, release.txt; passes when that file holds it;
- `edit`: change one word of greet.py; passes when the file has the new word, not the old, and the rest kept;
- `count`: how many Python files the project has; passes when the answer is 3 and no other number.

The clients:

- the CLIs, with their own tools: Codex (`codex exec`, Responses), Claude Code (`claude -p`, Messages), OpenCode
  (`opencode run`, Chat Completions), Qwen Code (`qwen PROMPT`, Chat Completions), Continue (`cn -p`, Chat
  Completions), each with its configuration and
  state in a temporary HOME; the `llm` CLI
  (`llm --functions`, Chat Completions) with the file tools of scripts/clients/llm_tools.py;
- the frameworks, with three file tools (list, read, write) written the way their documentation shows
  (scripts/clients/frameworks.py): LangChain `create_agent`, the OpenAI Agents SDK with each model class,
  pydantic-ai (`run_stream`), LlamaIndex `FunctionAgent`, smolagents `ToolCallingAgent`; and the Vercel AI SDK
  (scripts/clients/vercel.mjs).

    python scripts/drive_clients.py --npm DIR --python VENV_PYTHON [--only NAME ...] [--log FILE] \
        [--task read|find|write|edit|count] -- --base-url http://127.0.0.1:8080/v1 -m qwen2.5-coder-1.5b  # serve's upstream

`--npm DIR` is a directory whose node_modules holds @openai/codex, @anthropic-ai/claude-code, opencode-ai,
@qwen-code/qwen-code, @continuedev/cli, ai, @ai-sdk/openai-compatible and zod; `--python` an interpreter with the frameworks installed. A client that is not
installed is reported as such. Prints a line per client and writes every transcript to `--log` (JSON lines).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = {
    "read": "What is the release code name written in notes.txt? Answer with the code name only.",
    "find": "Which file of this project defines the function parse_release? Answer with the file name only.",
    "write": "Write the release code name from notes.txt into a new file named release.txt, and nothing else.",
    # A change to a file that exists: read it, then write it back with one word changed and the rest kept.
    "edit": "In greet.py, change the greeting from Hello to Hi. Keep everything else as it is.",
    # A question about the project as a whole: list it, then count (3 .py files; notes.txt is not one).
    "count": "How many Python files does this project have? Answer with the number only.",
    # A command to run: the number checksum.py prints comes from the notes' bytes, so it cannot be read or guessed.
    "run": "Run checksum.py with python3 and tell me the number it prints. Answer with the number only.",
}
#: The clients whose own tools can run a command (the frameworks' drivers give their agents file tools only).
SHELLS = ("codex", "claude-code", "opencode", "qwen-code", "continue", "cline")
#: The file of `workspace` that defines parse_release (`find`); its name does not say so.
DEFINES = "tasks.py"
CLIENTS = ("codex", "claude-code", "opencode", "qwen-code", "continue", "cline", "llm", "langchain", "agents-chat", "agents-responses", "pydantic-ai",
           "llamaindex", "smolagents", "autogen", "strands", "agno", "crewai",
           "google-adk", "vercel-ai")
#: Seconds one client may take for the whole task.
CLIENT_TIMEOUT = 1500


@dataclass(frozen=True)
class Outcome:
    client: str
    passed: bool
    seconds: float
    answer: str
    detail: str


def workspace(root: Path, code_name: str, task: str = "read") -> None:
    root.mkdir(parents=True)
    (root / "notes.txt").write_text(
        f"Release notes, draft.\nThe release code name is {code_name}.\nShip it on Friday after the tests pass.\n",
        encoding="utf-8")
    (root / "greet.py").write_text('def greet(name):\n    return f"Hello, {name}!"\n', encoding="utf-8")
    (root / "release.py").write_text('from tasks import parse_release\n\nprint(parse_release("notes.txt"))\n',
                                     encoding="utf-8")
    if task == "run":  # only there, so the count stays 3 .py files
        (root / "checksum.py").write_text(
            'import zlib\n\nprint(zlib.crc32(open("notes.txt", "rb").read()) % 100000)\n', encoding="utf-8")
    (root / DEFINES).write_text('def parse_release(path):\n    for line in open(path):\n        if "code name" in '
                                'line:\n            return line.split()[-1].rstrip(".")\n', encoding="utf-8")


def passed_task(task: str, root: Path, answer: str, code_name: str) -> bool:
    """Whether the client did `task` in `root`, answering `answer`."""
    if task == "find":
        return DEFINES in answer and "release.py" not in answer
    if task == "write":
        written = root / "release.txt"
        return written.is_file() and code_name in written.read_text(encoding="utf-8", errors="replace")
    if task == "edit":
        edited = (root / "greet.py").read_text(encoding="utf-8", errors="replace")
        return "def greet(name)" in edited and "Hi, {name}!" in edited and "Hello" not in edited
    if task == "run":
        printed = str(zlib.crc32((root / "notes.txt").read_bytes()) % 100000)
        return re.search(rf"(?<![0-9]){printed}(?![0-9])", answer) is not None
    if task == "count":
        return re.search(r"\b(3|three)\b", answer, re.IGNORECASE) is not None and not re.search(r"\b[0-24-9]\b",
                                                                                              answer)
    return code_name.lower() in answer.lower()


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment with every per-user directory in a temporary HOME: nothing of this machine's configuration
    is read or written."""
    return {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local/state"), **extra}


def continue_config(base_url: str, home: Path) -> Path:
    """A Continue config.yaml in `home` declaring one model behind `base_url` (OpenAI's API, with tool use), the
    file `cn --config` reads."""
    config = home / "continue-config.yaml"
    config.write_text(
        "name: mylm serve\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: local\n    provider: openai\n"
        f"    model: local\n    apiBase: {base_url}\n    apiKey: unused\n    roles: [chat, edit, apply]\n"
        "    capabilities: [tool_use]\n", encoding="utf-8")
    return config


def command(client: str, task: str, base_url: str, project: Path, home: Path, npm: Path,
            python: str) -> tuple[list[str], dict[str, str]] | str:
    """The command line and environment that run one client, or why it cannot run here."""
    bin_dir = npm / "node_modules" / ".bin"
    if task == TASKS["run"] and client not in SHELLS:
        return "its tools cannot run a command"
    if client == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True)
        (codex_home / "config.toml").write_text(
            'model = "local"\nmodel_provider = "mylm"\n\n[model_providers.mylm]\nname = "mylm serve"\n'
            f'base_url = "{base_url}"\nenv_key = "MYLM_SERVE_KEY"\nwire_api = "responses"\n', encoding="utf-8")
        return ([str(bin_dir / "codex"), "exec", "--skip-git-repo-check", task],
                isolated_env(home, CODEX_HOME=str(codex_home), MYLM_SERVE_KEY="unused"))
    if client == "claude-code":
        return ([str(bin_dir / "claude"), "-p", task],
                isolated_env(home, ANTHROPIC_BASE_URL=base_url.removesuffix("/v1"), ANTHROPIC_AUTH_TOKEN="unused",
                             ANTHROPIC_MODEL="local", ANTHROPIC_SMALL_FAST_MODEL="local", DISABLE_TELEMETRY="1",
                             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1"))
    if client == "opencode":
        config = {"$schema": "https://opencode.ai/config.json", "model": "mylm/local", "provider": {"mylm": {
            "npm": "@ai-sdk/openai-compatible", "name": "mylm serve",
            "options": {"baseURL": base_url, "apiKey": "unused"},
            "models": {"local": {"name": "local model via mylm", "tool_call": True,
                                 "limit": {"context": 32768, "output": 4096}}}}}}
        (project / "opencode.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        return ([str(bin_dir / "opencode"), "run", task],
                isolated_env(home, PWD=str(project), OPENCODE_DISABLE_AUTOUPDATE="1",
                             OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_SHARE="1",
                             OPENCODE_DISABLE_LSP_DOWNLOAD="1"))
    if client == "qwen-code":
        # Qwen Code (a Gemini CLI fork) speaks Chat Completions to a provider declared in its settings.json; its
        # non-interactive mode asks no approval for reading, and refuses edits and commands by default.
        settings = {"modelProviders": {"openai": [{"id": "local", "name": "local model via mylm", "baseUrl": base_url,
                                                    "envKey": "MYLM_SERVE_KEY"}]},
                    "security": {"auth": {"selectedType": "openai"}}, "model": {"name": "local"},
                    "privacy": {"usageStatisticsEnabled": False}, "general": {"disableAutoUpdate": True}}
        (home / ".qwen").mkdir(parents=True)
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
        return ([str(bin_dir / "qwen"), task], isolated_env(home, MYLM_SERVE_KEY="unused"))
    if client == "continue":
        # Continue's CLI in headless mode (`cn -p`), with the model of its own config.yaml; `--auto` lets its file
        # tools write, as it asks first otherwise (and cannot ask without a terminal).
        return ([str(bin_dir / "cn"), "-p", task, "--config", str(continue_config(base_url, home)), "--auto"],
                isolated_env(home, CONTINUE_GLOBAL_DIR=str(home / ".continue"), CONTINUE_CLI_ENABLE_TELEMETRY="0"))
    if client == "cline":
        # Cline's CLI (cline 3): an OpenAI-compatible provider kept in its data directory, as `cline auth -p openai
        # -b URL` writes it; without a terminal it runs the task with its tools approved (`npm install cline`: a
        # compiled binary, no Node.js needed to run it).
        data = home / "cline"
        (data / "settings").mkdir(parents=True)
        provider = {"provider": "openai-compatible", "apiKey": "unused", "model": "local", "baseUrl": base_url}
        (data / "settings" / "providers.json").write_text(json.dumps({
            "version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
            # Without `updatedAt` the file fails Cline's schema and it falls back to its own hosted provider.
            "providers": {"openai-compatible": {"settings": provider, "updatedAt": "2026-01-01T00:00:00.000Z",
                                                "tokenSource": "manual"}}}), encoding="utf-8")
        return ([str(bin_dir / "cline"), "--data-dir", str(data), "-P", "openai-compatible", "-m", "local", task],
                isolated_env(home))
    if client == "llm":
        # Simon Willison's llm: an OpenAI-compatible model is declared in its extra-openai-models.yaml.
        user_dir = home / "llm"
        user_dir.mkdir(parents=True)
        (user_dir / "extra-openai-models.yaml").write_text(
            f'- model_id: mylm\n  model_name: local\n  api_base: "{base_url}"\n  supports_tools: true\n',
            encoding="utf-8")
        tools = ROOT / "scripts" / "clients" / "llm_tools.py"
        return ([str(Path(python).parent / "llm"), "-m", "mylm", "--functions", str(tools), task],
                isolated_env(home, LLM_USER_PATH=str(user_dir)))
    if client == "vercel-ai":
        if not (npm / "node_modules" / "ai").is_dir():
            return "the ai package is not installed in --npm"
        # ESM resolves packages from the script's own directory, so the driver runs from inside --npm.
        script = npm / "drive_vercel.mjs"
        shutil.copyfile(ROOT / "scripts" / "clients" / "vercel.mjs", script)
        return ["node", str(script), base_url, str(project), task], isolated_env(home)
    return ([python, str(ROOT / "scripts" / "clients" / "frameworks.py"), client, base_url, str(project), task],
            isolated_env(home))


def drive(client: str, task: str, base_url: str, npm: Path, python: str) -> tuple[Outcome, dict[str, str]]:
    code_name = f"{secrets.choice(['amber', 'cobalt', 'juniper', 'saffron', 'tundra'])}-{secrets.token_hex(2)}"
    # Not under /tmp: Codex refuses to create its sandbox helper under a temporary directory, and then every
    # command fails ("bwrap: execvp codex-linux-sandbox: No such file or directory").
    base = Path.home() / ".cache" / "mylm-drive-clients"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        project, home = Path(tmp) / "project", Path(tmp) / "home"
        workspace(project, code_name, task)
        home.mkdir()
        how = command(client, TASKS[task], base_url, project, home, npm, python)
        if isinstance(how, str):
            return Outcome(client, False, 0.0, "", f"not run: {how}"), {}
        argv, env = how
        if not Path(argv[0]).exists() and shutil.which(argv[0]) is None:
            return Outcome(client, False, 0.0, "", f"not run: {argv[0]} is not installed"), {}
        started = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=project, env=env, text=True, capture_output=True,
                                  timeout=CLIENT_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
            stdout, stderr, code = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as timed_out:
            stdout = timed_out.stdout if isinstance(timed_out.stdout, str) else ""
            stderr = timed_out.stderr if isinstance(timed_out.stderr, str) else ""
            code = None
        seconds = time.monotonic() - started
        answer = re.sub(r"\x1b\[[0-9;]*m", "", stdout).strip()  # OpenCode colours its output even into a pipe
        passed = code == 0 and passed_task(task, project, answer, code_name)
    detail = ("timed out" if code is None else f"exit {code}") + f"; code name {code_name}"
    return Outcome(client, passed, seconds, answer[-400:], detail), {"stdout": stdout, "stderr": stderr[-20000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--npm", type=Path, required=True, help="a directory whose node_modules holds the JS clients")
    parser.add_argument("--python", default=sys.executable, help="an interpreter with the frameworks installed")
    parser.add_argument("--only", action="append", choices=CLIENTS, help="run only this client (repeatable)")
    parser.add_argument("--task", choices=sorted(TASKS), default="read", help="the task every client gets")
    parser.add_argument("--log", type=Path, help="append every transcript here, as JSON lines")
    parser.add_argument("--serve", help="the root URL of a running `mylm serve` instead of starting one")
    parser.add_argument("upstream", nargs="*", help="mylm serve's upstream options, after --")
    args = parser.parse_args()

    serve: subprocess.Popen[str] | None = None
    handle, name = tempfile.mkstemp(suffix=".log", prefix="mylm-serve-")
    os.close(handle)
    serve_log = Path(name)
    if args.serve:
        root_url = args.serve.rstrip("/")
    else:
        with serve_log.open("w") as log:  # the child keeps its own descriptor
            serve = subprocess.Popen([sys.executable, "-m", "mylm", "serve", "--port", "0", "-v", *args.upstream],
                                     stderr=log, stdout=subprocess.DEVNULL, text=True)
        root_url = ""
        for _ in range(600):
            time.sleep(0.1)
            found = re.search(r"listening on (http://\S+?)/v1", serve_log.read_text())
            if found:
                root_url = found.group(1)
                break
            if serve.poll() is not None:
                break
        if not root_url:
            print(serve_log.read_text(), file=sys.stderr)
            return 1
    print(f"mylm serve at {root_url} (its log: {serve_log})", file=sys.stderr)
    outcomes: list[Outcome] = []
    try:
        for client in args.only or CLIENTS:
            outcome, transcript = drive(client, args.task, root_url + "/v1", args.npm.resolve(), args.python)
            outcomes.append(outcome)
            verdict = "pass" if outcome.passed else "FAIL"
            print(f"{client:17} {verdict} {outcome.seconds:6.0f} s  {outcome.detail}; answered "
                  f"{outcome.answer[-120:]!r}", flush=True)
            if args.log:
                with args.log.open("a", encoding="utf-8") as log:
                    log.write(json.dumps({**asdict(outcome), "task": args.task, **transcript}) + "\n")
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
    passed = sum(o.passed for o in outcomes)
    print(f"{passed} of {len(outcomes)} clients completed the task", flush=True)
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
