"""A `/models` answer that is JSON of another shape (`{"data": 5}`) is one clean error, not a traceback."""

from __future__ import annotations

from typing import Any

import pytest

from mylm.core.errors import StreamError
from mylm.providers import Endpoint, list_models
from tests.providers.servers import OpenAIServer, RecordedRequest


class _OddModels(OpenAIServer):
    def __init__(self, document: Any) -> None:
        super().__init__()
        self.document = document

    def other(self, request: RecordedRequest) -> tuple[int, Any]:
        return (200, self.document) if request.path == "/v1/models" else super().other(request)


@pytest.mark.parametrize("document", [{"data": 5}, {"data": {"id": "x"}}, {"data": [{"id": {"a": 1}}], "x": 1},
                                      {"models": "llama"}])
def test_a_model_list_of_another_shape_is_one_clean_error(document: Any) -> None:
    with _OddModels(document) as server:
        endpoint = Endpoint(provider="openai", base_url=server.base_url, api_key="k")
        try:
            names = list_models(endpoint)
        except StreamError as error:
            assert "\n" not in str(error) and "JSON of another shape" in str(error)
        else:
            assert all(isinstance(n, str) for n in names)  # a shape the parser can still read


def test_data_five_is_an_error() -> None:
    with _OddModels({"data": 5}) as server, pytest.raises(StreamError, match="another shape"):
        list_models(Endpoint(provider="openai", base_url=server.base_url, api_key="k"))
