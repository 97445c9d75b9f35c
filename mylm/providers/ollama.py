"""Ollama's native API: `/api/chat`, or `/api/generate` with `raw: true` given a chat format (NDJSON)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from ..llm import LLMChunk, LLMRequest
from .base import Endpoint
from .decoder import Decoder, text_chunks, usage_of
from .engine import HTTPProvider, bearer
from .transport import HTTPCall

#: Body fields that sit at the top level; every other option goes into `options` (temperature, num_ctx, ...).
_TOP_LEVEL = frozenset({"format", "keep_alive", "think", "template", "suffix", "images", "context"})


class _OllamaDecoder(Decoder):
    """One JSON object per line; the last has `done: true`, counts; `{"error": ...}` may come mid-stream."""

    def feed(self, item: Any) -> Iterator[LLMChunk]:
        self.fail_on_error(item)
        if not isinstance(item, dict):
            return
        message = item.get("message")
        if isinstance(message, dict):  # /api/chat
            yield from text_chunks(message.get("content"), message.get("thinking"))
        else:  # /api/generate
            yield from text_chunks(item.get("response"), item.get("thinking"))
        if item.get("done"):
            self.done = True
            self.reason = str(item.get("done_reason") or "stop").lower()
            self.usage = usage_of(item.get("prompt_eval_count"), item.get("eval_count"))


class Ollama(HTTPProvider):
    """Ollama: messages to `/api/chat` (the model's own template), or a rendered prompt to `/api/generate`."""

    name = "ollama"
    default_base_url = "http://localhost:11434"
    route_suffixes = ("/api/chat", "/api/generate", "/api", "/v1")
    framing = "ndjson"
    requires_model = True

    @classmethod
    def claims(cls, base_url: str) -> bool:
        # Ollama's own port with no OpenAI-style path is its native API; `.../v1` there is its OpenAI layer.
        parts = urlsplit(base_url)
        return parts.port == 11434 and parts.path.rstrip("/") in ("", "/api")

    def __init__(self, endpoint: Endpoint, **kwargs: Any) -> None:
        # With a chat format the prompt is rendered here and sent raw (for a missing or wrong model template).
        self.raw_prompt = bool(endpoint.chat_format)
        super().__init__(endpoint, **kwargs)

    def build_call(self, request: LLMRequest) -> HTTPCall:
        options: dict[str, Any] = {"num_predict": self.max_tokens(request)}
        stops = self.stops(request)
        if stops:
            options["stop"] = stops
        body: dict[str, Any] = {"model": self.endpoint.model, "stream": True}
        if self.raw_prompt:
            body.update(prompt=self.prompt(request.messages), raw=True)
            route = "/api/generate"
        else:
            body["messages"] = [m.to_dict() for m in request.messages]
            route = "/api/chat"
        # The request's sampling comes last (`Sampling.over`), so it wins inside `options` too.
        for key, value in request.sampling.over(self.endpoint.options).items():
            if key in _TOP_LEVEL:
                body[key] = value
            elif key == "options" and isinstance(value, dict):
                options.update(value)
            else:
                options[key] = value
        body["options"] = options
        return self.json_call(
            self.endpoint.base_url + route, body, {"Accept": "application/x-ndjson", **bearer(self.endpoint)}
        )

    def new_decoder(self) -> Decoder:
        return _OllamaDecoder(self.place, self.endpoint.api_key)

    def models_call(self) -> HTTPCall:
        return HTTPCall(
            "GET",
            self.endpoint.base_url + "/api/tags",
            {"Accept": "application/json", **bearer(self.endpoint)},
        )

    def parse_models(self, document: Any) -> list[str]:
        entries = document.get("models") if isinstance(document, dict) else None
        return sorted(str(e.get("name") or e.get("model")) for e in entries or () if isinstance(e, dict))
