"""`GET /v1/models` (in OpenAI's shape, or Anthropic's when the client sends `anthropic-version`) and
`GET /health`. One server fronts one upstream model; its name is what a client lists and may send."""

from __future__ import annotations

import time
from typing import Any

#: When this process started, reported as the model's creation time (some clients sort by it).
STARTED = int(time.time())


def openai_list(name: str) -> dict[str, Any]:
    """`GET /v1/models` as OpenAI answers it."""
    return {"object": "list", "data": [openai_model(name)]}


def openai_model(name: str) -> dict[str, Any]:
    """One model as OpenAI describes it."""
    return {"id": name, "object": "model", "created": STARTED, "owned_by": "mylm"}


def anthropic_list(name: str) -> dict[str, Any]:
    """`GET /v1/models` as Anthropic answers it."""
    return {"data": [anthropic_model(name)], "has_more": False, "first_id": name, "last_id": name}


def anthropic_model(name: str) -> dict[str, Any]:
    """One model as Anthropic describes it."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(STARTED))
    return {"type": "model", "id": name, "display_name": name, "created_at": created}


def health(name: str, active: int) -> dict[str, Any]:
    """`GET /health`: the server is up; which model it fronts and how many requests are in flight."""
    return {"status": "ok", "model": name, "active_requests": active}
