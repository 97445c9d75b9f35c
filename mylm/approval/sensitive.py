"""Which files hold credentials (the policy asks before a tool reads them); redacting values is
`mylm.core.redact`."""

from __future__ import annotations

import fnmatch

#: File names (matched case-insensitively against the last component) that hold credentials.
SECRET_FILE_PATTERNS: tuple[str, ...] = (
    ".env", ".env.*", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.keystore", "*.jks",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "id_xmss*",
    ".netrc", "_netrc", ".git-credentials", ".pypirc", ".npmrc", ".pgpass", "credentials", "credentials.json",
)
#: Directories whose every file is treated as a secret.
SECRET_DIRS: tuple[str, ...] = (".ssh", ".aws", ".gnupg", ".azure", ".kube", ".docker", ".password-store")


def is_secret_path(relative: str) -> bool:
    """Whether a workspace-relative POSIX path names a credential file or lies in a credential directory."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if not parts:
        return False
    if any(p.lower() in SECRET_DIRS for p in parts[:-1]) or parts[-1].lower() in SECRET_DIRS:
        return True
    name = parts[-1].lower()
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_FILE_PATTERNS)
