"""The Responses API's `previous_response_id` and Anthropic's threads (`thread`): the last answers this server
gave, kept in memory (bounded), so a client can send only what is new (the OpenAI Agents SDK's
`previous_response_id=`, LangChain's `use_previous_response_id`, the Anthropic SDK's tool runner). A response asked
to be kept (`store`, true unless the client says false) is kept as its whole conversation, the reply included; a
message that creates or continues a thread is kept with its system prompt and tools too (a `continue` sends
neither). The oldest go first. One server process keeps them in memory
(`StoredResponses`); several (`mylm serve --workers N`) share them in a small SQLite file in a private temporary
directory the parent owns (`SharedResponses`), so a follow-up finds its response whichever worker answers it.
Either way a restarted server knows none (a 400 `previous_response_not_found`, as OpenAI answers an id it does
not have)."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from ..agent.step import ToolDefinition
from .wire import CallIn, CallOut, ChatMessage, Out, said

_T = TypeVar("_T")
#: The tables of `SharedResponses` (names put in its SQL: only these two).
_Table = Literal["responses", "threads"]

#: Responses kept per server.
DEFAULT_KEPT = 256
#: Milliseconds a worker waits for another one's write to the shared store (each write takes microseconds).
BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class Thread:
    """An Anthropic thread at one of its replies: the whole conversation, its system prompt and that reply
    included, and the tools it was created with."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolDefinition, ...]


class ResponseStore(Protocol):
    """Where the kept responses and threads live: as `StoredResponses` has them."""

    def get(self, response_id: str) -> tuple[ChatMessage, ...] | None: ...

    def put(self, response_id: str, messages: Sequence[ChatMessage], items: Sequence[Out]) -> None: ...

    def thread(self, message_id: str) -> Thread | None: ...

    def keep_thread(self, message_id: str, messages: Sequence[ChatMessage], items: Sequence[Out],
                    tools: Sequence[ToolDefinition]) -> None: ...


class StoredResponses:
    """The last `kept` conversations by response id, and as many threads by message id (thread-safe; least
    recently used dropped first)."""

    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self.kept = kept
        self._items: OrderedDict[str, tuple[ChatMessage, ...]] = OrderedDict()
        self._threads: OrderedDict[str, Thread] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, response_id: str) -> tuple[ChatMessage, ...] | None:
        """The conversation response `response_id` ended (its reply included), or None."""
        with self._lock:
            return _used(self._items, response_id)

    def put(self, response_id: str, messages: Sequence[ChatMessage], items: Sequence[Out]) -> None:
        """Keep `messages` (the request's, without its instructions) with the reply `items` made."""
        kept = conversation(messages, items)
        with self._lock:
            _keep(self._items, response_id, kept, self.kept)

    def thread(self, message_id: str) -> Thread | None:
        """The thread as message `message_id` left it, or None."""
        with self._lock:
            return _used(self._threads, message_id)

    def keep_thread(self, message_id: str, messages: Sequence[ChatMessage], items: Sequence[Out],
                    tools: Sequence[ToolDefinition]) -> None:
        """Keep the thread `messages` (the system prompt included) and `tools` make with the reply `items` made."""
        kept = Thread(conversation(messages, items, system=True), tuple(tools))
        with self._lock:
            _keep(self._threads, message_id, kept, self.kept)


def _used(kept: OrderedDict[str, _T], key: str) -> _T | None:
    found = kept.get(key)
    if found is not None:
        kept.move_to_end(key)
    return found


def _keep(kept: OrderedDict[str, _T], key: str, value: _T, limit: int) -> None:
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > limit:
        kept.popitem(last=False)


def conversation(messages: Sequence[ChatMessage], items: Sequence[Out], *, system: bool = False
                 ) -> tuple[ChatMessage, ...]:
    """What is kept of a response: the request's messages (without its instructions unless `system`) and the
    reply `items` made."""
    calls = tuple(CallIn(i.id, i.name, _arguments(i.arguments)) for i in items if isinstance(i, CallOut))
    reply = ChatMessage("assistant", said(list(items)), calls=calls)
    return tuple(m for m in messages if system or m.role != "system") + (reply,)


