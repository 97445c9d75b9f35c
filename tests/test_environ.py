"""The environment's snapshot (`mylm.core.environ`): the same as `os.environ` at every call, however it changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mylm.core.environ import environment, environment_items
from mylm.core.redact import REDACTED, redact
from mylm.tools.environment import child_environment


def test_the_snapshot_is_os_environ_and_kept_while_nothing_changes() -> None:
    first = environment()
    assert dict(first) == dict(os.environ)
    assert environment() is first
    assert environment_items() == tuple(sorted(os.environ.items()))
    assert environment_items() is environment_items()
    with pytest.raises(TypeError):
        first["MYLM_TEST_WRITE"] = "x"  # type: ignore[index]


def test_a_variable_set_changed_or_removed_is_seen_at_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    before = environment()
    monkeypatch.setenv("MYLM_TEST_SNAPSHOT", "one")
    assert environment()["MYLM_TEST_SNAPSHOT"] == "one"
    assert environment() is not before
    monkeypatch.setenv("MYLM_TEST_SNAPSHOT", "two")  # same name, same length: only the value differs
    assert environment()["MYLM_TEST_SNAPSHOT"] == "two"
    assert ("MYLM_TEST_SNAPSHOT", "two") in environment_items()
    os.environ.pop("MYLM_TEST_SNAPSHOT")
    assert "MYLM_TEST_SNAPSHOT" not in environment()
    assert dict(environment()) == dict(os.environ)


def test_an_environment_replaced_by_a_plain_mapping_is_read_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", {"PATH": "/bin", "LC_ALL": "C"})
    assert environment() == {"PATH": "/bin", "LC_ALL": "C"}
    assert environment_items() == (("LC_ALL", "C"), ("PATH", "/bin"))
    assert child_environment()["LC_ALL"] == "C"


def test_a_secret_set_after_the_first_redaction_is_redacted_and_one_removed_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "the value is CANARY-snapshot-0042 here"
    assert redact(text) == text
    monkeypatch.setenv("MYLM_TEST_API_KEY", "CANARY-snapshot-0042")
    assert redact(text) == f"the value is {REDACTED} here"
    monkeypatch.delenv("MYLM_TEST_API_KEY")
    assert redact(text) == text


def test_a_command_gets_a_locale_variable_set_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LC_MYLM_TEST", raising=False)
    assert "LC_MYLM_TEST" not in child_environment()
    monkeypatch.setenv("LC_MYLM_TEST", "C.UTF-8")
    assert child_environment()["LC_MYLM_TEST"] == "C.UTF-8"


def test_mylm_own_directories_follow_the_variables_they_are_made_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mylm.sandbox.hidden import mylm_private

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "one"))
    assert str(tmp_path / "one" / "mylm") in mylm_private()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "two"))  # asked again: not the answer kept before
    assert str(tmp_path / "two" / "mylm") in mylm_private()
    assert str(tmp_path / "one" / "mylm") not in mylm_private()
    given = {"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "data")}
    assert mylm_private([tmp_path / "extra"], given) == (
        str(tmp_path / "home" / ".config" / "mylm"), str(tmp_path / "data" / "mylm"),
        str(tmp_path / "home" / ".local" / "state" / "mylm"), str(tmp_path / "extra"),
    )
