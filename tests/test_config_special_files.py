"""A config file that is a device, a FIFO or huge is one clean error: never read until memory runs out, never
a wait for the keyboard or a writer (a project's `.mylm/config.toml` can be a link to anything)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mylm.config import MAX_CONFIG_BYTES, PROJECT_CONFIG, load_settings, read_config_file
from mylm.core.errors import ConfigError


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom"])
def test_a_project_config_linked_to_a_device_is_refused(tmp_path: Path, target: str) -> None:
    (tmp_path / ".mylm").mkdir()
    (tmp_path / PROJECT_CONFIG).symlink_to(target)
    with pytest.raises(ConfigError, match="is not a regular file") as raised:
        load_settings(cwd=tmp_path, environ={})
    assert "\n" not in str(raised.value)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_config_file(fifo)


def test_a_terminal_is_never_waited_on(tmp_path: Path) -> None:
    link = tmp_path / "config.toml"
    link.symlink_to("/dev/tty")
    with pytest.raises(ConfigError):  # no terminal: it cannot be opened; with one: not a regular file
        read_config_file(link)


def test_a_huge_config_file_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "config.toml"
    big.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match="larger than"):
        read_config_file(big)
    assert read_config_file(tmp_path / "missing.toml") == {}
