"""Fixtures for the provider tests: a loopback server per wire format, torn down after each test."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.providers.servers import OpenAIServer


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """An OpenAI-compatible server on 127.0.0.1; script it with `.script([...])`, read `.requests`."""
    with OpenAIServer() as server:
        yield server
