"""What the `mylm serve` tests share: the server in-process in front of a scripted loopback upstream, and the
tools the scripted model calls."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, TypeVar

from mylm.prompts import PromptLoader
from mylm.providers import Endpoint, create_llm
from mylm.serve.app import ServeConfig, create_app
from mylm.serve.core import Core, CoreSettings
from mylm.serve.server import Background

T = TypeVar("T")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_files",
        "description": "Find files whose name matches a glob.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
    },
}


#: OpenAI clients made by `openai_client`, closed after each test (conftest): a client left to the garbage
#: collector leaves its sockets open, which pytest reports against whatever test happens to run then.
OPEN_CLIENTS: list[Any] = []


def tracked(client: T) -> T:
    """`client` (an SDK client), closed after the test."""
    OPEN_CLIENTS.append(client)
    return client


def openai_client(url: str) -> Any:
    """The official OpenAI SDK's client for the server at `url` (closed after the test)."""
    import openai

    return tracked(openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30))


def call(name: str, arguments: str, thought: str = "") -> str:
    """A reply calling `name` in mylm's canonical form, after an optional thought."""
    block = f"<tool_code>\n<name>{name}</name>\n<parameters>\n{arguments}\n</parameters>\n</tool_code>"
    return f"{thought}\n{block}" if thought else block


@contextlib.contextmanager
def serving(upstream_url: str, *, provider: str = "openai", model: str = "test-model", client_key: str | None = None,
            constrain: str = "off", max_corrections: int = 2, tools: str = "emulate", http: str | None = None,
            stored: Any = None, **config: Any) -> Iterator[str]:
    """`mylm serve` in a thread on an ephemeral loopback port in front of `upstream_url`; yields its root URL.
    `http`: the HTTP parser ("httptools" or "h11"; default: the one `mylm serve` runs on); `stored`: where the
    answers and threads are kept (default: the server's own memory)."""
    endpoint = Endpoint(provider=provider, base_url=upstream_url, model=model, api_key="upstream-secret-key",
                        max_tokens=512)
    loader = PromptLoader.default()
    core = Core(create_llm(endpoint, prompts=loader), loader,
                CoreSettings(constrain=constrain, max_corrections=max_corrections, timeout=30,
                             tools=tools))  # type: ignore[arg-type]
    app = create_app(core, ServeConfig(model=model, client_key=client_key, **config),
                     redact=lambda s: s.replace("upstream-secret-key", "[REDACTED]"), stored=stored)
    with Background(app, http=http) as url:
        yield url
