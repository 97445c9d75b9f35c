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


def _fresh(session: requests.Session, url: str, headers: dict[str, str], body: bytes) -> requests.PreparedRequest:
    return session.prepare_request(requests.Request("POST", url, headers=headers, data=body))


def _same(one: requests.PreparedRequest, other: requests.PreparedRequest) -> None:
    assert (one.method, one.url, one.body) == (other.method, other.url, other.body)
    assert list(one.headers.items()) == list(other.headers.items())


def test_a_request_prepared_from_the_last_one_is_the_one_requests_would_prepare() -> None:
    session = new_session()
    url = "http://127.0.0.1:9/v1/chat/completions?x=1"
    headers = {"User-Agent": "mylm/test", "Content-Type": "application/json", "Authorization": "Bearer k"}
    for body in (b'{"a": 1}', b'{"a": 1, "longer": true}', b"{}", b'{"a": 1}'):
        _same(session.prepare_with_body("POST", url, headers, body), _fresh(session, url, headers, body))
    other = {**headers, "Authorization": "Bearer other"}  # other headers: not the request kept for the first
    _same(session.prepare_with_body("POST", url, other, b"{}"), _fresh(session, url, other, b"{}"))
    assert session.prepare_with_body("POST", url, other, b"{}").headers["Authorization"] == "Bearer other"


def test_with_a_cookie_in_the_session_each_request_is_prepared_afresh() -> None:
    session = new_session()
    url = "http://127.0.0.1:9/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    assert "Cookie" not in session.prepare_with_body("POST", url, headers, b"{}").headers
    session.cookies.set("route", "b2", domain="127.0.0.1", path="/")  # as a server's Set-Cookie would
    prepared = session.prepare_with_body("POST", url, headers, b"{}")
    assert prepared.headers["Cookie"] == "route=b2"
    _same(prepared, _fresh(session, url, headers, b"{}"))
