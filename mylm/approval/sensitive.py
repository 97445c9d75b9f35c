"""Which files hold credentials (the policy asks before a tool reads them); redacting values is `mylm.core.redact`.

The list itself lives with the sandbox (`mylm.sandbox.hidden`), which masks the same files from commands: one
list for the kernel and the policy."""

from __future__ import annotations

from ..sandbox.hidden import SECRET_DIRS, SECRET_FILE_PATTERNS, is_secret_path

__all__ = ["SECRET_DIRS", "SECRET_FILE_PATTERNS", "is_secret_path"]
