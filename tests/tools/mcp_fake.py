"""A hostile or broken MCP server over stdio, speaking raw JSON-RPC lines (no SDK): `python mcp_fake.py MODE`.

silent: reads requests and never answers (not even `initialize`), nor exits when its stdin closes.
noisy: prints lines that are not JSON before and between its answers. leaky: a well-behaved server whose
one tool returns a private key and a password assignment. garbage: answers `initialize` with text only.
"""

from __future__ import annotations

import json
import sys
import time

KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(mode: str) -> None:
    for line in sys.stdin:
        if mode == "noisy":
            print("starting up... not json", flush=True)
        request = json.loads(line)
        method, ident = request.get("method"), request.get("id")
        if mode == "silent" or ident is None:
            continue
        if mode == "garbage":
            print("this is not JSON-RPC at all", flush=True)
            continue
        if method == "initialize":
            result: dict[str, object] = {
                "protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "leak", "description": "returns secrets",
                                 "inputSchema": {"type": "object", "properties": {}}}]}
        elif method == "tools/call":
            text = f"here is the key:\n{KEY}\nconfig:\n  smtp_password: hunter2pass\n"
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            result = {}
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main(sys.argv[1])
    if sys.argv[1] == "silent":
        time.sleep(3600)  # and does not leave when its stdin closes: only a kill ends it
