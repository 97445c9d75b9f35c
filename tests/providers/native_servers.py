"""Loopback servers for the native wire formats: Ollama (NDJSON), llama.cpp `/completion`, Anthropic, Gemini."""

from __future__ import annotations

import json
from typing import Any, Iterator

from tests.providers.servers import (
    FILLER,
    Completion,
    Hang,
    HTTPError,
    LoopbackServer,
    RecordedRequest,
    Reply,
    pieces,
    sse,
)
from tests.providers.toy_tokenizer import detokenize, server_tokens, tokenize_answer


def _ndjson(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8") + b"\n"


class OllamaServer(LoopbackServer):
    """Ollama `POST /api/chat` and `/api/generate` (NDJSON, `done: true` last) and `GET /api/tags`."""

    content_type = "application/x-ndjson"

    def is_generation(self, method: str, path: str) -> bool:
        return method == "POST" and path in ("/api/chat", "/api/generate")

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.path == "/api/tags":
            return 200, {
                "models": [
                    {
                        "name": m,
                        "model": m,
                        "size": 2019393189,
                        "digest": "a80c4f17acd5",
                        "details": {"family": "llama", "parameter_size": "3.2B"},
                    }
                    for m in self.models
                ]
            }
        return 404, "404 page not found"

    def stops_of(self, body: Any) -> list[str]:
        return list(((body or {}).get("options") or {}).get("stop") or [])

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        body = request.body or {}
        chat = request.path == "/api/chat"
        text, _ = self.visible(completion, request)
        head = {"model": body.get("model", "llama3.2"), "created_at": "2024-07-22T20:33:28.123648Z"}

        def line(content: str = "", thinking: str = "") -> bytes:
            if chat:
                message: dict[str, Any] = {"role": "assistant", "content": content}
                if thinking:
                    message["thinking"] = thinking
                return _ndjson({**head, "message": message, "done": False})
            extra = {"thinking": thinking} if thinking else {}
            return _ndjson({**head, "response": content, **extra, "done": False})

        for piece in pieces(completion.reasoning):
            yield line(thinking=piece)
        count = 0
        for piece in pieces(text):
            count += 1
            yield line(piece)
        if completion.endless:
            while True:
                yield from (line(p) for p in pieces(FILLER))
        if completion.error_after is not None:
            yield _ndjson(dict(completion.error_after))
            return
        final = {
            **head,
            "done": True,
            "done_reason": completion.finish or "stop",
            "total_duration": 4883583458,
            "load_duration": 1334875,
            "prompt_eval_count": completion.prompt_tokens,
            "prompt_eval_duration": 342546000,
            "eval_count": count,
            "eval_duration": 4535599000,
        }
        final.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
        yield _ndjson(final)


class LlamaCppServer(LoopbackServer):
    """llama-server `POST /completion` (SSE, `stop: true` last, no `[DONE]`), `/apply-template`, `/v1/models`.

    `error_style="field"` sends mid-stream errors as old servers did (`error: {...}`), else as `data: {"error"...}`.
    `template` is what `/apply-template` does with the messages; None makes the route 404 (older servers).
    `loading` answers that many `/apply-template` calls with 503 "Loading model", as llama-server does while it
    loads the model. `tokenize` serves `POST /tokenize` with the toy tokenizer (`tests.providers.toy_tokenizer`);
    False makes it 404. A `/completion` prompt is read as llama-server reads it (`prompt_ids`), and one it would
    not read as one prompt is answered 400. `hang_on` names a helper route that never answers.
    """

    def __init__(
        self, *args: Any, error_style: str = "data", template: bool = True, loading: int = 0, tokenize: bool = True,
        hang_on: str | None = None, **kwargs: Any,
    ) -> None:
        self.error_style, self.template, self.loading, self.tokenize = error_style, template, loading, tokenize
        self.hang_on = hang_on
        super().__init__(*args, **kwargs)

    def _record(self, request: RecordedRequest) -> Reply | None:
        reply = super()._record(request)
        return Hang() if reply is None and request.path == self.hang_on else reply

    @staticmethod
    def prompt_ids(request: RecordedRequest) -> list[int]:
        """The ids the server reads from a `/completion` request's prompt."""
        return server_tokens((request.body or {}).get("prompt"))

    @classmethod
    def prompt_text(cls, request: RecordedRequest) -> str:
        """The prompt the model sees, as text (control tokens spelled as they read)."""
        return detokenize(cls.prompt_ids(request))

    def rejection(self, request: RecordedRequest) -> HTTPError | None:
        try:
            self.prompt_ids(request)
        except ValueError as error:
            return HTTPError(400, {"error": {"code": 400, "message": str(error), "type": "invalid_request_error"}})
        return None

    def is_generation(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/completion"

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.path == "/apply-template" and self.loading > 0:
            self.loading -= 1
            return 503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        if request.path == "/apply-template" and self.template:
            messages = (request.body or {}).get("messages") or []
            rendered = "".join(f"[{m['role']}]{m['content']}\n" for m in messages) + "[assistant]"
            return 200, {"prompt": rendered}
        if request.path == "/tokenize" and request.method == "POST" and self.tokenize:
            return tokenize_answer(request.body)
        if request.path == "/v1/models":
            return 200, {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "llamacpp"} for m in self.models],
            }
        return 404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}

    def stops_of(self, body: Any) -> list[str]:
        return list((body or {}).get("stop") or [])

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        body = request.body or {}
        text, hit = self.visible(completion, request)
        count = 0
        yield b": ping\n\n"
        for piece in pieces(text):
            count += 1
            yield sse(
                {
                    "index": 0,
                    "content": piece,
                    "tokens": [count],
                    "stop": False,
                    "id_slot": 0,
                    "tokens_predicted": count,
                    "tokens_evaluated": completion.prompt_tokens,
                }
            )
        if completion.endless:
            while True:
                yield from (sse({"index": 0, "content": p, "stop": False}) for p in pieces(FILLER))
        if completion.error_after is not None:
            payload = dict(completion.error_after)
            inner = json.dumps(payload.get("error", payload)).encode()
            yield (b"error: " + inner + b"\n\n") if self.error_style == "field" else sse(payload)
            return
        stop_type = completion.finish or ("word" if hit else "eos")
        yield sse(
            {
                "index": 0,
                "content": "",
                "tokens": [],
                "id_slot": 0,
                "stop": True,
                "model": "test.gguf",
                "tokens_predicted": count,
                "tokens_evaluated": completion.prompt_tokens,
                "generation_settings": {"n_predict": body.get("n_predict", -1)},
                "prompt": body.get("prompt", ""),
                "has_new_line": "\n" in text,
                "truncated": False,
                "stop_type": stop_type,
                "stopping_word": hit or "",
                "tokens_cached": completion.prompt_tokens + count,
                "timings": {
                    "prompt_n": completion.prompt_tokens,
                    "prompt_ms": 12.5,
                    "predicted_n": count,
                    "predicted_ms": 80.1,
                },
            }
        )


