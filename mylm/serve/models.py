"""`GET /v1/models` (in OpenAI's shape, or Anthropic's when the client sends `anthropic-version`) and
`GET /health`. A server fronts one upstream (any model name a client sends is served by it), or several, each
under the model name a client chooses it by (`mylm serve --upstream`)."""

from __future__ import annotations

import os
import time
from typing import Any

#: When this process started, reported as the model's creation time (some clients sort by it).
STARTED = int(time.time())


def openai_list(names: list[str]) -> dict[str, Any]:
    """`GET /v1/models` as OpenAI answers it."""
    return {"object": "list", "data": [openai_model(name) for name in names]}


def openai_model(name: str) -> dict[str, Any]:
    """One model as OpenAI describes it."""
    return {"id": name, "object": "model", "created": STARTED, "owned_by": "mylm"}


def anthropic_list(names: list[str]) -> dict[str, Any]:
    """`GET /v1/models` as Anthropic answers it."""
    return {"data": [anthropic_model(name) for name in names], "has_more": False, "first_id": names[0],
            "last_id": names[-1]}


def anthropic_model(name: str) -> dict[str, Any]:
    """One model as Anthropic describes it."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(STARTED))
    return {"type": "model", "id": name, "display_name": name, "created_at": created}


def health(names: list[str], active: int, worker: int | None = None, workers: int | None = None
           ) -> dict[str, Any]:
    """`GET /health`: the server is up; which models it fronts (the first is the default) and how many requests
    are in flight; behind `--workers N`, which worker answered (its number from 1, and its process id) and how
    many there are (`active_requests` is that worker's)."""
    found: dict[str, Any] = {"status": "ok", "model": names[0], "models": names, "active_requests": active}
    if worker is not None:
        found.update(worker=worker, workers=workers, pid=os.getpid())
    return found
