"""Assignments to a secret-named key are redacted in any case and style; code, settings and prose are not."""

from __future__ import annotations

import pytest

from mylm.core.redact import REDACTED, Redactor

R = Redactor()


@pytest.mark.parametrize(("text", "shown"), [
    ("password = hunter2", f"password = {REDACTED}"),
    ("api_token: x", f"api_token: {REDACTED}"),
    ("SMTP_PASS=x", f"SMTP_PASS={REDACTED}"),
    ("db_pwd=abc", f"db_pwd={REDACTED}"),
    ("export DB_PASSWORD='s3cr3t'", f"export DB_PASSWORD='{REDACTED}'"),
    ('{"password": "x", "user": "bob"}', f'{{"password": "{REDACTED}", "user": "bob"}}'),
    ('{"user": "bob","client_secret":"abc"}', f'{{"user": "bob","client_secret":"{REDACTED}"}}'),
    ("  secret_key: 'k'", f"  secret_key: '{REDACTED}'"),
    ("- password: hunter2", f"- password: {REDACTED}"),
    ("--password=hunter2", f"--password={REDACTED}"),
    ("mysql://h/?token=abcdef", f"mysql://h/?token={REDACTED}"),
    ("smtp:\n  pass: p4ss\n  host: mail", f"smtp:\n  pass: {REDACTED}\n  host: mail"),
    ("apiKey = 'AbC123'", f"apiKey = '{REDACTED}'"),
    ("origin\thttps://ghtoken0123456789@github.com/a.git (fetch)",
     f"origin\thttps://{REDACTED}@github.com/a.git (fetch)"),
    # .netrc / .authinfo, on one line or several
    ("machine api.example.com login bob password hunter2", f"machine api.example.com login bob password {REDACTED}"),
    ("machine h\n  login bob\n  password hunter2\n", f"machine h\n  login bob\n  password {REDACTED}\n"),
    ("default login anonymous passwd me@x.org", f"default login anonymous passwd {REDACTED}"),
    # a config line that is a secret's name and its value
    ("requirepass foobared1", f"requirepass {REDACTED}"),
    ("  DB_PASSWD  hunter2x!", f"  DB_PASSWD  {REDACTED}"),
    # XML elements named for a secret
    ("<password>hunter2</password>", f"<password>{REDACTED}</password>"),
    ('<apiKey env="prod">AbC123xyz</apiKey>', f'<apiKey env="prod">{REDACTED}</apiKey>'),
    # a YAML flow mapping keeps its closing brace
    ("auth: {user: a, pass: hunter2}", f"auth: {{user: a, pass: {REDACTED}}}"),
])
def test_secret_assignments_are_redacted(text: str, shown: str) -> None:
    assert R.redact(text) == shown


@pytest.mark.parametrize("text", [
    "Press any key: the door opens",
    "error: unexpected token: EOF",
    "The password is long enough",
    "primary_key=True",
    "token = tokenizer.next()",
    "password = request.form['password']",
    "api_key = settings.API_KEY",
    "api_key = os.environ['API_KEY']",
    "KEY_FILE=/etc/key.pem",
    "TOKEN_TTL=3600",
    'passage = "It was a dark and stormy night"',
    "if key == value:",
    "keyboard = qwerty",
    "tokens: 5",
    "password: null",
    "secret: ${SECRET}",
    "ssh://git@github.com/a.git",
    "Password reset",
    "token expired",
    "password required for this action",
    "<key>CFBundleName</key>",
    "<token>${TOKEN}</token>",
    "token_count 12345678",
])
def test_code_settings_and_prose_are_left_alone(text: str) -> None:
    assert R.redact(text) == text


def test_a_streamed_known_secret_is_never_split_by_a_held_name() -> None:
    secret = "my pass phrase"
    text = f"say {secret} and stop"
    stream = Redactor([secret]).stream()
    shown = "".join(stream.feed(ch) for ch in text) + stream.flush()
    assert shown == f"say {REDACTED} and stop"
