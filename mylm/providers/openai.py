"""OpenAI-compatible `/chat/completions` and legacy `/completions` over SSE (OpenAI, vLLM, LM Studio, ...)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..core.types import Message
from ..llm import Constraint, LLMChunk, LLMRequest, TextChunk, ToolCallChunk
from .base import model_rejects_stop, refused_sampling, strip_route, without_refused
from .decoder import Decoder, text_chunks, usage_of
from .engine import HTTPProvider, RawJSON, bearer, dumps_compact, encoded_grammar
from .failures import Failure
from .framing import SSEEvent, SSEReader, _raw_decode, lines_of, sse_json
from .servertokens import Prompted, ServerTokenizer, prompted, refused_tokens
from .transport import CallGuard, HTTPCall

#: The C string scanner json's decoder reads every string literal with (`strict`: control characters refused).
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
#: Events one stream may be read alone to learn its shape (`_ContentShape`); the rest go in batches.
_LEARNING = 8
#: The key of a content delta, with its string's opening quote, as servers write it (compact JSON).
_CONTENT = '"content":"'


@dataclass(frozen=True)
class _ContentShape:
    """The bytes around the content string of a stream's plain text events: `prefix`, up to and with the
    string's opening quote, and `suffix`, after its closing quote.

    A server repeats one event, byte for byte, but for the text: `{"id":...,"choices":[{"index":0,"delta":
    {"content":"TEXT"},...}]}`. An event that is `prefix` + one JSON string literal + `suffix` decodes to the
    event the shape was learned from with only the content changed (JSON reads left to right: the same bytes
    before the literal leave the decoder in the same place, a literal's end is its own closing quote, and the
    same bytes after it read the same way), so its one chunk is the text's, with no decoding of the rest; the
    shape was proven on two other literals when it was learned (`_shape_of`). Decoding the whole event was a
    sixth of the server's CPU per streamed reply (scripts/bench_serve.py)."""

    prefix: str
    suffix: str

    def text(self, data: str) -> str | None:
        """The content `data` carries if it has this shape, else None."""
        if not (data.startswith(self.prefix) and data.endswith(self.suffix)):
            return None
        try:
            value, end = _scanstring(data, len(self.prefix), True)
        except ValueError:
            return None
        return value if end == len(data) - len(self.suffix) else None


def _plain_text(obj: Any) -> bool:
    """Whether `_OpenAIDecoder._object` reads nothing from `obj` but its content string (a text chunk, if the
    string is not empty): no error, no usage, one choice 0 with no finish and a delta of content (and role)."""
    if type(obj) is not dict or "error" in obj or obj.get("object") == "error" or obj.get("type") == "error":
        return False
    choices = obj.get("choices")
    if obj.get("usage") is not None or type(choices) is not list or len(choices) != 1:
        return False
    choice = choices[0]
    if type(choice) is not dict or not choice.keys() <= {"index", "delta", "finish_reason", "logprobs"}:
        return False
    delta = choice.get("delta")
    return (choice.get("index", 0) == 0 and not choice.get("finish_reason") and type(delta) is dict
            and delta.keys() <= {"content", "role"} and type(delta.get("content")) is str)


def _with_content(obj: dict[str, Any], content: str) -> dict[str, Any]:
    """`obj` (one that `_plain_text` accepts) with another content string."""
    choice = obj["choices"][0]
    return {**obj, "choices": [{**choice, "delta": {**choice["delta"], "content": content}}]}


def _shape_of(data: str, obj: Any) -> _ContentShape | None:
    """The shape of the plain text event `data` (which decoded to `obj`), if its content string can be found
    and proven to be the one that changes: the same bytes with another string there decode to `obj` with just
    its content changed to it.

    One other string proves it as well as two would: the bytes around a string literal are read the same way
    whatever the literal holds (JSON reads left to right, and a literal ends at its own closing quote), so the
    event with any literal there decodes to `obj` with that one string replaced; a string other than the
    content that comes out as the content shows that string is the content (`obj` with any other string
    replaced, or with a repeated key's earlier value replaced, keeps its content). The proof's string must
    differ from the content (else any place would pass): of the two `_PROOFS`, the first that does."""
    if not _plain_text(obj):
        return None
    content = obj["choices"][0]["delta"]["content"]
    at = data.find(_CONTENT)
    for _ in range(4):  # a few places at most: a hostile server's event is not searched at length
        if at < 0:
            return None
        start = at + len(_CONTENT)
        try:
            value, end = _scanstring(data, start, True)
        except ValueError:
            value, end = None, -1
        if value == content:
            shape = _ContentShape(data[:start], data[end:])
            literal, text = _PROOFS[0] if _PROOFS[0][1] != content else _PROOFS[1]
            if _decodes_to(shape, literal, _with_content(obj, text)):
                return shape
        at = data.find(_CONTENT, at + 1)
    return None


