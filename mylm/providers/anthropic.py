"""Anthropic's Messages API in plain-text mode: named SSE events, `stop_sequences`, `x-api-key`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from ..core.types import Usage
from ..llm import LLMChunk, LLMRequest
from .base import merge_turns, refused_sampling, without_refused
from .decoder import Decoder, text_chunks
from .engine import HTTPProvider
from .failures import Failure
from .framing import SSEEvent, sse_json
from .transport import HTTPCall

API_VERSION = "2023-06-01"
#: The sampling options the Messages API has (no seed, no penalties), under the same names.
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}


class _AnthropicDecoder(Decoder):
    """`message_start`, `content_block_delta`, `message_delta` (stop reason, usage), `message_stop`."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._input = 0
        self._output = 0

    def feed(self, item: SSEEvent) -> Iterator[LLMChunk]:
        for obj in sse_json(item):
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type") or item.event
            if kind == "error" or item.event == "error":
                self.fail_on_error(obj if "error" in obj else {"error": obj})
            if kind == "message_start":
                usage = (obj.get("message") or {}).get("usage") or {}
                # Cached prompt tokens are reported apart from `input_tokens`; all of them were read.
                self._input = sum(
                    int(usage.get(k) or 0)
                    for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                )
                self._output = int(usage.get("output_tokens") or 0)
            elif kind == "content_block_delta":
                delta = obj.get("delta") or {}
                yield from text_chunks(delta.get("text"), delta.get("thinking"))
            elif kind == "message_delta":
                delta = obj.get("delta") or {}
                if delta.get("stop_reason"):
                    self.reason = str(delta["stop_reason"]).lower()
                self.stop_sequence = delta.get("stop_sequence") or self.stop_sequence
                self._output = int((obj.get("usage") or {}).get("output_tokens") or self._output)
            elif kind == "message_stop":
                self.done = True
        if self._input or self._output:
            self.usage = Usage(self._input, self._output)

    def complete_at_eof(self) -> bool:
        return self.done


class Anthropic(HTTPProvider):
    """`POST {base}/v1/messages` with the system text apart and strictly alternating user/assistant turns."""

    name = "anthropic"
    default_base_url = "https://api.anthropic.com"
    key_vars = ("ANTHROPIC_API_KEY",)
    route_suffixes = ("/v1/messages", "/messages")
    # Anthropic rejects empty and whitespace-only stop sequences.
    blank_stops = False
    requires_model = True

    @classmethod
    def claims(cls, base_url: str) -> bool:
        return (urlsplit(base_url).hostname or "").lower() == "api.anthropic.com"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self.endpoint.api_key:
            headers["x-api-key"] = self.endpoint.api_key
        return headers

    def build_call(self, request: LLMRequest) -> HTTPCall:
        system, turns = merge_turns(request.messages)
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "max_tokens": self.max_tokens(request),
            "stream": True,
        }
        if system:
            body["system"] = system
        body["messages"] = [t.to_dict() for t in turns]
        stops = self.stops(request)
        if stops:
            body["stop_sequences"] = stops
        body.update(request.sampling.over(self.endpoint.options, _SAMPLING))
        without_refused(body, self.quirks)
        return self.json_call(
            self._url("/messages"), body, {"Accept": "text/event-stream", **self._headers()}
        )

    def adapt(self, failure: Failure) -> str | None:
        # Newer Claude models refuse `temperature`, `top_p` and `top_k` (or two of them together).
        return refused_sampling(failure, self.quirks) or super().adapt(failure)

    def _url(self, route: str) -> str:
        base = self.endpoint.base_url
        return base + route if base.endswith("/v1") else base + "/v1" + route

    def new_decoder(self) -> Decoder:
        return _AnthropicDecoder(self.place, self.endpoint.api_key)

    def models_call(self) -> HTTPCall:
        return HTTPCall(
            "GET", self._url("/models?limit=1000"), {"Accept": "application/json", **self._headers()}
        )

    def parse_models(self, document: Any) -> list[str]:
        entries = document.get("data") if isinstance(document, dict) else None
        return sorted(str(e.get("id")) for e in entries or () if isinstance(e, dict) and e.get("id"))
