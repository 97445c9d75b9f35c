"""Capture OpenCode calling its own `read` tool natively through `mylm serve`, with the model on loopback.

Real: OpenCode (`opencode run`, from npm; its `@ai-sdk/openai-compatible` provider is bundled in 1.18),
its tools and permissions, the `mylm serve` CLI (a subprocess) reaching its upstream with `--provider openai`,
and mylm's prompt, grammar, parser and wire code. Scripted: only the model, the tests' loopback OpenAI server
(SSE in small delayed chunks) answering by what it is sent, as a model that knows nothing but mylm's text
protocol: a request that offers no tools (OpenCode's title request, passed through as plain chat) gets a
title; one whose last user message holds an `<observation>` gets a `<final_answer>` quoting it; any other gets
a call of OpenCode's `read` tool in a `<tool_code>` block. Nothing leaves the machine, and OpenCode's
configuration, data and caches live in a temporary HOME. It prints OpenCode's output and every request the
model was sent, and exits non-zero unless the call went out and its result came back as mylm's canonical call
and `<observation>` (docs/serve.md, "Captures").

    python scripts/capture_opencode.py /path/to/opencode [more `opencode run` options, e.g. --print-logs]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mylm.protocol.canonical import format_tool_call
from mylm.core.types import ToolCall
from tests.providers.servers import Completion, OpenAIServer, RecordedRequest, Reply

PROMPT = "What does hello.txt say?"
SECRET = "mylm-capture-42"
#: OpenCode's file-reading tool and its path parameter, as its tool definitions name them.
READ_TOOL, PATH_PARAMETER = "read", "filePath"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def _system(body: dict[str, Any]) -> str:
    return "\n".join(_text(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system")


def offered(body: dict[str, Any]) -> list[str]:
    """The tool names mylm's prompt offered the model in this request (none: a plain chat request)."""
    system = _system(body)
    definitions = system.split("</tool_definitions>")[0] if "<tool_definitions>" in system else ""
    return re.findall(r"<tool>\s*<name>([^<]+)</name>", definitions)


def answer(body: dict[str, Any], hello: Path) -> str:
    """What a model that knows only mylm's protocol would say to this request."""
    users = [_text(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "user"]
    if not offered(body):
        return "Reading hello.txt"
    found = re.search(r"<observation>\n?(.*?)\n?</observation>", users[-1] if users else "", re.DOTALL)
    if found:
        # OpenCode's read tool numbers the lines (`1: text`); the model quotes the text.
        lines = re.findall(r"^\s*\d+: (.*)$", found.group(1), re.MULTILINE)
        said = " ".join(lines) if lines else found.group(1).strip()
        return f"<final_answer>The file hello.txt says: {said}.</final_answer>"
    return "I will read the file.\n" + format_tool_call(ToolCall(READ_TOOL, {PATH_PARAMETER: str(hello)}))


class ReadingModel(OpenAIServer):
    """The tests' OpenAI server, each reply chosen by the request's content instead of taken from a script."""

    def __init__(self, hello: Path) -> None:
        super().__init__()
        self.hello = hello

    def _record(self, request: RecordedRequest) -> Reply | None:
        with self._lock:  # re-entrant: choosing the reply and recording the request stay one step
            if self.is_generation(request.method, request.path):
                self._script = [Completion(answer(request.body or {}, self.hello))]
            return super()._record(request)


class Serve:
    """The real `mylm serve` CLI on a free loopback port, in front of `upstream`; `with Serve(...) as url`."""

    def __init__(self, upstream: str, env: dict[str, str]) -> None:
        self.command = [sys.executable, "-m", "mylm", "serve", "--provider", "openai", "--base-url", upstream,
                        "-m", "local", "--api-key", "unused", "--port", "0"]
        self.env = env
        #: What the server writes to stderr after its banner (its warnings: a correction sent upstream, say).
        self.log: list[str] = []

    def __enter__(self) -> str:
        print("$ " + " ".join(["mylm", *self.command[3:]]))
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stderr=subprocess.PIPE,
                                        text=True)
        stderr = self.process.stderr
        assert stderr is not None
        banner = stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", banner)
        if not found:
            self.process.kill()
            raise SystemExit(f"mylm serve did not start: {banner}{stderr.read()}")
        print(banner.rstrip())
        self.reader = threading.Thread(target=lambda: self.log.extend(stderr), daemon=True)
        self.reader.start()
        return f"http://127.0.0.1:{found.group(1)}/v1"

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.reader.join(timeout=10)


