"""The confinement kept between read-only commands: never staler, looser or longer-lived than a fresh one."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest
from sandbox_support import landlock_sandbox

from mylm.sandbox import Sandbox, protect_process
from mylm.sandbox.rulesets import KEPT_READ_ONLY, kept_rulesets
from mylm.tools.shell import CommandResult, child_environment, run_command
from mylm.types import Grant


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


def kept_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mylm-confined"]


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


def test_read_only_commands_in_many_workspaces_at_once(isolated_user_state: Path, tmp_path: Path) -> None:
    """More workspaces than are kept, from several threads (a batch): each command reads its own workspace
    and writes nothing; replaced confinements end once no command uses them."""
    sandbox = landlock_sandbox()
    count = KEPT_READ_ONLY + 8
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
    kept = kept_rulesets.threads()
    assert 0 < len(kept) <= KEPT_READ_ONLY
    for thread in kept_threads():
        if thread not in kept:
            thread.join(timeout=10)  # retired: it ends once its last command has started
            assert not thread.is_alive()


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


def test_collection_stays_off_until_the_last_confined_start_is_done() -> None:
    """Two threads starting confined commands at once: the first to finish must not turn collection back on
    while the other's confined thread may still run a finalizer."""
    import gc

    from mylm.sandbox.thread import no_collection

    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with no_collection:
            first_in.set()
            second_in.wait()
        first_out.set()

    def second() -> None:
        first_in.wait()
        with no_collection:
            second_in.set()
            first_out.wait()
            seen.append(gc.isenabled())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [False] and gc.isenabled()


def test_a_confinement_that_cannot_be_applied_runs_nothing_on_a_kept_thread() -> None:
    from mylm.errors import ToolError
    from mylm.sandbox.thread import ConfinedThread

    def broken() -> None:
        raise OSError(1, "landlock_restrict_self failed")

    ran: list[bool] = []
    thread = ConfinedThread(broken)
    with pytest.raises(ToolError, match="sandbox could not be applied"):
        thread.run(lambda: ran.append(True))
    assert not ran


def test_a_confinement_that_failed_is_not_kept(isolated_user_state: Path, tmp_path: Path) -> None:
    """A thread whose confinement failed refuses its command, and is not kept for the next one."""
    from mylm.errors import ToolError
    from mylm.sandbox.profile import build_profile

    sandbox = landlock_sandbox()
    profile = build_profile("read-only", isolated_user_state, network=False)
    calls: list[int] = []

    def restrictor(ruleset: int) -> Callable[[], None]:
        def restrict() -> None:
            calls.append(ruleset)
            if len(calls) == 1:
                raise OSError(1, "landlock_restrict_self failed")

        return restrict

    for _ in range(2):
        with kept_rulesets.read_only_thread(sandbox.landlock_abi, profile, restrictor) as thread:
            if len(calls) == 1:
                with pytest.raises(ToolError, match="could not be applied"):
                    thread.run(lambda: None)
            else:
                thread.run(lambda: None)
    assert len(calls) == 2
