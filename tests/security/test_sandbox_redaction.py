"""Issue 10 item 5: one redaction module, which also knows credential URLs and the secret names it missed."""

from __future__ import annotations

import pytest

from mylm.core.redact import REDACTED, Redactor, is_secret_name, redact

ENV = {
    "DB_PASS": "canary-pass-0001",
    "PGPWD": "canary-pwd-0002",
    "SENTRY_DSN": "https://canary0003@o1.ingest.example/1",
    "SLACK_WEBHOOK": "https://hooks.example/services/canary-0004",
    "APP_CREDENTIALS": "canary-cred-0005",
    "BASIC_AUTH": "canary-auth-0006",
    "SESSION_COOKIE": "canary-cookie-0007",
    "FLASK_SESSION": "canary-session-0008",
    "DATABASE_URL": "postgres://app:canary-url-0009@db.internal/prod",
    "PWD": "/home/user/project",
    "HOME": "/home/user",
}


@pytest.mark.parametrize("name", ["DB_PASS", "PGPWD", "SENTRY_DSN", "SLACK_WEBHOOK", "APP_CREDENTIALS",
                                  "BASIC_AUTH", "SESSION_COOKIE", "FLASK_SESSION", "MY_PASSPHRASE"])
def test_redaction_secret_names(name: str) -> None:
    assert is_secret_name(name)


def test_redaction_environment_values_of_every_secret_name() -> None:
    text = " ".join(ENV.values())
    out = redact(text, ENV)
    assert "canary" not in out, out
    assert "/home/user/project" in out  # a path is a setting, not a secret, even under a secret-looking name


@pytest.mark.parametrize("url", [
    "postgres://app:hunter2-long@db.internal:5432/prod",
    "https://bob:pa%40ss-word@example.com/x",
    "redis://:only-a-password@cache:6379/0",
    "amqp://guest:guest-secret@rabbit/",
])
def test_redaction_credential_urls_without_knowing_them(url: str) -> None:
    out = Redactor().redact(f"connecting to {url} now")
    password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert password not in out and f"{REDACTED}@" in out


def test_redaction_leaves_urls_without_a_password() -> None:
    text = "ssh://git@github.com/org/repo and https://example.com/a@b"
    assert Redactor().redact(text) == text


def test_redaction_tool_output_uses_the_one_module() -> None:
    from mylm.tools import files, memory, shell

    assert shell.redact is redact and files.redact is redact and memory.redact is redact