class SharedResponses:
    """The last `kept` conversations (and as many threads) in one SQLite file, shared by the server's worker
    processes.

    The parent creates the file (in a directory only its user can read: the conversations are the clients') and
    switches it to WAL once, before any worker starts: that switch needs the database to itself, and SQLite
    answers "database is locked" at once, without calling the busy handler, when several processes open it
    together. Each worker then opens its own connection on first use (a connection never crosses a fork) and
    waits out another's write (`BUSY_TIMEOUT_MS`). A read marks the response used, so the least recently used
    go first, as in `StoredResponses`."""

    def __init__(self, path: Path, kept: int = DEFAULT_KEPT) -> None:
        self.path = Path(path)
        self.kept = kept
        self._local = threading.local()
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        with _closing(self._open()) as connection:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, used INTEGER NOT NULL, "
                               "messages TEXT NOT NULL)")
            connection.execute("CREATE INDEX IF NOT EXISTS responses_used ON responses (used)")
            # A thread's row: its conversation (`messages`) and tools, one JSON document.
            connection.execute("CREATE TABLE IF NOT EXISTS threads (id TEXT PRIMARY KEY, used INTEGER NOT NULL, "
                               "messages TEXT NOT NULL)")
            connection.execute("CREATE INDEX IF NOT EXISTS threads_used ON threads (used)")

    def get(self, response_id: str) -> tuple[ChatMessage, ...] | None:
        """The conversation response `response_id` ended (its reply included), or None."""
        document = self._read("responses", response_id)
        return None if document is None else tuple(_message(entry) for entry in document)

    def put(self, response_id: str, messages: Sequence[ChatMessage], items: Sequence[Out]) -> None:
        """Keep `messages` (the request's, without its instructions) with the reply `items` made."""
        self._write("responses", response_id, [_entry(m) for m in conversation(messages, items)])

    def thread(self, message_id: str) -> Thread | None:
        """The thread as message `message_id` left it, or None."""
        document = self._read("threads", message_id)
        if document is None:
            return None
        return Thread(tuple(_message(entry) for entry in document["messages"]),
                      tuple(ToolDefinition(t["name"], t["description"], t["parameters"]) for t in document["tools"]))

    def keep_thread(self, message_id: str, messages: Sequence[ChatMessage], items: Sequence[Out],
                    tools: Sequence[ToolDefinition]) -> None:
        """Keep the thread `messages` (the system prompt included) and `tools` make with the reply `items` made."""
        self._write("threads", message_id, {
            "messages": [_entry(m) for m in conversation(messages, items, system=True)],
            "tools": [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                      for t in tools]})

    def _read(self, table: _Table, key: str) -> Any:
        """The JSON document kept under `key` in `table` (marked used), or None."""
        connection = self._connection()
        with connection:
            row = connection.execute(f"SELECT messages FROM {table} WHERE id = ?", (key,)).fetchone()
            if row is None:
                return None
            connection.execute(f"UPDATE {table} SET used = ? WHERE id = ?", (_stamp(), key))
        return json.loads(row[0])

    def _write(self, table: _Table, key: str, document: Any) -> None:
        """Keep `document` under `key` in `table`, dropping the least recently used past `kept`."""
        text = json.dumps(document, ensure_ascii=False)
        connection = self._connection()
        with connection:
            connection.execute(f"INSERT OR REPLACE INTO {table} (id, used, messages) VALUES (?, ?, ?)",
                               (key, _stamp(), text))
            connection.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY used DESC "
                               "LIMIT -1 OFFSET ?)", (self.kept,))

    def _connection(self) -> sqlite3.Connection:
        """This process's and thread's connection (opened on first use: one made before a fork is not used)."""
        found: tuple[int, sqlite3.Connection] | None = getattr(self._local, "connection", None)
        if found is None or found[0] != os.getpid():
            found = (os.getpid(), self._open())
            self._local.connection = found
        return found[1]

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000)
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # A crash of the machine may lose the last responses kept; they are only kept to save a client resending.
        connection.execute("PRAGMA synchronous = NORMAL")
        return connection


class _closing:
    """`with _closing(connection) as c:` commits on success and closes either way (sqlite3's own `with` does not
    close)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> sqlite3.Connection:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.connection.commit()
        finally:
            self.connection.close()


def _stamp() -> int:
    """A use's time, in nanoseconds (orders the uses of every worker on this machine)."""
    return time.time_ns()


def _entry(message: ChatMessage) -> dict[str, Any]:
    return {"role": message.role, "content": message.content, "call_id": message.call_id,
            "is_error": message.is_error,
            "calls": [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in message.calls]}


def _message(entry: dict[str, Any]) -> ChatMessage:
    calls = tuple(CallIn(c["id"], c["name"], c["arguments"]) for c in entry.get("calls") or ())
    return ChatMessage(entry["role"], entry.get("content") or "", calls=calls, call_id=entry.get("call_id"),
                       is_error=bool(entry.get("is_error")))


def _arguments(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
