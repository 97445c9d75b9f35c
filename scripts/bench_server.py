"""A loopback OpenAI-compatible server for the benchmarks, run in its own process so it never shares the GIL.

    python scripts/bench_server.py --mode stream --size 1048576     one huge answer, sent as fast as possible
    python scripts/bench_server.py --mode steps --steps 20          a tool call per request, the 20th answers
    python scripts/bench_server.py --mode rate --tokens 100 --rate 200   an answer paced at 200 tokens/s

It prints its port on the first line of stdout. `GET /stats` returns, per request, when it arrived and when
its answer was completely sent (time.monotonic of this machine), so clients are timed from the outside.
Every event is a full `chat.completion.chunk` as vLLM and llama.cpp send them.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

TOKEN_WORDS = ("The ", "answer ", "is ", "in ", "the ", "file, ", "line ", "42. ", "See `", "main.py",
               "` and ",
               "**the** ", "tests ", "below.\n")
COMMAND_CALL = ('I will run it.\n<tool_code>\n<name>execute_command</name>\n<parameters>\n'
                '{{"command": "echo step {n}"}}\n</parameters>\n</tool_code>')


def event(text: str | None, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    delta: dict[str, Any] = {} if text is None else {"content": text}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
             "model": "bench", "system_fingerprint": "fp_bench", "choices": [] if usage else [choice]}
    if usage:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def tokens_of(text: str, size: int = 4) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def body(tokens: list[str]) -> list[bytes]:
    parts = [event(t) for t in tokens]
    parts.append(event(None, "stop"))
    parts.append(event(None, usage={"prompt_tokens": 100, "completion_tokens": len(tokens),
                                    "total_tokens": 100 + len(tokens)}))
    parts.append(b"data: [DONE]\n\n")
    return parts


def answer_tokens(size: int) -> list[str]:
    """About `size` characters of Markdown answer as word-sized tokens."""
    # Words in a seeded random order, lines of 8 to 16 words: one line sent over and over would be a degenerate
    # reply, which mylm's repetition guard rightly cuts short (docs/parser.md), and then nothing is measured.
    rng = random.Random(size)
    words, end = TOKEN_WORDS[:-1], TOKEN_WORDS[-1]
    out: list[str] = []
    total, left = 0, rng.randint(8, 16)
    while total < size:
        left -= 1
        word = end if left == 0 else rng.choice(words)
        left = rng.randint(8, 16) if left == 0 else left
        out.append(word)
        total += len(word)
    return out


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.args = args
        self.lock = threading.Lock()
        self.count = 0
        self.stats: list[tuple[float, float]] = []
        if args.mode == "stream":
            self.payload = b"".join(body(answer_tokens(args.size)))


def _quiet(self: ThreadingHTTPServer, request: Any, client_address: Any) -> None:
    pass  # a client closing a stream early (mylm does, once a call is complete) is routine, not an error


Server.handle_error = _quiet  # type: ignore[method-assign]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Without it, Nagle holds an answer's last small write until the client's delayed ACK (~40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        if self.path == "/stats":
            data = json.dumps(self.server.stats).encode()
        else:
            data = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        arrived = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        args = self.server.args
        with self.server.lock:
            self.server.count += 1
            number = self.server.count
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if args.mode == "stream":
            self.send_header("Content-Length", str(len(self.server.payload)))
            self.end_headers()
            self.wfile.write(self.server.payload)
        else:
            if args.mode == "steps":
                step = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant") + 1
                text = COMMAND_CALL.format(n=step) if step < args.steps else "All steps ran."
                parts = body(tokens_of(text, 16))
            else:
                parts = body(answer_tokens(args.tokens * 5)[: args.tokens])
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pause = 1.0 / args.rate if args.mode == "rate" else 0.0
            if not pause:  # one write: the client's time is measured, not the server's
                parts = [b"".join(parts)]
            for part in parts:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        with self.server.lock:
            self.server.stats.append((arrived, time.monotonic()))
        del number


@contextmanager
def serve(*args: str) -> Iterator[str]:
    """Start the server in a child process; yields its base URL (`http://127.0.0.1:PORT/v1`)."""
    child = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.terminate()
        child.wait()


def stats(base_url: str) -> list[tuple[float, float]]:
    """(arrived, answered) for every request so far."""
    import urllib.request

    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats") as answer:
        return [tuple(pair) for pair in json.loads(answer.read())]  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["stream", "steps", "rate"], required=True)
    parser.add_argument("--size", type=int, default=1 << 20, help="stream: characters in the answer")
    parser.add_argument("--steps", type=int, default=20, help="steps: requests per run")
    parser.add_argument("--tokens", type=int, default=100, help="rate: tokens per answer")
    parser.add_argument("--rate", type=float, default=200.0, help="rate: tokens per second per stream")
    args = parser.parse_args()
    server = Server(args)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
