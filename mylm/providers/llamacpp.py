"""llama.cpp's native `POST /completion` (SSE), with the server's own chat template unless a format is set."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..core.errors import StreamError
from ..llm import Constraint, LLMChunk, LLMRequest
from .base import Endpoint
from .decoder import Decoder, text_chunks, usage_of
from .engine import HTTPProvider, StatusFailure, bearer, encoded_grammar
from .failures import Failure, parse_failure
from .formats import DEFAULT_CHAT_FORMAT, chat_format, defused_messages
from .framing import SSEEvent, sse_json
from .servertokens import Prompted, ServerTokenizer, post_json, prompted, refused_tokens
from .transport import CallGuard, HTTPCall

if TYPE_CHECKING:
    from ..core.types import Message


class _NoTemplateRoute(Exception):
    """The server has no `/apply-template` (404)."""


class _LlamaCppDecoder(Decoder):
    """`data: {"content": ..., "stop": false}` events; last: `stop: true`, `stop_type`, `stopping_word`."""

    def feed(self, item: SSEEvent) -> Iterator[LLMChunk]:
        if item.event == "error":
            self.fail_on_error({"error": sse_json(item)[0]})
        for obj in sse_json(item):
            self.fail_on_error(obj)
            if not isinstance(obj, dict):
                continue
            yield from text_chunks(obj.get("content"), obj.get("reasoning_content"))
            if obj.get("stop"):
                self.done = True
                # `eos`, `word` (a stop string fired) or `limit` (n_predict reached).
                self.reason = str(obj.get("stop_type") or "stop").lower()
                self.stop_sequence = obj.get("stopping_word") or None
                timings = obj.get("timings")
                timings = timings if isinstance(timings, dict) else {}
                self.usage = usage_of(
                    timings.get("prompt_n", obj.get("tokens_evaluated")),
                    timings.get("predicted_n", obj.get("tokens_predicted")),
                )


class LlamaCpp(HTTPProvider):
    """llama-server's `/completion`: raw prompt, `n_predict`, `stop` (names `stopping_word`), `cache_prompt`.

    With no `--chat-format`, the conversation is rendered by the server's own template via `/apply-template`,
    so the model's real format is used; a server without that route falls back to ChatML. Either way the
    messages' text is sent as token ids from the server's `/tokenize` without special tokens (`servertokens`).
    """

    name = "llamacpp"
    default_base_url = "http://localhost:8080"
    grammar_support = "native"
    route_suffixes = ("/completion", "/completions", "/v1")

    def __init__(self, endpoint: Endpoint, **kwargs: Any) -> None:
        self.raw_prompt = bool(endpoint.chat_format)
        super().__init__(endpoint, **kwargs)
        self.tokenizer = ServerTokenizer(self.endpoint.base_url + "/tokenize")

    def build_call(self, request: LLMRequest) -> HTTPCall:
        prompt = request.prompt if isinstance(request, Prompted) else self.prompt(request.messages)
        body: dict[str, Any] = {
            # Template text as strings, the messages' text as token ids (see `servertokens`).
            "prompt": list(prompt) if isinstance(prompt, tuple) else prompt,
            "n_predict": self.max_tokens(request),
            "stream": True,
            # agent loops resend a growing prefix: reuse the KV cache for it
            "cache_prompt": True,
        }
        stops = self.stops(request)
        if stops:
            body["stop"] = stops
        body.update(self.grammar_fields(request))
        body.update(request.sampling.over(self.endpoint.options))
        return self.json_call(
            self.endpoint.base_url + "/completion",
            body,
            {"Accept": "text/event-stream", **bearer(self.endpoint)},
        )

    def grammar_body(self, constraint: Constraint) -> dict[str, Any]:
        """A lazy grammar unless the user insisted: the thought stays free and only a call, once `<tool_code>`
        appears, is forced (llama-server: `grammar_triggers` items are `{"type": 1, "value": WORD}`, 1 being
        COMMON_GRAMMAR_TRIGGER_TYPE_WORD; the grammar is fed the text from the trigger on)."""
        lazy = constraint.lazy_grammar and constraint.trigger and "no_lazy" not in self.quirks
        if constraint.required or not lazy:
            return {"grammar": encoded_grammar(constraint.grammar)}
        return {
            "grammar": encoded_grammar(constraint.lazy_grammar),
            "grammar_lazy": True,
            "grammar_triggers": [{"type": 1, "value": constraint.trigger}],
        }

    def adapt(self, failure: Failure) -> str | None:
        # An older llama-server that knows `grammar` but not the lazy fields (or their shape).
        if "no_lazy" not in self.quirks and failure.blames("grammar_lazy", "grammar_triggers"):
            return "no_lazy"
        return super().adapt(failure) or refused_tokens(failure, self.tokenizer)

    def prepare(self, request: LLMRequest, guard: CallGuard) -> LLMRequest:
        """Render the conversation (with the server's template, a cheap local call, or the chat format), and
        have the server tokenize the messages' text as plain text, so none of it can become a control token."""
        try:
            prompt = self.tokenizer.prompt(self, self._renderer(guard), request.messages, guard)
        except _NoTemplateRoute:
            # An older server or a llama.cpp look-alike: render in mylm from now on.
            self.chat_format = chat_format(DEFAULT_CHAT_FORMAT)
            prompt = self.tokenizer.prompt(self, self._renderer(guard), request.messages, guard)
        return prompted(request, prompt)

    def _renderer(self, guard: CallGuard) -> Callable[[list[Message]], str]:
        if self.chat_format is not None:
            return lambda messages: self.prompt(tuple(messages))
        return lambda messages: self._apply_template(messages, guard)

    def _apply_template(self, messages: list[Message], guard: CallGuard) -> str:
        """The server's own template applied to `messages` (special tokens in non-user text defused first)."""
        status, data, headers = post_json(
            self, self.endpoint.base_url + "/apply-template", {"messages": defused_messages(messages)}, guard
        )
        if status == 404:
            raise _NoTemplateRoute
        if status >= 300:
            # A server still loading its model (503), a bad key (401): retried or reported like any call.
            raise StatusFailure(parse_failure(status, data, headers, secret=self.endpoint.api_key))
        try:
            prompt = json.loads(data).get("prompt")
        except (ValueError, AttributeError, RecursionError):
            prompt = None
        if not isinstance(prompt, str):
            error = StreamError(
                f"{self.place.url}/apply-template answered HTTP {status} without a prompt; "
                "set --chat-format to render the prompt in mylm instead"
            )
            error.retryable = False
            raise error
        return prompt

    def new_decoder(self) -> Decoder:
        return _LlamaCppDecoder(self.place, self.endpoint.api_key)

    def models_call(self) -> HTTPCall:
        return HTTPCall(
            "GET",
            self.endpoint.base_url + "/v1/models",
            {"Accept": "application/json", **bearer(self.endpoint)},
        )

    def parse_models(self, document: Any) -> list[str]:
        entries = document.get("data") if isinstance(document, dict) else None
        return sorted(str(e.get("id")) for e in entries or () if isinstance(e, dict) and e.get("id"))
