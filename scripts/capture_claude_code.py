"""Capture Claude Code delegating a task to `mylm mcp`, with every model on loopback (docs/mcp.md).

Real: Claude Code (`claude -p`, from npm), its MCP client, `mylm mcp` over stdio, mylm's agent, tools and sandbox.
Scripted: Claude's own two turns (a loopback Anthropic Messages API that calls `mcp__mylm__run_task`, then
answers from its result) and mylm's model (the tests' loopback OpenAI server). Nothing leaves the machine.

    python scripts/capture_claude_code.py /path/to/claude
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mylm.protocol.canonical import format_tool_call  # noqa: E402
from mylm.core.types import ToolCall  # noqa: E402
from tests.providers.servers import Completion, OpenAIServer  # noqa: E402

TASK = "Find the TODO comments in this repository and list them with file and line."


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def _tool_results(body: dict[str, Any]) -> list[str]:
    texts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result":
                    inner = block.get("content")
                    parts = inner if isinstance(inner, list) else [{"type": "text", "text": str(inner)}]
                    texts += [p.get("text", "") for p in parts if p.get("type") == "text"]
    return texts


def _called(body: dict[str, Any]) -> set[str]:
    return {block.get("name", "") for message in body.get("messages", []) if message.get("role") == "assistant"
            and isinstance(message.get("content"), list) for block in message["content"]
            if block.get("type") == "tool_use"}


def _waits(body: dict[str, Any]) -> int:
    return sum(1 for message in body.get("messages", []) if message.get("role") == "assistant"
               and isinstance(message.get("content"), list) for block in message["content"]
               if block.get("type") == "tool_use" and block.get("name") == "WaitForMcpServers")


class FakeClaude(BaseHTTPRequestHandler):
    """Claude's side, scripted: with the mylm tool offered and no result yet, call it; with its result, answer."""

    log: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        FakeClaude.log.append({"path": self.path, "tools": [t.get("name") for t in body.get("tools", [])]})
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            return self._json({"input_tokens": 10})
        tools = {t.get("name"): t for t in body.get("tools", [])}
        results = _tool_results(body)
        called = _called(body)
        blocks: list[dict[str, Any]]
        if "mcp__mylm__run_task" in tools and "mcp__mylm__run_task" not in called:
            blocks = [
                {"type": "text", "text": "I'll delegate this search to the local model through mylm."},
                {"type": "tool_use", "id": "toolu_02", "name": "mcp__mylm__run_task", "input": {"prompt": TASK}},
            ]
            stop = "tool_use"
        elif "WaitForMcpServers" in tools and _waits(body) < 10:
            # `claude -p` connects MCP servers in the background; its own tool waits for them.
            FakeClaude.log.append({"wait_schema": tools["WaitForMcpServers"].get("input_schema")})
            blocks = [{"type": "tool_use", "id": f"toolu_w{_waits(body)}", "name": "WaitForMcpServers", "input": {}}]
            stop = "tool_use"
        elif "mcp__mylm__run_task" in called and results:
            report = results[-1]
            try:
                answer = json.loads(report).get("answer", report)
            except ValueError:
                answer = report
            blocks, stop = [{"type": "text", "text": f"mylm's local model found:\n{answer}"}], "end_turn"
        else:
            blocks, stop = [{"type": "text", "text": "ok"}], "end_turn"
        if body.get("stream"):
            self._stream(body, blocks, stop)
        else:
            self._json({"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
                        "content": blocks, "stop_reason": stop, "stop_sequence": None,
                        "usage": {"input_tokens": 10, "output_tokens": 10}})

    def _json(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _stream(self, body: dict[str, Any], blocks: list[dict[str, Any]], stop: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        out = self.wfile
        out.write(_sse("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"), "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}))
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                out.write(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                       "content_block": {"type": "text", "text": ""}}))
                out.write(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "text_delta", "text": block["text"]}}))
            else:
                start = {**block, "input": {}}
                out.write(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                       "content_block": start}))
                out.write(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
            out.write(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        out.write(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                         "stop_sequence": None}, "usage": {"output_tokens": 10}}))
        out.write(_sse("message_stop", {"type": "message_stop"}))
        out.flush()


def main() -> int:
    claude = sys.argv[1] if len(sys.argv) > 1 else "claude"
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        (repo / "src").mkdir(parents=True)
        (repo / "src" / "app.py").write_text("def main():\n    # TODO: read the port from the config\n    return 8080\n")
        (repo / "README.md").write_text("# demo\n\nTODO: write the install section\n")
        anthropic = ThreadingHTTPServer(("127.0.0.1", 0), FakeClaude)
        threading.Thread(target=anthropic.serve_forever, daemon=True).start()
        replies = [
            Completion("I will search for TODO markers.\n" + format_tool_call(
                ToolCall("execute_command", {"command": "grep -rn TODO ."}))),
            Completion("Two TODOs:\n- src/app.py:2 read the port from the config\n"
                       "- README.md:3 write the install section"),
        ]
        with OpenAIServer(replies) as model:
            config = {"mcpServers": {"mylm": {
                "command": sys.executable, "args": ["-m", "mylm", "mcp", "--base-url", model.base_url, "-m", "local"],
                # Sessions go to the temporary directory, not the user's own.
                "env": {"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "HOME": os.environ["HOME"],
                        "XDG_DATA_HOME": str(Path(tmp) / "data")}}}}
            (repo / "mcp.json").write_text(json.dumps(config))
            env = {**os.environ, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{anthropic.server_address[1]}",
                   "ANTHROPIC_API_KEY": "sk-ant-loopback-not-a-key", "DISABLE_TELEMETRY": "1",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                   # Wait for the MCP server before the first turn (`-p` connects in the background otherwise).
                   "MCP_CONNECTION_NONBLOCKING": "false"}
            command = [claude, "-p", "Find the TODOs in this repo; delegate the search to mylm.",
                       "--mcp-config", "mcp.json", "--strict-mcp-config",
                       "--allowedTools", "mcp__mylm__run_task", "--output-format", "stream-json", "--verbose"]
            print("$ " + " ".join(command[:3]) + " ...", file=sys.stderr)
            done = subprocess.run(command, cwd=repo, env=env, text=True, capture_output=True, timeout=300,
                                  check=False)
        anthropic.shutdown()
    print(done.stdout)
    print(done.stderr, file=sys.stderr)
    print(json.dumps(FakeClaude.log), file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
