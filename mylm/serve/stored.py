"""The Responses API's `previous_response_id`: the last responses this server gave, kept in memory (bounded), so
a client can send only what is new (the OpenAI Agents SDK's `previous_response_id=`, LangChain's
`use_previous_response_id`). A response asked to be kept (`store`, true unless the client says false) is kept as
its whole conversation, the reply included; the oldest go first. One server process keeps them in memory
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
from pathlib import Path
from typing import Any, Protocol

from .wire import CallIn, CallOut, ChatMessage, Out, said

#: Responses kept per server.
DEFAULT_KEPT = 256
#: Milliseconds a worker waits for another one's write to the shared store (each write takes microseconds).
BUSY_TIMEOUT_MS = 5000


class ResponseStore(Protocol):
    """Where the kept responses live: `get` and `put` as `StoredResponses` has them."""

    def get(self, response_id: str) -> tuple[ChatMessage, ...] | None: ...

    def put(self, response_id: str, messages: Sequence[ChatMessage], items: Sequence[Out]) -> None: ...


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
        kept = conversation(messages, items)
        with self._lock:
            self._items[response_id] = kept
            self._items.move_to_end(response_id)
            while len(self._items) > self.kept:
                self._items.popitem(last=False)


def conversation(messages: Sequence[ChatMessage], items: Sequence[Out]) -> tuple[ChatMessage, ...]:
    """What is kept of a response: the request's messages (without its instructions) and the reply `items` made."""
    calls = tuple(CallIn(i.id, i.name, _arguments(i.arguments)) for i in items if isinstance(i, CallOut))
    reply = ChatMessage("assistant", said(list(items)), calls=calls)
    return tuple(m for m in messages if m.role != "system") + (reply,)


class SharedResponses:
    """The last `kept` conversations in one SQLite file, shared by the server's worker processes.

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

    def get(self, response_id: str) -> tuple[ChatMessage, ...] | None:
        """The conversation response `response_id` ended (its reply included), or None."""
        connection = self._connection()
        with connection:
            row = connection.execute("SELECT messages FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None:
                return None
            connection.execute("UPDATE responses SET used = ? WHERE id = ?", (_stamp(), response_id))
        return tuple(_message(entry) for entry in json.loads(row[0]))

    def put(self, response_id: str, messages: Sequence[ChatMessage], items: Sequence[Out]) -> None:
        """Keep `messages` (the request's, without its instructions) with the reply `items` made."""
        document = json.dumps([_entry(m) for m in conversation(messages, items)], ensure_ascii=False)
        connection = self._connection()
        with connection:
            connection.execute("INSERT OR REPLACE INTO responses (id, used, messages) VALUES (?, ?, ?)",
                               (response_id, _stamp(), document))
            connection.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY used DESC "
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