#: The literals a shape is proven with, and their strings: two that differ, so that one differs from the content.
_PROOFS = (('"\\u00e9\\"x"', '\u00e9"x'), ('"y\\n"', "y\n"))


def _decodes_to(shape: _ContentShape, literal: str, expected: Any) -> bool:
    data = shape.prefix + literal[1:] + shape.suffix  # the prefix holds the opening quote
    try:
        value, end = _raw_decode(data)
    except (ValueError, RecursionError):
        return False
    return end == len(data) and bool(value == expected) and shape.text(data) == expected["choices"][0]["delta"][
        "content"]


class _OpenAIDecoder(Decoder):
    """Chunks from `chat.completion.chunk` or `text_completion` events; the usage chunk follows the finish."""

    #: `feed_text` can stop after a read's leading run of text events (`lead`).
    reads_lead = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The shape of this stream's plain text events, once learned from one of them.
        self.shape: _ContentShape | None = None
        self._learning = _LEARNING

    def feed(self, item: SSEEvent) -> list[LLMChunk]:
        # Lists, not generators, here and in `_object`: this runs once per token (scripts/bench_serve.py).
        data = item.data
        if item.event == "error":
            self.fail_on_error(sse_json(item)[0] if data.strip() else {"error": "unknown error"})
        if data[:1] != "{" and data.strip() == "[DONE]":
            self.done = True
            return []
        chunks: list[LLMChunk] = []
        for obj in sse_json(item):
            self._object(obj, chunks)
        return chunks

    def feed_all(self, items: list[SSEEvent], out: list[LLMChunk]) -> None:
        """`feed` for the events of one read. An event of the stream's plain text shape (`_ContentShape`, learned
        from one of the first such events) gives its text from its content string alone, a run of them one text
        chunk (the chunks are `feed`'s once adjacent text chunks are joined, as `_coalesced` joins them); the
        others are decoded in batches (`_batch`)."""
        shape = self.shape
        start, count = 0, len(items)
        while start < count:
            if shape is not None:
                # `shape.text` inlined: this loop runs once per token, and the call was a third of it.
                texts: list[str] = []
                prefix, suffix, at, after = shape.prefix, shape.suffix, len(shape.prefix), len(shape.suffix)
                while start < count:
                    event, data = items[start]
                    if event == "error" or not (data.startswith(prefix) and data.endswith(suffix)):
                        break
                    try:
                        text, end = _scanstring(data, at, True)
                    except ValueError:
                        break
                    if end != len(data) - after:
                        break
                    texts.append(text)
                    start += 1
                joined = "".join(texts)
                if joined:
                    # A run of text events is one chunk: the caller joins adjacent text chunks anyway
                    # (`_coalesced`), and a chunk per event cost as much as reading the event.
                    out.append(TextChunk(joined))
                if start == count:
                    return
            if self._learning > 0:
                # Read alone, so the events after it may take its shape (a reply often comes in one read).
                self._learning -= 1
                self._learn(items[start], out)
                if self.done:
                    return
                shape = self.shape
                start += 1
                continue
            end = start + 1
            while end < count and (shape is None or items[end].event == "error"
                                   or shape.text(items[end].data) is None):
                end += 1
            self._batch(items[start:end], out)
            if self.done:
                return
            start = end

    def feed_text(self, text: str, reader: SSEReader, out: list[LLMChunk], *, lead: bool = False) -> int:
        """`feed_all` for the events of the lines `text` holds (a read's, `LineSplitter.feed_text`), read by
        `reader`. Once the stream's shape is known, a run of its plain text events (`data: ` and the event on one
        line, then a blank line, from where no event is under way) is read straight from the text: each content
        string by json's C scanner in place, with no line split, no event made and no event matched apart (an
        event cost about 1 µs that way, a third of it now; scripts/bench_serve.py). The run is what `feed_all`
        reads from those events (`_ContentShape.text`: the same prefix, one string literal, the same suffix, the
        line's end); everything else, and a text with CR line ends, goes through `reader` and `feed_all`.

        Returns how much of `text` was read: all of it, unless `lead`, which stops after a run that gave a chunk
        and did not end the text (at the start of the event after it, where no event is under way); the rest is
        read by feeding it again (`HTTPProvider._decode` passes the run's text on first)."""
        pos, count = 0, len(text)
        if not count:  # one blank line (it may end an event under way)
            self.feed_all(reader.feed([""]), out)
            return 0
        # A blank line the loop passes over at the text's end (after a run, or after lines up to a blank line)
        # would change nothing: no event is under way there.
        plain = "\r" not in text
        while pos < count:
            shape = self.shape
            if shape is not None and plain and reader.clean:
                before, pos = len(out), self._run(text, pos, shape, out)
                if pos >= count:
                    return count
                if lead and len(out) > before:  # a run of empty contents gives no chunk: read on
                    return pos
            # Lines up to the next place a run may begin (the line after a blank one), or every line left.
            if shape is None:
                found = text.find("\n\n", pos) if self._learning > 0 else -1
            else:
                found = text.find("\n\ndata: " + shape.prefix, pos)
            stop = count if found < 0 else found + 2
            self.feed_all(reader.feed(lines_of(text[pos:stop - 1] if found >= 0 else text[pos:])), out)
            if self.done:
                return count
            pos = stop
        return count

    @staticmethod
    def _run(text: str, pos: int, shape: _ContentShape, out: list[LLMChunk]) -> int:
        """Reads the run of plain text events of `shape` that begins at `pos` in `text` (its text one chunk, if
        not empty); where the run ends."""
        head, suffix = "data: " + shape.prefix, shape.suffix
        skip, after, count = len(head), len(shape.suffix), len(text)
        texts: list[str] = []
        while text.startswith(head, pos):
            try:
                value, end = _scanstring(text, pos + skip, True)
            except ValueError:
                break
            if not text.startswith(suffix, end):
                break
            end += after
            # The event's line ends there, and a blank line follows (the text's last line, or one ended too).
            if text.startswith("\n\n", end):
                end += 2
            elif end + 1 == count and text[end] == "\n":
                end = count
            else:
                break
            texts.append(value)
            pos = end
        joined = "".join(texts)
        if joined:
            out.append(TextChunk(joined))
        return pos

    def _learn(self, item: SSEEvent, out: list[LLMChunk]) -> None:
        """`feed` for `item`, then its shape learnt from the object it decoded to, if it is plain text."""
        data = item.data
        if item.event == "error" or data[:1] != "{":
            self._batch([item], out)
            return
        try:
            obj, end = _raw_decode(data)
        except (ValueError, RecursionError):
            end = -1
        if end != len(data):
            self._batch([item], out)  # `feed` judges it (whitespace after it, two objects, an error)
            return
        self._object(obj, out)  # what `feed` does with an event that is one JSON object
        self.shape = _shape_of(data, obj) or self.shape

    def _batch(self, items: list[SSEEvent], out: list[LLMChunk]) -> None:
        """`feed` for `items`, with their JSON decoded in one pass where they are plain objects (nearly always):
        one scan of `[a,b,...]` reuses the keys it has met and spares a call chain per event, about a fifth of a
        streamed token's cost in the server (scripts/bench_serve.py). Anything else, and any doubt, takes `feed`,
        event by event, so every event is read exactly as `feed` reads it."""
        plain = 0
        for item in items:
            if item.event == "error" or item.data[:1] != "{":
                break
            plain += 1
        objects = _decoded([item.data for item in items[:plain]]) if plain > 1 else None
        if objects is None:
            plain = 0
        for obj in objects or ():
            self._object(obj, out)
        for item in items[plain:]:
            out.extend(self.feed(item))
            if self.done:
                return

    def whole(self, document: Any) -> Iterable[LLMChunk]:
        # A server that ignored `stream: true` sends one `chat.completion`; its `message` reads like a delta.
        chunks: list[LLMChunk] = []
        self._object(document, chunks)
        return chunks

    def _object(self, obj: Any, out: list[LLMChunk]) -> None:
        """Appends the chunks of one `chat.completion.chunk` (or `text_completion`) object to `out`.

        Runs once per token: the error check is `fail_on_error`'s, inlined, and the common delta (content only)
        appends its chunk directly; every field is still read exactly as before.
        """
        if not isinstance(obj, dict):
            return  # not an error object either (`fail_on_error` looks only at dicts)
        get = obj.get
        if "error" in obj or get("object") == "error" or get("type") == "error":
            self.fail_on_error(obj)
        usage = get("usage")
        if usage is not None and isinstance(usage, dict):
            self.usage = usage_of(usage.get("prompt_tokens"), usage.get("completion_tokens")) or self.usage
        for choice in get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            field = choice.get
            delta = field("delta") or field("message") or {}
            if isinstance(delta, dict):
                # llama.cpp, vLLM and DeepSeek send `reasoning_content`; Ollama, OpenRouter `reasoning`.
                thought = delta.get("reasoning_content") or delta.get("reasoning")
                content = delta.get("content")
                if thought:
                    out += text_chunks(content, thought)
                elif content and isinstance(content, str):
                    out.append(TextChunk(content))
                calls = delta.get("tool_calls")
                if calls is not None:
                    out += _call_pieces(calls)
            text = field("text")
            if text is not None:
                out += text_chunks(text)
            finish = field("finish_reason")
            if finish:
                self.reason = str(finish).lower()
            # vLLM names the stop string that fired.
            stop = field("stop_reason")
            if isinstance(stop, str):
                self.stop_sequence = stop


