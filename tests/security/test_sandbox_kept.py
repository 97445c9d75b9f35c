"""The launchers kept between commands: never staler, looser or longer-lived than a fresh one, restarted if killed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_support import landlock_sandbox

from mylm.sandbox import Sandbox, protect_process
from mylm.sandbox.rulesets import KEPT_LAUNCHERS, kept_rulesets
from mylm.tools.shell import CommandResult, child_environment, run_command
from mylm.core.types import Grant


@pytest.fixture(autouse=True)
def non_dumpable() -> Iterator[None]:
    """As the CLI runs: a non-dumpable process, where read-only commands start from a kept confined thread."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    assert protect_process()
    try:
        yield
    finally:
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as pytest was


def run(sandbox: Sandbox, grant: Grant, command: str, workspace: Path) -> CommandResult:
    env = child_environment()
    with sandbox.launch(grant, workspace, env) as launch:
        return run_command(command, cwd=workspace, timeout=20, env=env, launch=launch)


def test_a_file_made_after_the_first_command_is_readable_and_secrets_stay_hidden(
    isolated_user_state: Path,
) -> None:
    """The workspace is $HOME, which holds hidden places: its rules list it entry by entry, so a new entry
    needs new rules; a kept confinement that missed it would deny the file."""
    sandbox = landlock_sandbox()
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text("canary-key\n")
    assert run(sandbox, "read-only", "ls", home).exit_code == 0
    (home / "later.txt").write_text("made-later\n")
    result = run(sandbox, "read-only", "cat later.txt; cat .ssh/id_rsa", home)
    assert "made-later" in result.stdout
    assert "canary-key" not in result.stdout
    (home / ".aws").mkdir()  # a hidden place that did not exist when the rules were made
    (home / ".aws" / "credentials").write_text("canary-aws\n")
    result = run(sandbox, "read-only", "cat .aws/credentials", home)
    assert "canary-aws" not in result.stdout and result.exit_code != 0


def test_a_workspace_replaced_under_the_same_name_is_the_one_read(
    isolated_user_state: Path, tmp_path: Path
) -> None:
    sandbox = landlock_sandbox()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("first\n")
    assert "first" in run(sandbox, "read-only", "cat a.txt", workspace).stdout
    shutil.rmtree(workspace)
    workspace.mkdir()
    (workspace / "a.txt").write_text("second\n")
    result = run(sandbox, "read-only", "cat a.txt", workspace)
    assert result.exit_code == 0 and "second" in result.stdout, result.stderr


