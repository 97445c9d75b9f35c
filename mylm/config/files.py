"""The config files: where the user's is, reading one safely (a regular file of bounded size, UTF-8 TOML, only
known keys, well-formed profiles), and locating a key's line for an error message."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.paths import config_dir
from .settings import _FILE_ONLY, _KEYS, CONFIG_FILE_NAME, PROFILE_KEYS


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's config file: `$MYLM_CONFIG`, else `config.toml` in mylm's user config dir."""
    env = os.environ if environ is None else environ
    if env.get("MYLM_CONFIG"):
        return Path(env["MYLM_CONFIG"])
    return config_dir(env) / CONFIG_FILE_NAME


def _tomllib() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    return tomllib


#: The most a config file may hold (they are a few KiB): a project's `.mylm/config.toml` linked to /dev/zero
#: must not fill memory.
MAX_CONFIG_BYTES = 1 << 20


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path` when it is a regular file of at most `limit` bytes, else a `ConfigError`. Opened
    without blocking and without becoming a controlling terminal, then checked on the open descriptor, so a
    FIFO or /dev/tty never waits for a writer or the keyboard and a link swapped after a check is not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"config file {path} is not a regular file (a device, FIFO or directory)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ConfigError(f"config file {path} is larger than {limit // 1024:,} KiB (config files are small)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_config_file(path: Path, *, known: set[str] | None = None) -> dict[str, Any]:
    """Parse a TOML config file (a missing file is an empty config); errors name the file and line."""
    tomllib = _tomllib()
    try:
        raw = _read_regular(path, MAX_CONFIG_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
        data: dict[str, Any] = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    allowed = known if known is not None else set(_KEYS) | _FILE_ONLY
    unknown = sorted(set(data) - allowed)
    if unknown:
        where = _line_of(text, unknown[0])
        listed = ", ".join(sorted(allowed))
        raise ConfigError(f"config file {path}{where}: unknown setting {unknown[0]!r} (known settings: {listed})")
    _check_profiles(path, text, data.get("profiles", {}))
    _check_trusted(path, text, data.get("trusted_projects", []))
    return data


def _check_trusted(path: Path, text: str, entries: Any) -> None:
    if not isinstance(entries, list) or not all(isinstance(e, str) and os.path.isabs(e) for e in entries):
        raise ConfigError(
            f"config file {path}{_line_of(text, 'trusted_projects')}: trusted_projects is a list of absolute "
            "directory paths (`mylm prompts trust` adds the current one)"
        )


def _check_profiles(path: Path, text: str, profiles: Any) -> None:
    if not isinstance(profiles, dict) or any(not isinstance(v, dict) for v in profiles.values()):
        raise ConfigError(f"config file {path}{_line_of(text, 'profiles')}: profiles are tables: [profiles.NAME]")
    for name, table in profiles.items():
        unknown = sorted(set(table) - set(PROFILE_KEYS))
        if unknown:
            where = _line_of(text, unknown[0], after=f"[profiles.{name}]")
            raise ConfigError(
                f"config file {path}{where}: profile {name!r} has unknown setting {unknown[0]!r} "
                f"(a profile may set: {', '.join(PROFILE_KEYS)})"
            )


def _line_in(path: Path, key: str, *, after: str = "") -> str:
    """`, line N` for `key` in the file at `path` (see `_line_of`), or nothing if it cannot be read."""
    try:
        return _line_of(path.read_text(encoding="utf-8"), key, after=after)
    except (OSError, UnicodeDecodeError):
        return ""


def section_error(path: Path, section: str, error: ConfigError) -> ConfigError:
    """`error` about table `[section]` of the config file at `path`, located: `config file PATH, line N: ...`.

    The key is the word after `[section]` in the message (the tools' own checks name it there)."""
    match = re.match(rf"\[{re.escape(section)}\] (?:has unknown key\(s\) )?(\w+)", error.message)
    line = _line_in(path, match.group(1), after=f"[{section}]") if match else ""
    if not line:
        line = _line_in(path, section.rpartition(".")[2], after="")
    return ConfigError(f"config file {path}{line}: {error.message}")


def _line_of(text: str, key: str, *, after: str = "") -> str:
    """`, line N` for the first line assigning `key` (after the line holding `after`), or nothing."""
    start = text.find(after) if after else 0
    # [ \t]*, not \s*: a blank line before the key must not be counted as the key's line.
    pattern = re.compile(rf"^[ \t]*[\"']?{re.escape(key)}[\"']?[ \t]*[=.\]]", re.MULTILINE)
    match = pattern.search(text, max(start, 0))
    if match is None:
        match = re.search(rf"^[ \t]*\[\s*{re.escape(key)}\b", text, re.MULTILINE)
    return f", line {text.count(chr(10), 0, match.start()) + 1}" if match else ""
