#!/usr/bin/env python3
"""Benchmark `mylm serve` against a zero-latency loopback upstream, printing every figure next to its baseline
from the same run (issue 21):

1. added latency per request: the median time of a streamed tool-call reply through `mylm serve`, minus the
   median of the same request sent to the upstream directly (target <= 2 ms);
2. streaming CPU per token: the server's own CPU time streaming the same long reply with tools in the request
   (parsed by mylm) against without tools (forwarded unparsed, the plain-chat proxy) (target <= 1.5x);
3. 64 concurrent streaming clients: errors (target 0) and throughput against the same clients calling the
   upstream directly (target >= 0.8x).

The upstream (a subprocess) answers every request at once from memory, with keep-alive, in OpenAI's SSE
format, one chunk per token. `mylm serve` runs as a real `python -m mylm serve` subprocess. The clients are
asyncio sockets in this process; each checks that its reply arrived whole.

    python scripts/bench_serve.py                 # the defaults below, about a minute
    python scripts/bench_serve.py --clients 64 --rounds 4 --latency-requests 300
    python scripts/bench_serve.py --otel-sink     # the same with every request traced (`mylm serve --otel`)
    python scripts/bench_serve.py --workers 2     # `mylm serve --workers 2` (the server's CPU: every worker's)
    python scripts/bench_serve.py --event-delay 0.002 --latency-requests 20   # an upstream streaming event by event
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CALL = ('I will look.\n<tool_code>\n<name>get_weather</name>\n<parameters>\n{"city": "Paris"}\n</parameters>\n'
        '</tool_code>')
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


# ------------------------------------------------------------------------------------------------ upstream


def reply_for(body: dict[str, Any]) -> list[str]:
    """The tokens the upstream streams for a request: a call (`CALL` in the last message) or N words."""
    last = str(body["messages"][-1]["content"])
    if "CALL" in last:
        return re.findall(r".{1,4}", CALL, re.DOTALL)
    words = int(re.search(r"WORDS (\d+)", last).group(1))  # type: ignore[union-attr]
    return [f"w{i} " for i in range(words)]


def sse_body(tokens: list[str], model: str) -> bytes:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": model}
    out = []
    for token in tokens:
        out.append({**head, "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]})
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    lines = [f"data: {json.dumps(o, separators=(',', ':'))}\n\n" for o in out] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


async def upstream_main(event_delay: float = 0.0) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                sized = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if sized is None:  # mylm serve's probes of the upstream's window (GET /props, /slots, /v1/models)
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                body = json.loads(await reader.readexactly(int(sized.group(1))))
                payload = sse_body(reply_for(body), body.get("model", "bench"))
                if event_delay:  # a model streaming: each event its own chunk, written `event_delay` s apart
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
                                 b"\r\n\r\n")
                    for event in payload.split(b"\n\n")[:-1]:
                        writer.write(b"%x\r\n%s\n\n\r\n" % (len(event) + 2, event))
                        await writer.drain()
                        await asyncio.sleep(event_delay)
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(payload), payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# -------------------------------------------------------------------------------------------------- client


async def fetch(port: int, body: dict[str, Any]) -> str:
    """POST a streamed chat request; return the text of its content deltas (raises on any error)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = json.dumps(body).encode()
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer bench\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.split(b"\r\n")[0].decode())
        if re.search(rb"(?i)transfer-encoding:\s*chunked", head):
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                if size == 0:
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            raw = b"".join(parts)
        else:
            length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
            raw = await reader.readexactly(length)
    finally:
        writer.close()
    text, arguments = [], []
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            raise RuntimeError(event["error"])
        for choice in event.get("choices", []):
            text.append(choice["delta"].get("content") or "")
            for call in choice["delta"].get("tool_calls") or []:
                arguments.append(call["function"].get("arguments") or "")
    return "".join(text) + "".join(arguments)


def request(content: str, tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "bench", "stream": True, "messages": [{"role": "user", "content": content}]}
    if tools:
        body["tools"] = TOOLS
    return body


