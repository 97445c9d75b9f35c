"""`MYLM_SCRIPTED_LLM=script.json`: run the real CLI against `mylm.testing.ScriptedLLM` (for CLI tests).

The file holds a list of replies, or `{"replies": [...], "chunk_size": 7, "stops": "honour"}`. A reply is a
string (the completion), or an object with any of:

- `text`, `reasoning`, `finish_reason`, `chunks`: as in `ScriptedReply`;
- `error` + `message` (+ `status`): raise that `mylm.core.errors` class instead of replying;
- `gate`: a path (a FIFO) to read one line from before replying, so a test decides when the model "answers";
- `hold`: true to keep the stream open after the text until the run is cancelled (Ctrl-C), like a slow model;
- `expect`: text the request's messages must hold (else an LLMError says so), so a test sees what the model was
  sent (a continued conversation's earlier turns).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import errors
from ..core.errors import ConfigError, LLMError, MylmError
from ..llm import FinishChunk, LLMChunk, LLMRequest
from ..testing import ScriptedLLM, ScriptedReply, ScriptExhaustedError, ScriptItem


class ScriptedCLIModel:
    """A `ScriptedLLM` plus the controls only a separate process needs (wait on a gate, hold until cancelled)."""

    def __init__(self, llm: ScriptedLLM, controls: Sequence[Mapping[str, Any]]) -> None:
        self.llm = llm
        self.controls = controls

    def stream(self, request: LLMRequest) -> Iterator[LLMChunk]:
        """Replay the next reply, honouring its gate and hold."""
        control = self.controls[len(self.llm.requests)] if len(self.llm.requests) < len(self.controls) else {}
        expected = control.get("expect")
        if expected and not any(str(expected) in message.content for message in request.messages):
            raise LLMError(f"the scripted model expected {expected!r} in its prompt, and it was not there")
        if control.get("gate"):
            with open(control["gate"], encoding="utf-8") as gate:
                gate.readline()
        try:
            chunks = self.llm.stream(request)
        except ScriptExhaustedError as error:
            raise LLMError(f"the scripted model has no reply left ({error})") from None
        return self._relay(chunks, request, bool(control.get("hold")))

    def _relay(self, chunks: Iterator[LLMChunk], request: LLMRequest, hold: bool) -> Iterator[LLMChunk]:
        try:
            for chunk in chunks:
                if isinstance(chunk, FinishChunk) and hold:
                    _hold(request)
                yield chunk
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()


def _hold(request: LLMRequest) -> None:
    cancel = request.cancel
    if cancel is None:
        raise ConfigError("a scripted reply with hold needs a cancellable request")
    while not cancel.wait(3600):
        pass
    cancel.raise_if_cancelled()


def load_script(path: Path) -> ScriptedCLIModel:
    """Build the scripted model described by the JSON file at `path`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"MYLM_SCRIPTED_LLM: cannot read {path}: {error}") from None
    options: Mapping[str, Any] = data if isinstance(data, dict) else {"replies": data}
    replies = options.get("replies")
    if not isinstance(replies, list):
        raise ConfigError(f"MYLM_SCRIPTED_LLM: {path} must hold a list of replies")
    items = [_item(reply, path) for reply in replies]
    controls = [reply if isinstance(reply, dict) else {} for reply in replies]
    llm = ScriptedLLM(items, chunk_size=int(options.get("chunk_size", 7)), stops=options.get("stops", "honour"))
    return ScriptedCLIModel(llm, controls)


def _item(reply: Any, path: Path) -> ScriptItem:
    if isinstance(reply, str):
        return reply
    if not isinstance(reply, dict):
        raise ConfigError(f"MYLM_SCRIPTED_LLM: {path}: a reply is a string or an object, not {reply!r}")
    if "error" in reply:
        kind = getattr(errors, str(reply["error"]), None)
        if not (isinstance(kind, type) and issubclass(kind, MylmError)):
            raise ConfigError(
                f"MYLM_SCRIPTED_LLM: {path}: {reply['error']!r} is not an error in mylm.core.errors"
            )
        message = str(reply.get("message", reply["error"]))
        if issubclass(kind, errors.HTTPStatusError):
            return kind(message, status=int(reply.get("status", 500)))
        return kind(message)
    return ScriptedReply(
        text=str(reply.get("text", "")),
        chunks=reply.get("chunks"),
        reasoning=str(reply.get("reasoning", "")),
        finish_reason=reply.get("finish_reason"),
    )