def opencode_config(base_url: str) -> dict[str, Any]:
    """docs/serve.md's `opencode.json`, pointed at this run's port."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"mylm": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "mylm serve",
            "options": {"baseURL": base_url, "apiKey": "unused"},
            "models": {"local": {"name": "local model via mylm", "tool_call": True,
                                 "limit": {"context": 32768, "output": 4096}}},
        }},
        "model": "mylm/local",
        "permission": {"read": "allow"},
    }


def problems(requests: list[dict[str, Any]], output: str, hello: Path) -> list[str]:
    """What this capture was to show and did not: the call went out canonical and its result came back."""
    call = format_tool_call(ToolCall(READ_TOOL, {PATH_PARAMETER: str(hello)}))
    found: list[str] = []
    if not any(READ_TOOL in offered(body) for body in requests):
        found.append(f"no request offered the model a tool named {READ_TOOL!r}")
    results = [body["messages"] for body in requests
               if "<observation>" in _text(body["messages"][-1].get("content"))]
    if not results:
        found.append("no request carried the tool's result as an <observation>")
    else:
        if not _text(results[0][-2].get("content")).endswith(call):
            found.append("the assistant turn before the result does not end with the canonical call")
        if SECRET not in _text(results[0][-1].get("content")):
            found.append("the observation does not hold the file's contents")
    if f"says: {SECRET}" not in output:
        found.append("OpenCode did not print the answer")
    return found


def report(requests: list[dict[str, Any]]) -> None:
    print(f"--- what the model was sent: {len(requests)} requests")
    for index, body in enumerate(requests):
        tools = offered(body)
        print(f"--- request {index + 1}: a system prompt of {len(_system(body))} characters offering "
              f"{', '.join(tools) if tools else 'no tools'}; then")
        for message in body["messages"]:
            if message.get("role") != "system":
                print(f"[{message.get('role')}]\n{_text(message.get('content'))}")


def main() -> int:
    opencode = sys.argv[1] if len(sys.argv) > 1 else "opencode"
    with tempfile.TemporaryDirectory() as tmp:
        project, home = Path(tmp) / "project", Path(tmp) / "home"
        project.mkdir()
        home.mkdir()
        hello = project / "hello.txt"
        hello.write_text(SECRET + "\n")
        # Nothing of this machine's configuration is read or written: every directory OpenCode uses is
        # temporary. OpenCode takes its project directory from PWD, not from its working directory.
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
               "XDG_STATE_HOME": str(home / ".local/state"), "PWD": str(project), "PYTHONPATH": str(ROOT),
               "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
               "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}
        version = subprocess.run([opencode, "--version"], env=env, text=True, capture_output=True,
                                 check=False)
        with ReadingModel(hello) as model:
            serve = Serve(model.base_url, env)
            with serve as base_url:
                (project / "opencode.json").write_text(json.dumps(opencode_config(base_url), indent=2))
                shown = " ".join([*sys.argv[2:], repr(PROMPT)])
                print(f"$ opencode run {shown}    # OpenCode {version.stdout.strip()}, in {project}")
                done = subprocess.run([opencode, "run", *sys.argv[2:], PROMPT], cwd=project, env=env,
                                      text=True, capture_output=True, timeout=600, check=False,
                                      stdin=subprocess.DEVNULL)
            requests = [r.body for r in model.requests if isinstance(r.body, dict) and r.body.get("messages")]
        # OpenCode colours its output even into a pipe.
        print(re.sub(r"\x1b\[[0-9;]*m", "", done.stderr + done.stdout))
        print("".join(serve.log), end="")
        report(requests)
        found = problems(requests, done.stdout, hello)
    for problem in found:
        print(f"capture_opencode: {problem}", file=sys.stderr)
    return done.returncode or (1 if found else 0)


if __name__ == "__main__":
    raise SystemExit(main())
