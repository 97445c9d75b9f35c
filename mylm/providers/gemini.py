"""Google Gemini `streamGenerateContent?alt=sse` in plain-text mode (the key in a header, never the URL)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

from ..core.errors import StreamError
from ..llm import LLMChunk, LLMRequest
from .base import merge_turns
from .decoder import Decoder, text_chunks, usage_of
from .engine import HTTPProvider
from .framing import SSEEvent, sse_json
from .transport import HTTPCall

#: Request fields outside `generationConfig`; every other option is a generation setting.
_TOP_LEVEL = frozenset({"safetySettings", "cachedContent", "toolConfig", "labels"})
#: The sampling options under their `generationConfig` names.
_SAMPLING = {"temperature": "temperature", "top_p": "topP", "top_k": "topK", "seed": "seed",
             "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty"}


class _GeminiDecoder(Decoder):
    """`data: {GenerateContentResponse}` events and no end marker: the stream just closes."""

    def feed(self, item: SSEEvent) -> Iterator[LLMChunk]:
        for obj in sse_json(item):
            self.fail_on_error(obj)
            if not isinstance(obj, dict):
                continue
            blocked = (obj.get("promptFeedback") or {}).get("blockReason")
            if blocked and not obj.get("candidates"):
                error = StreamError(f"Gemini refused the prompt ({blocked})")
                error.retryable = False
                raise error
            meta = obj.get("usageMetadata")
            if isinstance(meta, dict):
                # Thinking tokens are billed as output but counted apart.
                output = (meta.get("candidatesTokenCount") or 0) + (meta.get("thoughtsTokenCount") or 0)
                self.usage = usage_of(meta.get("promptTokenCount"), output)
            for candidate in (obj.get("candidates") or ())[:1]:
                for part in (candidate.get("content") or {}).get("parts") or ():
                    text = part.get("text")
                    yield from text_chunks(None, text) if part.get("thought") else text_chunks(text)
                if candidate.get("finishReason"):
                    self.reason = str(candidate["finishReason"]).lower()

    def complete_at_eof(self) -> bool:
        # No [DONE]: a finish reason in the last event is what says the answer is whole.
        return self.reason is not None


class Gemini(HTTPProvider):
    """`POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`; the assistant role is `model`."""

    name = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com"
    key_vars = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    #: Gemini accepts at most five stop sequences.
    max_stops = 5
    requires_model = True

    @classmethod
    def claims(cls, base_url: str) -> bool:
        # Google's OpenAI-compatible layer lives under `/openai` on the same host.
        parts = urlsplit(base_url)
        host = (parts.hostname or "").lower()
        return host == "generativelanguage.googleapis.com" and "/openai" not in parts.path

    def _root(self) -> str:
        base = self.endpoint.base_url
        return base if base.rsplit("/", 1)[-1] in ("v1", "v1beta", "v1alpha") else base + "/v1beta"

    def _headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.endpoint.api_key} if self.endpoint.api_key else {}

    def build_call(self, request: LLMRequest) -> HTTPCall:
        system, turns = merge_turns(request.messages)
        config: dict[str, Any] = {"maxOutputTokens": self.max_tokens(request)}
        stops = self.stops(request)
        if stops:
            config["stopSequences"] = stops
        body: dict[str, Any] = {
            "contents": [
                {"role": "model" if t.role == "assistant" else "user", "parts": [{"text": t.content}]}
                for t in turns
            ],
        }
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        for key, value in request.sampling.over(self.endpoint.options, _SAMPLING).items():
            if key in _TOP_LEVEL:
                body[key] = value
            else:
                config[key] = value
        body["generationConfig"] = config
        model = quote((self.endpoint.model or "").removeprefix("models/"), safe="-._")
        url = f"{self._root()}/models/{model}:streamGenerateContent?alt=sse"
        return self.json_call(url, body, {"Accept": "text/event-stream", **self._headers()})

    def new_decoder(self) -> Decoder:
        return _GeminiDecoder(self.place, self.endpoint.api_key)

    def models_call(self) -> HTTPCall:
        return HTTPCall(
            "GET", self._root() + "/models?pageSize=1000", {"Accept": "application/json", **self._headers()}
        )

    def parse_models(self, document: Any) -> list[str]:
        entries = document.get("models") if isinstance(document, dict) else None
        names = []
        for entry in entries or ():
            methods = entry.get("supportedGenerationMethods") if isinstance(entry, dict) else None
            if (
                isinstance(entry, dict)
                and entry.get("name")
                and (methods is None or "generateContent" in methods)
            ):
                names.append(str(entry["name"]).removeprefix("models/"))
        return sorted(names)
