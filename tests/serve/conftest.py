"""Fixtures for the `mylm serve` tests: a scripted upstream on loopback, and `mylm serve` in front of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.providers.servers import OpenAIServer
from tests.serve.support import OPEN_CLIENTS, serving


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    """Close the SDK clients a test made (`support.openai_client`)."""
    yield
    while OPEN_CLIENTS:
        OPEN_CLIENTS.pop().close()


@pytest.fixture
def upstream() -> Iterator[OpenAIServer]:
    """An OpenAI-compatible scripted model that streams in small delayed chunks."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def served(upstream: OpenAIServer) -> Iterator[str]:
    """`mylm serve`'s root URL, in front of `upstream`."""
    with serving(upstream.base_url) as url:
        yield url
