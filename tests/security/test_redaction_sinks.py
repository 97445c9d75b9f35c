"""What mylm writes leaks no secret: the shapes the battery found unredacted, the batch results file, and the
terminal at -v (an upstream's error body with OSC 52/8, CSI, C1 or bidi controls)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from mylm.cli.common import configure_logging
from mylm.core.redact import REDACTED, Redactor
from tests.cli.cli_support import invoke
from tests.providers.servers import HTTPError, OpenAIServer

SHAPES = {
    "stripe secret": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe restricted": "rk_live_" + "51Hh2kLwQ8z0v9x7Y6a5B4c3",
    "npm": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "pypi": "pypi-AgEIcHlwaS5vcmc" + "CJGQ0NjU5ZWM2LWFmZjUtNDM0Yi1hYTRlLWE1ZjQ1ZmQzZmJhMAACKlszLCJj",
    "google oauth": "ya29.a0AfH6SMBx3kV9" + "q2L0mZpT4w8YcR7uN1jD5eH",
    "sendgrid": "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    "digitalocean": "dop_v1_" + "3f6a" * 16,
    "github": "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a",
    "openai project": "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
}
HEADERS = {
    "basic auth": ("Authorization: Basic dXNlcjpodW50ZXIycGFzcw==", "dXNlcjpodW50ZXIycGFzcw=="),
    "cookie": ("Cookie: sessionid=9f8e7d6c5b4a3921; csrftoken=abc", "9f8e7d6c5b4a3921"),
    "slack webhook": ("post to https://hooks.slack.com/services/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",
                      "x3Kz9Yq7Lw2Mv8Nc5Pb1Rt4d"),
    "url password": ("error: POST https://bob:hunter2pw@api.example.com/v1/chat failed", "hunter2pw"),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_credential_shape_is_redacted(name: str) -> None:
    text = f"here it is: {SHAPES[name]} and more"
    assert Redactor().redact(text) == f"here it is: {REDACTED} and more"


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_each_header_and_url_credential_is_redacted(name: str) -> None:
    text, secret = HEADERS[name]
    redacted = Redactor().redact(text)
    assert secret not in redacted and REDACTED in redacted


@pytest.mark.parametrize("text", ["the cookie: was stale", "Set the Authorization: header", "rk_ is a prefix",
                                  "npm_config_cache=.npm-cache", "SG.1 is a section"])
def test_prose_stays(text: str) -> None:
    assert Redactor().redact(text) == text


def test_batch_results_hold_no_secret(tmp_path: Path) -> None:
    """Before: the results file held an answer's tokens and an endpoint error's URL password as they were."""
    leak = f"{SHAPES['github']} {SHAPES['openai project']} https://bob:hunter2pw@db.example.com/x"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "go"}) + "\n")
    out = tmp_path / "out.jsonl"
    with OpenAIServer([f"<final_answer>{leak}</final_answer>"]) as server:
        done = invoke(["batch", str(tasks), "-o", str(out), "--retries", "0", "--base-url", server.base_url,
                       "--provider", "openai", "-m", "m"])
    written = out.read_text()
    assert done.exit_code == 0, done.stderr
    assert '"id":"t1"' in written
    for secret in (SHAPES["github"], SHAPES["openai project"], "hunter2pw"):
        assert secret not in written


def test_an_upstream_error_body_at_v_reaches_the_terminal_sanitised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: the -v log handler redacted but did not sanitise: OSC 52 (set the clipboard), OSC 8, CSI, C1 and
    bidi controls from an upstream's error body reached the terminal raw."""
    configure_logging(1, Redactor())
    try:
        logging.getLogger("mylm.providers.test").info(
            "upstream said: \x1b]52;c;cm0gLXJmIH4=\x07 \x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\ \x1b[2J "
            "\x9b31m \u202egnp.exe Authorization: Basic dXNlcjpodW50ZXIycGFzcw==")
    finally:
        root = logging.getLogger("mylm")
        for handler in [h for h in root.handlers if h.get_name() == "mylm-cli"]:
            root.removeHandler(handler)
    err = capsys.readouterr().err
    assert "upstream said" in err
    for raw in ("\x1b", "\x9b", "\u202e", "\x07", "dXNlcjpodW50ZXIycGFzcw=="):
        assert raw not in err


def test_eval_json_lines_are_redacted_and_terminal_safe(tmp_path: Path) -> None:
    with OpenAIServer([HTTPError(500, f"boom {SHAPES['npm']} \x1b]52;c;eA==\x07")] * 40) as server:
        done = invoke(["eval", "--json", "--task", "count-lines", "--max-iterations", "1", "--base-url",
                       server.base_url, "--provider", "openai", "-m", "m"])
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["item", "row", "run"], done.stdout[-500:] + done.stderr[-500:]
    assert lines[0]["error"]  # the endpoint's error is reported ...
    assert SHAPES["npm"] not in done.stdout and "\x1b" not in done.stdout, done.stdout[-500:]  # ... safely
