"""Which directory a delegated run may work in: inside the roots the client declared and the server allows."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..core.errors import WorkspaceRefusedError


@dataclass(frozen=True)
class Bounds:
    """Where runs may work: the server's allowed roots (`--allow-root`, else its working directory) and, when
    the client declared roots, those too; a workspace must lie inside one of each."""

    #: The server's own limit (resolved, existing directories).
    allowed: tuple[Path, ...]
    #: The workspace used when the client names none.
    default: Path

    @classmethod
    def create(cls, allow_roots: Sequence[Path], default: Path) -> Bounds:
        """Bounds from `--allow-root` directories (none: only `default` and below)."""
        allowed = tuple(_real(p) for p in allow_roots) or (_real(default),)
        return cls(allowed, _real(default))

    def workspace(self, requested: str | None, client_roots: Sequence[str] | None) -> Path:
        """The directory a run on `requested` (None: the default) works in, given the client's declared roots
        (`file://` URIs; None when the client declared no roots capability).

        Raises `WorkspaceRefusedError` with one readable line when it is outside either limit, or is not a
        directory."""
        declared = None if client_roots is None else [r for r in (_root_path(u) for u in client_roots) if r]
        if requested is None or not requested.strip():
            candidates = [self.default, *(declared or ())]
            chosen: Path | None = next((c for c in candidates if self._allows(c, declared)), None)
            if chosen is None:
                raise WorkspaceRefusedError(
                    "no workspace was given, and the server's directory is outside the roots the client declared"
                )
            return chosen
        path = Path(os.path.expanduser(requested))
        if not path.is_absolute():
            path = self.default / path
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise WorkspaceRefusedError(f"workspace {requested!r} does not exist") from None
        if not resolved.is_dir():
            raise WorkspaceRefusedError(f"workspace {requested!r} is not a directory")
        if not _inside(resolved, self.allowed):
            listed = ", ".join(str(p) for p in self.allowed)
            raise WorkspaceRefusedError(
                f"workspace {requested!r} is outside the directories this server allows ({listed}; start it "
                "with --allow-root DIR to allow another)"
            )
        if declared is not None and not _inside(resolved, declared):
            listed = ", ".join(str(p) for p in declared) or "none"
            raise WorkspaceRefusedError(f"workspace {requested!r} is outside the roots the client declared ({listed})")
        return resolved

    def _allows(self, path: Path, declared: Sequence[Path] | None) -> bool:
        return _inside(path, self.allowed) and (declared is None or _inside(path, declared))


def _real(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _root_path(uri: str) -> Path | None:
    """The directory a `file://` root names (resolved), or None for another scheme or a remote host."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    return _real(Path(unquote(parts.path)))