def _decoded(datas: list[str]) -> list[Any] | None:
    """The JSON value of each of `datas`, decoded as one array; None unless that gives one value per data (a
    data holding two objects, a nesting at the limit, anything not JSON: `feed` judges each on its own)."""
    try:
        joined = "[" + ",".join(datas) + "]"
        values, end = _raw_decode(joined)
    except (ValueError, RecursionError):
        return None
    whole = end == len(joined) and isinstance(values, list) and len(values) == len(datas)
    return values if whole else None


def _call_pieces(calls: Any) -> Iterator[ToolCallChunk]:
    """Native tool-call deltas (`tool_calls[i]`), by index; a whole message's calls (no index) by position."""
    if not isinstance(calls, list):
        return
    for position, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        index = call.get("index", position)
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        name, arguments, ident = function.get("name"), function.get("arguments"), call.get("id")
        if isinstance(arguments, (dict, list)):
            arguments = json.dumps(arguments, ensure_ascii=False)  # Ollama sends an object, not JSON text
        yield ToolCallChunk(
            index if isinstance(index, int) and not isinstance(index, bool) else position,
            ident if isinstance(ident, str) and ident else None,
            name if isinstance(name, str) and name else None,
            arguments if isinstance(arguments, str) else "",
        )


class OpenAIChat(HTTPProvider):
    """`POST {base}/chat/completions`: the server applies the model's chat template to mylm's messages."""

    name = "openai"
    default_base_url = "https://api.openai.com/v1"
    key_vars = ("OPENAI_API_KEY",)
    grammar_support = "compatible"
    route_suffixes = ("/chat/completions", "/completions")
    #: OpenAI accepts at most four stop strings.
    max_stops = 4
    route = "/chat/completions"
    native_tools = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The last call's messages and each one's JSON (`_messages_json`).
        self._kept_messages: tuple[tuple[Message, ...], list[str]] = ((), [])
        if model_rejects_stop(self.endpoint.model):
            self.quirks.add("no_stop")
        # OpenAI itself wants the newer field name; compatible servers mostly know only `max_tokens`.
        if (urlsplit(self.endpoint.base_url).hostname or "") == "api.openai.com":
            self.quirks.add("max_completion_tokens")
            # ... and has no grammar field and no `top_k`, `min_p` or `repeat_penalty` (llama.cpp's, vLLM's and
            # LM Studio's extensions): known, so not learned from a refused call.
            self.quirks.update(("no_grammar", "no_top_k", "no_min_p", "no_repeat_penalty"))

    @classmethod
    def normalise_base_url(cls, base_url: str) -> str:
        """A bare `http://host:port` gets `/v1`, where every OpenAI-compatible server serves the API."""
        url = strip_route(base_url, cls.route_suffixes)
        return url + "/v1" if urlsplit(url).path in ("", "/") else url

    def payload(self, request: LLMRequest) -> dict[str, Any]:
        """The body fields that differ between chat and completions."""
        native = request.native
        if native is None:
            return {"messages": self._messages_json(request.messages)}
        body: dict[str, Any] = {"messages": [dict(m) for m in native.messages]}
        if native.tools:
            body.update(tools=[dict(t) for t in native.tools], tool_choice=native.tool_choice)
            if native.parallel is not None:
                body["parallel_tool_calls"] = native.parallel
        return body

    def _messages_json(self, messages: tuple[Message, ...]) -> RawJSON:
        """The messages as the JSON array `json.dumps` makes of their dicts. Each call's conversation is the last
        one's and a turn or two more, so the last call's messages are kept with their JSON (a message is a frozen
        value: an equal one encodes the same) and only the ones after them are encoded."""
        messages = tuple(messages)  # kept: a list the caller changed later would not match its JSON
        kept, encoded = self._kept_messages
        count = len(kept)
        if count <= len(messages) and messages[:count] == kept:
            parts = [*encoded, *(dumps_compact(m.to_dict()) for m in messages[count:])]
        else:
            parts = [dumps_compact(m.to_dict()) for m in messages]
        self._kept_messages = (messages, parts)  # one assignment: a call on another thread sees either pair
        return RawJSON("[" + ",".join(parts) + "]")

    def build_call(self, request: LLMRequest) -> HTTPCall:
        body: dict[str, Any] = {}
        if self.endpoint.model:
            body["model"] = self.endpoint.model
        body.update(self.payload(request))
        body["stream"] = True
        if "no_stream_options" not in self.quirks:
            body["stream_options"] = {"include_usage": True}
        cap = "max_completion_tokens" if "max_completion_tokens" in self.quirks else "max_tokens"
        body[cap] = self.max_tokens(request)
        stops = self.stops(request)
        if stops:
            body["stop"] = stops
        body.update(self.grammar_fields(request))
        # The request's sampling under OpenAI's names, over the configured options (a request's value wins).
        body.update(request.sampling.over(self.endpoint.options))
        without_refused(body, self.quirks)
        return self.json_call(
            self.endpoint.base_url + self.route,
            body,
            {"Accept": "text/event-stream", **bearer(self.endpoint)},
        )

    def grammar_body(self, constraint: Constraint) -> dict[str, Any]:
        """`grammar` for llama.cpp's servers (llama-server, llama-cpp-python); `structured_outputs.grammar`
        for vLLM >= 0.10.2 (the only form from 0.12; vLLM <= 0.11 also read `guided_grammar`, not sent). Each
        server ignores the other's field; one that rejects a field is not sent it again."""
        grammar = encoded_grammar(constraint.grammar)
        body: dict[str, Any] = {"grammar": grammar}
        if "no_structured_outputs" not in self.quirks:
            body["structured_outputs"] = RawJSON(f'{{"grammar":{grammar}}}')
        return body

    def adapt(self, failure: Failure) -> str | None:
        if "no_structured_outputs" not in self.quirks and failure.blames("structured_outputs"):
            return "no_structured_outputs"
        if (
            "max_completion_tokens" not in self.quirks
            and failure.blames("max_tokens")
            and "max_completion_tokens" in failure.message
        ):
            return "max_completion_tokens"
        if "no_stream_options" not in self.quirks and failure.blames("stream_options"):
            return "no_stream_options"
        return refused_sampling(failure, self.quirks) or super().adapt(failure)

    def new_decoder(self) -> Decoder:
        return _OpenAIDecoder(self.place, self.endpoint.api_key)

    def models_call(self) -> HTTPCall:
        return HTTPCall(
            "GET", self.endpoint.base_url + "/models", {"Accept": "application/json", **bearer(self.endpoint)}
        )

    def parse_models(self, document: Any) -> list[str]:
        entries = document.get("data") if isinstance(document, dict) else None
        # Ollama's OpenAI layer and some gateways answer `{"models": [...]}` instead.
        if entries is None and isinstance(document, dict):
            entries = document.get("models")
        names = [e.get("id") or e.get("name") for e in entries or () if isinstance(e, dict)]
        return sorted(str(n) for n in names if n)


