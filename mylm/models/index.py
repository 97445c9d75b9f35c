"""The package index as pip is configured to see it: which indexes, and a file's URL and SHA-256 there.

Index URLs come from the same places pip reads them (`PIP_INDEX_URL` / `PIP_EXTRA_INDEX_URL`, then pip's own
merged configuration, which `pip config list` reports), so a machine behind a mirror works the way
`pip install` does. Pages are read through the simple repository API: JSON (PEP 691) where the index offers
it, else HTML (PEP 503) with the hash in each link's `#sha256=` fragment; `file://` indexes are folders of
`index.html` pages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from ..core.errors import DownloadError

PYPI = "https://pypi.org/simple"
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


@dataclass(frozen=True)
class IndexSettings:
    """Where to look for packages, in order, and the CA bundle for HTTPS (pip's `cert`)."""

    urls: tuple[str, ...] = (PYPI,)
    cert: str | None = None


@dataclass(frozen=True)
class IndexFile:
    """A file an index lists."""

    filename: str
    url: str
    #: The index's SHA-256 for it, when the index gives one.
    sha256: str | None
    size: int | None = None


def pip_config() -> dict[str, str]:
    """pip's merged configuration (`pip config list`: files and `PIP_*` variables), or {} without pip."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            found[key.strip()] = value[1:-1]
    return found


def index_settings(
    environ: Mapping[str, str] | None = None, config: Mapping[str, str] | None = None
) -> IndexSettings:
    """The indexes pip would use: the index URL (PyPI unless configured), then the extra ones."""
    env = os.environ if environ is None else environ
    cfg = pip_config() if config is None else config

    def setting(name: str) -> str | None:
        var = "PIP_" + name.upper().replace("-", "_")
        for value in (
            env.get(var),
            cfg.get(f":env:.{name}"),
            cfg.get(f"install.{name}"),
            cfg.get(f"global.{name}"),
        ):
            if value:
                return value
        return None

    urls = [(setting("index-url") or PYPI).strip()]
    if _flag(setting("no-index")):
        urls = []
    urls += (setting("extra-index-url") or "").split()
    cert = setting("cert")
    return IndexSettings(
        tuple(u.rstrip("/") for u in urls if u), cert if cert and os.path.exists(cert) else None
    )


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def normalise(package: str) -> str:
    """A project name as the simple API spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def find_wheel(settings: IndexSettings, package: str, version: str, session: Any = None) -> IndexFile:
    """The pure-Python wheel of `package==version` from the first index listing it."""
    stem = f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"
    problems = []
    for index in settings.urls:
        try:
            files = list_files(index, package, settings, session)
        except DownloadError as error:
            problems.append(str(error))
            continue
        for file in files:
            if file.filename.lower().startswith(stem) and file.filename.endswith(".whl"):
                return file
        problems.append(f"{public(index)} has no {package} {version} wheel")
    raise DownloadError(
        f"cannot find {package} {version}: " + "; ".join(problems or ["no package index is configured"])
    )


def list_files(index: str, package: str, settings: IndexSettings, session: Any = None) -> list[IndexFile]:
    """The files one index lists for `package`."""
    page = f"{index}/{normalise(package)}/"
    if urlsplit(page).scheme == "file":
        path = Path(unquote(urlsplit(page).path)) / "index.html"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            raise DownloadError(f"{index} has no {package}") from None
        return _from_html(text, page)
    import requests

    http = session or requests
    try:
        response = http.get(page, headers={"Accept": _ACCEPT}, timeout=(10, 60), verify=settings.cert or True)
    except requests.RequestException as error:
        raise DownloadError(f"cannot read {public(page)}: {type(error).__name__}") from None
    if response.status_code == 404:
        raise DownloadError(f"{public(index)} has no {package}")
    if response.status_code >= 300:
        raise DownloadError(f"{public(page)} answered HTTP {response.status_code}")
    kind = response.headers.get("content-type", "")
    if "json" in kind:
        try:
            return _from_json(response.json(), response.url or page)
        except (ValueError, TypeError):
            raise DownloadError(f"{public(page)} sent JSON that is not a simple-API page") from None
    return _from_html(response.text, response.url or page)


def _from_json(document: Any, base: str) -> list[IndexFile]:
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, list):
        raise TypeError("no files")
    found = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or entry.get("yanked"):
            continue
        hashes = entry.get("hashes")
        hashes = hashes if isinstance(hashes, dict) else {}
        size = entry.get("size") if isinstance(entry.get("size"), int) else None
        found.append(
            IndexFile(entry["filename"], urljoin(base, str(entry.get("url", ""))), hashes.get("sha256"), size)
        )
    return found


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.links.append((self._open, self._text.strip()))
            self._open = None


def _from_html(text: str, base: str) -> list[IndexFile]:
    parser = _Links()
    parser.feed(text)
    found = []
    for attrs, label in parser.links:
        href = attrs.get("href")
        if not href or "data-yanked" in attrs:
            continue
        url, _, fragment = urljoin(base, href).partition("#")
        digest = re.fullmatch(r"sha256=([0-9a-fA-F]{64})", fragment)
        name = label or unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        found.append(IndexFile(name, url, digest.group(1).lower() if digest else None))
    return found


def open_file(
    file: IndexFile, settings: IndexSettings, session: Any = None
) -> tuple[Iterator[bytes], int | None]:
    """The file's bytes as they arrive, and its length when known."""
    parts = urlsplit(file.url)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
        try:
            handle = path.open("rb")
        except OSError as error:
            raise DownloadError(f"cannot read {path}: {error.strerror}") from None
        return _read_file(handle), path.stat().st_size
    import requests

    http = session or requests
    try:
        response = http.get(file.url, stream=True, timeout=(10, 60), verify=settings.cert or True)
    except requests.RequestException as error:
        raise DownloadError(f"cannot download {public(file.url)}: {type(error).__name__}") from None
    if response.status_code >= 300:
        response.close()
        raise DownloadError(f"downloading {public(file.url)} failed: HTTP {response.status_code}")
    length = response.headers.get("content-length")
    return _read_response(response), int(length) if length and length.isdigit() else file.size


def _read_file(handle: Any) -> Iterator[bytes]:
    with handle:
        while block := handle.read(1 << 20):
            yield block


def _read_response(response: Any) -> Iterator[bytes]:
    import requests

    try:
        yield from response.iter_content(1 << 20)
    except requests.RequestException as error:
        raise DownloadError(
            f"the download from {public(response.url)} broke off: {type(error).__name__}"
        ) from None
    finally:
        response.close()


def public(url: str) -> str:
    """The URL without credentials or query, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"
