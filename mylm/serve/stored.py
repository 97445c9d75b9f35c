"""The Responses API's `previous_response_id`: the last responses this server gave, kept in memory (bounded), so
a client can send only what is new (the OpenAI Agents SDK's `previous_response_id=`, LangChain's
`use_previous_response_id`). A response asked to be kept (`store`, true unless the client says false) is kept as
its whole conversation, the reply included; the oldest go first. Nothing is written to disk, and a restarted
server knows none (a 400 `previous_response_not_found`, as OpenAI answers an id it does not have)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence

from .wire import CallIn, CallOut, ChatMessage, Out, said

#: Responses kept per server.
DEFAULT_KEPT = 256


class StoredResponses:
    """The last `kept` conversations by response id (thread-safe; least recently used dropped first)."""

    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self.kept = kept
        self._items: OrderedDict[str, tuple[ChatMessage, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, response_id: str) -> tuple[ChatMessage, ...] | None:
        """The conversation response `response_id` ended (its reply included), or None."""
        with self._lock:
            found = self._items.get(response_id)
            if found is not None:
                self._items.move_to_end(response_id)
            return found

    def put(self, response_id: str, messages: Sequence[ChatMessage], items: Sequence[Out]) -> None:
        """Keep `messages` (the request's, without its instructions) with the reply `items` made."""
        calls = tuple(CallIn(i.id, i.name, _arguments(i.arguments)) for i in items if isinstance(i, CallOut))
        reply = ChatMessage("assistant", said(list(items)), calls=calls)
        kept = tuple(m for m in messages if m.role != "system") + (reply,)
        with self._lock:
            self._items[response_id] = kept
            self._items.move_to_end(response_id)
            while len(self._items) > self.kept:
                self._items.popitem(last=False)


def _arguments(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