class OpenAICompletions(OpenAIChat):
    """`POST {base}/completions` with a prompt mylm renders itself through a chat format (base models).

    On llama-server (found by its `/tokenize` at the server's root answering in llama.cpp's exact shape) the
    messages' text goes as token ids tokenized without special tokens, as with the `llamacpp` provider; any
    other server (vLLM takes a prompt of ids alone and its `/tokenize` differs) gets the rendered string.
    """

    name = "openai-completions"
    route_suffixes = ("/completions", "/chat/completions")
    route = "/completions"
    raw_prompt = True
    native_tools = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # llama-server serves `/tokenize` beside `/v1`, at its root.
        self.tokenizer = ServerTokenizer(self.endpoint.base_url.removesuffix("/v1") + "/tokenize", probe=True)

    def prepare(self, request: LLMRequest, guard: CallGuard) -> LLMRequest:
        prompt = self.tokenizer.prompt(self, lambda messages: self.prompt(tuple(messages)), request.messages,
                                       guard)
        return prompted(request, prompt)

    def payload(self, request: LLMRequest) -> dict[str, Any]:
        prompt = request.prompt if isinstance(request, Prompted) else self.prompt(request.messages)
        return {"prompt": list(prompt) if isinstance(prompt, tuple) else prompt}

    def adapt(self, failure: Failure) -> str | None:
        return super().adapt(failure) or refused_tokens(failure, self.tokenizer)