def test_read_only_commands_in_many_workspaces_at_once(
    isolated_user_state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More workspaces than are kept, from several threads (a batch): each command reads its own workspace
    and writes nothing; replaced launchers end once no command uses them."""
    from mylm.sandbox import rulesets

    sandbox = landlock_sandbox()
    ended: list[object] = []
    # Retired launchers end on a thread of their own; here at once, to see them go.
    monkeypatch.setattr(rulesets, "_end", lambda launcher: (launcher.close(), ended.append(launcher)))
    count = KEPT_LAUNCHERS + 8
    spaces = []
    for index in range(count):
        space = tmp_path / f"w{index}"
        space.mkdir()
        (space / "id.txt").write_text(f"space-{index}\n")
        spaces.append(space)
    failures: list[str] = []

    def worker(offset: int) -> None:
        for step in range(count):
            index = (offset + step) % count
            other = (index + 1) % count
            result = run(sandbox, "read-only", f"cat id.txt {spaces[other]}/id.txt; touch x", spaces[index])
            wrong = f"space-{other}" in result.stdout or (spaces[index] / "x").exists()
            if f"space-{index}\n" not in result.stdout or wrong:
                failures.append(f"{index}: {result.stdout!r} {result.stderr!r}")

    threads = [threading.Thread(target=worker, args=(offset * 5,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    kept = kept_rulesets.launchers()
    assert 0 < len(kept) <= KEPT_LAUNCHERS
    assert len(ended) >= count - KEPT_LAUNCHERS
    assert not set(ended) & set(kept)
    assert all(launcher._process.returncode is not None for launcher in ended)  # type: ignore[attr-defined]


def test_a_read_only_command_denied_to_another_workspace_in_the_same_process(
    isolated_user_state: Path, tmp_path: Path,
) -> None:
    """Two workspaces, one kept confinement each: neither reads the other's files."""
    sandbox = landlock_sandbox()
    first, second = tmp_path / "one", tmp_path / "two"
    for space in (first, second):
        space.mkdir()
        (space / "secret.txt").write_text(f"canary-{space.name}\n")
    assert "canary-one" in run(sandbox, "read-only", "cat secret.txt", first).stdout
    result = run(sandbox, "read-only", f"cat secret.txt {first}/secret.txt", second)
    assert "canary-two" in result.stdout and "canary-one" not in result.stdout


def test_commands_alternating_between_workspaces_keep_their_launchers(
    isolated_user_state: Path, tmp_path: Path,
) -> None:
    """A batch runs tasks in several workspaces at once. Before: the system's rules were keyed by the
    workspace too, so each change of workspace made them again and started a new launcher for every command
    (a fresh interpreter, ~20 ms, where a kept one costs ~2 ms); each still reads only its own workspace."""
    sandbox = landlock_sandbox()
    spaces = [tmp_path / "one", tmp_path / "two"]
    for space in spaces:
        space.mkdir()
        (space / "secret.txt").write_text(f"canary-{space.name}\n")
    earlier = set(kept_rulesets.launchers())  # other tests' (kept objects: their ids are not reused)
    started = set()
    for _ in range(3):
        for space, other in (spaces, spaces[::-1]):
            result = run(sandbox, "read-only", f"cat secret.txt {other}/secret.txt", space)
            assert f"canary-{space.name}" in result.stdout and f"canary-{other.name}" not in result.stdout
            started |= set(kept_rulesets.launchers()) - earlier
    assert len(started) == 2, f"{len(started)} launchers for 6 commands in 2 workspaces"


def test_a_workspace_write_command_between_read_only_ones(isolated_user_state: Path) -> None:
    sandbox = landlock_sandbox()
    workspace = isolated_user_state
    assert run(sandbox, "read-only", "touch a; echo rc=$?", workspace).stdout.strip().endswith("rc=1")
    assert run(sandbox, "workspace-write", "touch b && echo done", workspace).exit_code == 0
    assert (workspace / "b").exists() and not (workspace / "a").exists()
    assert run(sandbox, "read-only", "touch c; echo rc=$?", workspace).stdout.strip().endswith("rc=1")
    assert not (workspace / "c").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_runs_read_only_commands(isolated_user_state: Path) -> None:
    """The kept threads exist only in the parent: a forked child makes its own instead of waiting forever."""
    sandbox = landlock_sandbox()
    workspace = isolated_user_state
    (workspace / "f.txt").write_text("from-the-child\n")
    assert run(sandbox, "read-only", "true", workspace).exit_code == 0
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        signal.alarm(30)  # a child waiting on a thread that is not there would otherwise hang the suite
        try:
            result = run(sandbox, "read-only", "cat f.txt; touch g; echo rc=$?", workspace)
            os.write(writer, result.stdout.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    assert "from-the-child" in out and "rc=1" in out and not (workspace / "g").exists()


def test_a_launcher_that_cannot_confine_itself_runs_nothing(tmp_path: Path) -> None:
    """A descriptor that is not a Landlock ruleset: the launcher fails before it serves, and says why."""
    from mylm.core.errors import ToolError
    from mylm.sandbox.launcher import Launcher, LauncherSpec

    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(ToolError, match="sandbox could not be applied .*landlock_restrict_self"):
            Launcher(LauncherSpec(null, b"", b"", ()))
    finally:
        os.close(null)


def test_a_launcher_killed_from_outside_is_replaced(isolated_user_state: Path) -> None:
    """Killed (by the user, the OOM killer), it takes its commands with it; the next command gets a new one."""
    sandbox = landlock_sandbox()
    assert run(sandbox, "read-only", "true", isolated_user_state).exit_code == 0
    launcher = kept_rulesets.launchers()[-1]
    os.kill(launcher._process.pid, signal.SIGKILL)
    launcher._process.wait(timeout=10)
    (isolated_user_state / "n.txt").write_text("after-the-kill\n")
    result = run(sandbox, "read-only", "cat n.txt", isolated_user_state)
    assert result.exit_code == 0 and "after-the-kill" in result.stdout
    assert kept_rulesets.launchers()[-1] is not launcher


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Still running: neither gone nor a zombie (whose descriptors are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _idle_inits(root: int) -> dict[int, int]:
    """The launcher's processes that have none of their own, by their parent: its idle spare inits (the
    launcher, and the process holding its namespace, have children)."""
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        below = _children(parent)
        todo += below
        found |= {pid: parent for pid in below if not _children(pid)}
    return found


def test_a_spare_init_that_ends_is_replaced_without_mylm_asking(isolated_user_state: Path) -> None:
    """The launcher forks the next spare init when the one it handed out ends (after its command), not when
    mylm sends it a command, so the fork is never on a command's path. Before: only mylm's "N", sent as each
    command started, brought a new spare; a spare that ended unused (killed) was never replaced."""
    import time

    sandbox = landlock_sandbox()
    assert run(sandbox, "read-only", "true", isolated_user_state).exit_code == 0
    root = kept_rulesets.launchers()[-1]._process.pid  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20
    def steady_leaves() -> dict[int, int]:
        # A spare waits; a process seen in only one of two scans was passing through.
        first = _idle_inits(root)
        time.sleep(0.05)
        return {pid: parent for pid, parent in _idle_inits(root).items() if first.get(pid) == parent}

    while not (spares := steady_leaves()) and time.monotonic() < deadline:
        pass
    assert spares, "no spare init waited for a command"
    launchers = set(spares.values())
    for pid in spares:
        # A leaf found by the scan may have ended since (a command's short-lived process, or a spare whose
        # turn came): gone already is what the kill is for.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # SIGKILL is queued, not done: until each of them has ended (its socket closed), a command sent to one is
    # taken in and lost with it. "Ended" is the precondition of this test, so wait for it.
    while any(_alive(pid) for pid in spares) and time.monotonic() < deadline:
        time.sleep(0.05)

    def new_spares() -> set[int]:
        return {pid for launcher in launchers for pid in _children(launcher)} - set(spares)

    while not new_spares() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert new_spares(), "the launcher forked no spare init after its spare ended"
    result = run(sandbox, "read-only", "echo still", isolated_user_state)
    assert result.exit_code == 0 and result.stdout == "still\n"
