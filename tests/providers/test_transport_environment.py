"""The HTTP session reads the proxy variables once per host (requests reads the environment per request)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from mylm.providers.transport import new_session


def test_proxies_come_from_the_environment_once_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "local.invalid")
    lookups: list[str] = []
    real = requests.Session.merge_environment_settings

    def counted(self: requests.Session, url: Any, *args: Any) -> Any:
        lookups.append(url)
        return real(self, url, *args)

    monkeypatch.setattr(requests.Session, "merge_environment_settings", counted)
    session = new_session()
    for _ in range(3):
        proxied = session.merge_environment_settings("https://api.invalid/v1/chat", {}, True, None, None)
    direct = session.merge_environment_settings("https://local.invalid/v1", {}, True, None, None)
    assert proxied["proxies"]["https"] == "http://proxy.invalid:3128"
    assert "https" not in direct["proxies"]
    assert lookups == ["https://api.invalid/v1/chat", "https://local.invalid/v1"]
