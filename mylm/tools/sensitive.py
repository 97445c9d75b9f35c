"""What counts as a secret: variable names, file paths, and the values to scrub from tool output."""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Mapping

#: Variable names whose values are secrets: never passed to a child, and scrubbed from what tools return.
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|AUTH|COOKIE|PRIVATE", re.IGNORECASE)

#: File names (matched case-insensitively against the last component) that hold credentials.
SECRET_FILE_PATTERNS: tuple[str, ...] = (
    ".env", ".env.*", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.keystore", "*.jks",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "id_xmss*",
    ".netrc", "_netrc", ".git-credentials", ".pypirc", ".npmrc", ".pgpass", "credentials", "credentials.json",
)
#: Directories whose every file is treated as a secret.
SECRET_DIRS: tuple[str, ...] = (".ssh", ".aws", ".gnupg", ".azure", ".kube", ".docker", ".password-store")

#: Shapes of well-known credentials, scrubbed even when mylm does not know the value.
_SECRET_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,})"
)
REDACTED = "[REDACTED]"
#: Values shorter than this are too likely to occur by chance ("true", "1") to be scrubbed.
_MIN_SECRET_LENGTH = 8


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called `name` probably holds a secret (API keys, tokens, passwords)."""
    return bool(_SECRET_NAME.search(name))


def is_secret_path(relative: str) -> bool:
    """Whether a workspace-relative POSIX path names a credential file or lies in a credential directory."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if not parts:
        return False
    if any(p.lower() in SECRET_DIRS for p in parts[:-1]) or parts[-1].lower() in SECRET_DIRS:
        return True
    name = parts[-1].lower()
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_FILE_PATTERNS)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of secret-named variables in `environ` (default: this process's), longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= _MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace known secret values from the environment, then credential-shaped strings, with `[REDACTED]`."""
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, REDACTED)
    return _SECRET_SHAPES.sub(REDACTED, text)