class AnthropicServer(LoopbackServer):
    """Anthropic `POST /v1/messages` (named SSE events, `ping`s, `message_stop` last) and `GET /v1/models`."""

    def is_generation(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/v1/messages"

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.path == "/v1/models":
            return 200, {
                "data": [{"type": "model", "id": m, "display_name": m} for m in self.models],
                "has_more": False,
            }
        return 404, {"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}

    def stops_of(self, body: Any) -> list[str]:
        return list((body or {}).get("stop_sequences") or [])

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        body = request.body or {}
        text, hit = self.visible(completion, request)
        message = {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body.get("model", "claude-test"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": completion.prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 3,
                "output_tokens": 1,
            },
        }
        yield sse({"type": "message_start", "message": message}, event="message_start")
        index = 0
        if completion.reasoning:
            yield sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                },
                event="content_block_start",
            )
            for piece in pieces(completion.reasoning):
                yield sse(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    },
                    event="content_block_delta",
                )
            yield sse({"type": "content_block_stop", "index": 0}, event="content_block_stop")
            index = 1
        yield sse(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            event="content_block_start",
        )
        yield sse({"type": "ping"}, event="ping")
        count = 0
        for piece in pieces(text):
            count += 1
            yield sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
                event="content_block_delta",
            )
        if completion.endless:
            while True:
                yield from (
                    sse(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": p},
                        },
                        event="content_block_delta",
                    )
                    for p in pieces(FILLER)
                )
        if completion.error_after is not None:
            yield sse(dict(completion.error_after), event="error")
            return
        yield sse({"type": "content_block_stop", "index": index}, event="content_block_stop")
        reason = completion.finish or ("stop_sequence" if hit else "end_turn")
        yield sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": hit},
                "usage": {"output_tokens": count},
            },
            event="message_delta",
        )
        yield sse({"type": "message_stop"}, event="message_stop")


class GeminiServer(LoopbackServer):
    """Gemini `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (CRLF events, no end marker)."""

    def is_generation(self, method: str, path: str) -> bool:
        return (
            method == "POST"
            and path.startswith("/v1beta/models/")
            and path.endswith(":streamGenerateContent")
        )

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.path == "/v1beta/models":
            models = [
                {"name": f"models/{m}", "supportedGenerationMethods": ["generateContent", "countTokens"]}
                for m in self.models
            ]
            models.append({"name": "models/embedding-001", "supportedGenerationMethods": ["embedContent"]})
            return 200, {"models": models}
        return 404, {"error": {"code": 404, "message": "Not Found", "status": "NOT_FOUND"}}

    def stops_of(self, body: Any) -> list[str]:
        return list(((body or {}).get("generationConfig") or {}).get("stopSequences") or [])

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        text, _ = self.visible(completion, request)
        parts = pieces(text)

        def event(
            parts_: list[dict[str, Any]], finish: str | None = None, candidates: int | None = None
        ) -> bytes:
            candidate: dict[str, Any] = {"content": {"parts": parts_, "role": "model"}, "index": 0}
            if finish:
                candidate["finishReason"] = finish
            usage: dict[str, Any] = {"promptTokenCount": completion.prompt_tokens, "totalTokenCount": 0}
            if candidates is not None:
                usage["candidatesTokenCount"] = candidates
            return sse(
                {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-test"}, crlf=True
            )

        for piece in pieces(completion.reasoning):
            yield event([{"text": piece, "thought": True}])
        for i, piece in enumerate(parts):
            last = i == len(parts) - 1 and not completion.endless and completion.error_after is None
            yield event(
                [{"text": piece}],
                (completion.finish or "STOP") if last else None,
                len(parts) if last else None,
            )
        if not parts and completion.error_after is None:
            yield event([{"text": ""}], completion.finish or "STOP", 0)
        if completion.endless:
            while True:
                yield from (event([{"text": p}]) for p in pieces(FILLER))
        if completion.error_after is not None:
            yield sse(dict(completion.error_after), crlf=True)