def cpu_seconds(pid: int) -> float:
    """The CPU time `pid` spent, and its live children (`mylm serve --workers N`'s workers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(child) for child in children(pid))


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


async def latency(port: int, n: int, tools: bool, distinct: bool = False) -> list[float]:
    """The time of each of `n` streamed tool-call replies; `distinct`: every request asks a question of its own, so
    nothing the server learnt from an earlier one (the fit probe's answer, kept per question) applies."""
    times = []
    for index in range(n):
        started = time.perf_counter()
        got = await fetch(port, request(f"CALL {index} {os.getpid()}" if distinct else "CALL", tools))
        times.append(time.perf_counter() - started)
        assert "Paris" in got, got
    return times


async def concurrent(port: int, clients: int, rounds: int, words: int) -> tuple[float, int, int]:
    """(seconds, completed, errors) for `clients` clients each streaming `rounds` replies of `words` words."""
    expected = "".join(f"w{i} " for i in range(words))
    errors = 0

    async def client() -> int:
        nonlocal errors
        done = 0
        for _ in range(rounds):
            try:
                if (await fetch(port, request(f"WORDS {words}", True))).strip() == expected.strip():
                    done += 1
                else:
                    errors += 1
            except Exception:  # noqa: BLE001 - counted, not fatal
                errors += 1
        return done

    started = time.perf_counter()
    completed = sum(await asyncio.gather(*(client() for _ in range(clients))))
    return time.perf_counter() - started, completed, errors


def otel_sink() -> str:
    """An OTLP/HTTP receiver in a thread of this process that answers every export with success; its URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--cpu-words", type=int, default=4000, help="words in each reply of the CPU test")
    parser.add_argument("--cpu-requests", type=int, default=10)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--words", type=int, default=200, help="words in each reply of the concurrency test")
    parser.add_argument("--otel-sink", action="store_true",
                        help="trace every request (`--otel`) to an OTLP/HTTP sink in this process that accepts and "
                             "drops the spans")
    parser.add_argument("--workers", type=int, default=1, help="`mylm serve --workers N` (default 1)")
    parser.add_argument("--event-delay", type=float, default=0.0,
                        help="the upstream writes each event on its own, this many seconds apart, as a model "
                             "streaming token by token does (default 0: each reply in one write)")
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        asyncio.run(upstream_main(args.event_delay))
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen([sys.executable, __file__, "--upstream", "--event-delay", str(args.event_delay)],
                                stdout=subprocess.PIPE, text=True, env=env)
    assert upstream.stdout is not None
    up_port = int(upstream.stdout.readline())
    traced = ["--otel", otel_sink()] if args.otel_sink else []
    serve = subprocess.Popen(
        [sys.executable, "-m", "mylm", "serve", "--base-url", f"http://127.0.0.1:{up_port}/v1", "-m", "bench",
         "--port", "0", "--workers", str(args.workers), *traced], stderr=subprocess.PIPE, text=True, env={**env, "MYLM_SERVE_KEY": "bench"})
    assert serve.stderr is not None
    serve_port = int(re.search(r":(\d+)/v1", serve.stderr.readline()).group(1))  # type: ignore[union-attr]
    try:
        asyncio.run(run(args, up_port, serve_port, serve.pid, upstream.pid))
    finally:
        for process in (serve, upstream):
            process.terminate()
            process.wait(timeout=30)


async def run(args: argparse.Namespace, up_port: int, serve_port: int, serve_pid: int, up_pid: int) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, "
          f"mylm serve --workers {args.workers}")
    await latency(serve_port, 20, True)  # warm-up: imports, the grammar compiled, connections pooled
    await latency(up_port, 20, True)
    direct = statistics.median(await latency(up_port, args.latency_requests, True))
    before = cpu_seconds(serve_pid)
    served = statistics.median(await latency(serve_port, args.latency_requests, True))
    per_request = (cpu_seconds(serve_pid) - before) / args.latency_requests
    print(f"1. latency, streamed tool-call reply ({args.latency_requests} requests each): direct median "
          f"{direct * 1000:.2f} ms, through mylm serve {served * 1000:.2f} ms: added {(served - direct) * 1000:.2f} ms "
          f"(target <= 2 ms); the server's CPU per request {per_request * 1000:.2f} ms")
    # The same request again and again lets the server answer the fit probe from what it kept (as a client's
    # retry would); a conversation opening on a new question pays the probe's upstream call.
    before = cpu_seconds(serve_pid)
    fresh = statistics.median(await latency(serve_port, args.latency_requests, True, distinct=True))
    per_fresh = (cpu_seconds(serve_pid) - before) / args.latency_requests
    print(f"   each request a new question (the fit probe asked upstream every time): through mylm serve "
          f"{fresh * 1000:.2f} ms: added {(fresh - direct) * 1000:.2f} ms; the server's CPU per request "
          f"{per_fresh * 1000:.2f} ms")

    async def cpu(tools: bool) -> float:
        before = cpu_seconds(serve_pid)
        for _ in range(args.cpu_requests):
            body = request(f"WORDS {args.cpu_words}", tools)
            got = await fetch(serve_port, body)
            assert got.count("w") == args.cpu_words, "a reply arrived cut"
        return cpu_seconds(serve_pid) - before

    await cpu(True)
    await cpu(False)
    plain, parsed = await cpu(False), await cpu(True)
    tokens = args.cpu_words * args.cpu_requests
    print(f"2. server CPU per streamed token ({tokens} tokens each): forwarded unparsed (no tools) "
          f"{plain / tokens * 1e6:.1f} us, parsed (tools) {parsed / tokens * 1e6:.1f} us: "
          f"{parsed / plain:.2f}x (target <= 1.5x)")

    def cpu_now() -> tuple[float, float, float]:
        return time.process_time(), cpu_seconds(up_pid), cpu_seconds(serve_pid)

    def per_reply(before: tuple[float, float, float], replies: int) -> str:
        spent = [(after - start) / max(1, replies) * 1000 for start, after in zip(before, cpu_now())]
        return f"CPU per reply: clients {spent[0]:.2f} ms, upstream {spent[1]:.2f} ms, server {spent[2]:.2f} ms"

    before = cpu_now()
    d_time, d_done, d_errors = await concurrent(up_port, args.clients, args.rounds, args.words)
    direct_cpu = per_reply(before, d_done)
    before = cpu_now()
    s_time, s_done, s_errors = await concurrent(serve_port, args.clients, args.rounds, args.words)
    served_cpu = per_reply(before, s_done)
    d_rate, s_rate = d_done / d_time, s_done / s_time
    print(f"3. {args.clients} concurrent streaming clients x {args.rounds} replies of {args.words} tokens: direct "
          f"{d_rate:.1f} replies/s ({d_errors} errors), through mylm serve {s_rate:.1f} replies/s ({s_errors} errors): "
          f"{s_rate / d_rate:.2f}x (target >= 0.8x, 0 errors)\n   direct: {direct_cpu}\n   through mylm serve: "
          f"{served_cpu}")


if __name__ == "__main__":
    main()
