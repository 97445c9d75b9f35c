"""Where a delegated run may work: inside the server's allowed roots and the roots the client declared."""

from __future__ import annotations

from pathlib import Path

import pytest

from mylm.delegate import Bounds
from mylm.core.errors import WorkspaceRefusedError


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for sub in ("allowed/project/src", "allowed/other", "outside"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "allowed/file.txt").write_text("x")
    (tmp_path / "allowed/link-out").symlink_to(tmp_path / "outside")
    return tmp_path


def test_the_default_is_the_servers_directory_and_relative_paths_start_there(tree: Path) -> None:
    bounds = Bounds.create([], tree / "allowed")
    assert bounds.workspace(None, None) == (tree / "allowed").resolve()
    assert bounds.workspace("  ", None) == (tree / "allowed").resolve()
    assert bounds.workspace("project/src", None) == (tree / "allowed/project/src").resolve()


@pytest.mark.parametrize("requested", ["../outside", "link-out", "project/../../outside", "/", "~"])
def test_paths_that_lead_outside_the_allowed_roots_are_refused(tree: Path, requested: str) -> None:
    bounds = Bounds.create([], tree / "allowed")
    with pytest.raises(WorkspaceRefusedError, match="outside the directories this server allows"):
        bounds.workspace(requested, None)


def test_a_sibling_whose_name_extends_the_root_is_not_inside_it(tree: Path) -> None:
    (tree / "allowed-evil").mkdir()
    with pytest.raises(WorkspaceRefusedError):
        Bounds.create([tree / "allowed"], tree / "allowed").workspace(str(tree / "allowed-evil"), None)


def test_missing_paths_and_files_are_refused_with_their_own_reason(tree: Path) -> None:
    bounds = Bounds.create([], tree / "allowed")
    with pytest.raises(WorkspaceRefusedError, match="does not exist"):
        bounds.workspace("nowhere", None)
    with pytest.raises(WorkspaceRefusedError, match="not a directory"):
        bounds.workspace("file.txt", None)


def test_allow_roots_widen_the_server_limit(tree: Path) -> None:
    bounds = Bounds.create([tree / "allowed", tree / "outside"], tree / "allowed")
    assert bounds.workspace(str(tree / "outside"), None) == (tree / "outside").resolve()
    assert bounds.workspace("link-out", None) == (tree / "outside").resolve()


def test_declared_roots_narrow_it_and_only_local_file_uris_count(tree: Path) -> None:
    bounds = Bounds.create([], tree / "allowed")
    project = (tree / "allowed/project").resolve()
    declared = [project.as_uri(), "https://example.com/repo", "file://otherhost/allowed"]
    assert bounds.workspace("project/src", declared) == project / "src"
    with pytest.raises(WorkspaceRefusedError, match="outside the roots the client declared"):
        bounds.workspace("other", declared)
    # No workspace named: the server's directory is not among the client's roots, so its first root is used.
    assert bounds.workspace(None, declared) == project
    with pytest.raises(WorkspaceRefusedError, match="no workspace was given"):
        bounds.workspace(None, [])
