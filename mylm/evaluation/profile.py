"""`mylm eval --save`: the best mode measured for an endpoint and model, written into its profile.

What is written is the `constrain` setting of `[profiles.NAME]` (`auto` for the `protocol` and `serve` modes,
`off` for `protocol-nogrammar`): the setting `mylm ask`, `chat`, `batch` and `serve` already read from the
profile, so every later run with `-m NAME` uses it. The profile is the one in effect; with none, a new one named
after the model is added with the endpoint (`base_url`, `model`, `provider`; never a key). Only that profile's
lines change, so the rest of a hand-written file keeps its comments and layout; the result must parse to exactly
the intended settings before it replaces the file (atomically), or nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import _parse_toml, _replace_file, _toml_string, config_path, read_config_file
from ..core.errors import ConfigError

SAVED_KEY = "constrain"
#: How the comment above a saved setting starts (so the next --save replaces it).
NOTE = "# mylm eval --save:"


def profile_name_for(model: str | None) -> str:
    """A profile name from a model name or GGUF path: its last part, lower case, `[a-z0-9_-]` only."""
    base = Path(model).name if model else "default"
    base = re.sub(r"\.gguf$", "", base, flags=re.IGNORECASE)
    name = re.sub(r"[^a-z0-9_-]+", "-", base.lower()).strip("-")
    return name or "default"


def save_setting(profile: str | None, value: str, *, endpoint: Mapping[str, Any], path: Path | None = None,
                 comment: str = "") -> tuple[str, Path, bool]:
    """Set `constrain = value` in `[profiles.<profile>]` (a new profile from `endpoint` when `profile` is None);
    returns the profile's name, the file, and whether the profile was created."""
    file_path = Path(path or config_path())
    data = read_config_file(file_path)
    profiles: dict[str, Any] = dict(data.get("profiles") or {})
    created = False
    if profile is None:
        profile = profile_name_for(endpoint.get("model"))
        existing = profiles.get(profile)
        fields = {k: v for k, v in endpoint.items() if v is not None}
        if existing is not None and any(existing.get(k) != v for k, v in fields.items()):
            raise ConfigError(f"--save: a profile {profile!r} for another endpoint exists in {file_path}; run with "
                              f"-m {profile} to update that one, or rename it")
        created = existing is None
    text = file_path.read_text(encoding="utf-8") if file_path.exists() else ""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    note = [f"{NOTE} {comment}\n"] if comment else []
    assignment = f"{SAVED_KEY} = {_toml_string(value)}\n"
    header = _header_line(lines, profile)
    if header is None:
        if profile in profiles:
            raise ConfigError(f"--save: profile {profile!r} in {file_path} is not written as a [profiles.{profile}] "
                              f"table; set {SAVED_KEY} = {value!r} there yourself")
        table = [f"[profiles.{_key(profile)}]\n"]
        table += [f"{k} = {_toml_string(str(v))}\n" for k, v in endpoint.items() if v is not None]
        lines += ["\n", *note, *table, assignment]
        wanted_profile = {**{k: str(v) for k, v in endpoint.items() if v is not None}, SAVED_KEY: value}
    else:
        end = _section_end(lines, header)
        existing_line = next((i for i in range(header + 1, end)
                              if re.match(rf"\s*{SAVED_KEY}\s*=", lines[i])), None)
        if existing_line is not None:
            # The note an earlier --save left above the setting is replaced with it.
            start = existing_line - 1 if existing_line > header + 1 and lines[existing_line - 1].startswith(
                NOTE) else existing_line
            lines[start:existing_line + 1] = [*note, assignment]
        else:
            lines[header + 1:header + 1] = [*note, assignment]
        wanted_profile = {**profiles[profile], SAVED_KEY: value}
    updated = "".join(lines)
    expected = {**data, "profiles": {**profiles, profile: wanted_profile}}
    if _parse_toml(updated) != expected:
        raise ConfigError(f"--save: could not update {file_path}; set {SAVED_KEY} = {value!r} in "
                          f"[profiles.{profile}] yourself")
    _replace_file(file_path, updated)
    return profile, file_path, created


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _toml_string(name)


def _header_line(lines: list[str], profile: str) -> int | None:
    names = {re.escape(profile), re.escape(_toml_string(profile)), re.escape(f"'{profile}'")}
    pattern = re.compile(rf"\s*\[\s*profiles\s*\.\s*(?:{'|'.join(names)})\s*\]\s*(#.*)?$")
    return next((i for i, line in enumerate(lines) if pattern.match(line)), None)


def _section_end(lines: list[str], header: int) -> int:
    """The line after the last of the table that starts at `header` (the next table header, or the end)."""
    for i in range(header + 1, len(lines)):
        if re.match(r"\s*\[", lines[i]):
            return i
    return len(lines)
