"""Commands start in a separate confined launcher: nothing of mylm shares their confinement, the kernel empties
their container at the end, and what Landlock does not model (SysV IPC, set-id modes) is refused."""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_support import landlock_sandbox

from mylm.tools.shell import child_environment, run_command
from mylm.core.types import Grant

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the probes use x86-64 numbers")

# A hostile command: for every thread of mylm (found in /proc; the pid is handed to it, as a command that
# searched /proc would find it), an O_ASYNC pipe owned by that thread with SIGKILL as its I/O signal, then I/O
# on it. Had the owner been accepted, the kernel would deliver SIGKILL to mylm.
SIGIO_KILL = r"""
import fcntl, os, signal, struct, sys
F_SETSIG, F_SETOWN_EX, F_OWNER_TID, F_OWNER_PID = 10, 15, 0, 1
pid = int(sys.argv[1])
owned = 0
for tid in [int(t) for t in os.listdir(f"/proc/{pid}/task")]:
    for kind in (F_OWNER_TID, F_OWNER_PID):
        r, w = os.pipe()
        try:
            fcntl.fcntl(r, F_SETSIG, signal.SIGKILL)
            fcntl.fcntl(r, F_SETOWN_EX, struct.pack("ii", kind, tid))
            fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
            os.write(w, b"x")
            owned += 1
        except OSError:
            pass
print("owned", owned)
"""

# mylm as the CLI runs it (non-dumpable, a subreaper), running the hostile command under both grants.
HOST = r"""
import os, sys
from pathlib import Path
from mylm.sandbox import detect, protect_process
from mylm.tools import procs
from mylm.tools.shell import child_environment, run_command
protect_process()
procs.become_subreaper()
workspace = Path(sys.argv[1])
sandbox = detect()
env = child_environment()
for grant in ("read-only", "workspace-write", "read-only"):
    with sandbox.launch(grant, workspace, env) as launch:
        result = run_command(f"python3 sigio.py {os.getpid()}", cwd=workspace, timeout=60, env=env, launch=launch)
    print(grant, result.exit_code, result.stdout.strip(), result.stderr.strip()[-300:])
print("alive")
"""


@pytest.mark.parametrize("namespaces", ["on", "off"])
def test_an_io_signal_owned_by_a_thread_of_mylm_does_not_kill_it(
    workspace: Path, subprocess_env: dict[str, str], namespaces: str
) -> None:
    """Before the launcher, the read-only command shared a Landlock domain with a kept thread of mylm, and
    F_SETOWN_EX + F_SETSIG made the kernel SIGKILL mylm (exit -9). Without PID namespaces too (the fallback),
    the nested domain alone keeps mylm out of reach."""
    landlock_sandbox()
    (workspace / "sigio.py").write_text(SIGIO_KILL)
    env = {**subprocess_env, "MYLM_SANDBOX_NAMESPACES": namespaces}
    done = subprocess.run([sys.executable, "-c", HOST, str(workspace)], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert done.stdout.splitlines()[-1] == "alive"
    assert done.stdout.count(" 0 owned") == 3, done.stdout


def run(grant: Grant, command: str, workspace: Path, timeout: float = 30) -> object:
    sandbox = landlock_sandbox()
    env = child_environment()
    with sandbox.launch(grant, workspace, env) as launch:
        return run_command(command, cwd=workspace, timeout=timeout, env=env, launch=launch)


# Forks forever: each generation starts a new session, renames itself, drops its environment and exits once
# its child runs, so that no tag, group, session or name finds it and a sweep is always one generation late.
WALKER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None)
if os.fork():
    os._exit(0)
while True:
    os.setsid()
    libc.prctl(15, b"kworker/0:1", 0, 0, 0)
    os.environ.clear()
    if os.fork():
        os._exit(0)
"""


def _in(workspace: Path) -> list[int]:
    """Processes whose current directory is `workspace` (how the walker is found whatever it calls itself)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if os.readlink(f"/proc/{name}/cwd") == str(workspace):
                    found.append(int(name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("namespaces", ["on", "off"])
@pytest.mark.parametrize("grant", ["read-only", "workspace-write"])
def test_a_forking_renamed_walker_in_a_new_session_does_not_outlive_its_command(
    workspace: Path, grant: Grant, namespaces: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MYLM_SANDBOX_NAMESPACES", namespaces)
    (workspace / "walker.py").write_text(WALKER)
    try:
        result = run(grant, "python3 walker.py; echo started", workspace)
        assert "started" in result.stdout  # type: ignore[attr-defined]
        assert _in(workspace) == []
    finally:
        _kill_all_in(workspace)  # on a failure, the walker must not be left to load the machine


def _kill_all_in(workspace: Path) -> None:
    for _ in range(10000):
        found = _in(workspace)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def _shm(key: int, size: int, flags: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.shmget(key, size, flags))


SHM_PROBE = r"""
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
found = libc.shmget(int(sys.argv[1]), 0, 0)
print("reach", "ok" if found >= 0 else errno.errorcode[ctypes.get_errno()])
made = libc.shmget(int(sys.argv[2]), 4096, 0o1000 | 0o600)
print("make", "ok" if made >= 0 else errno.errorcode[ctypes.get_errno()])
"""


@pytest.mark.parametrize("namespaces", ["on", "off"])
def test_sysv_ipc_of_other_processes_is_out_of_reach_and_nothing_outlives_the_run(
    workspace: Path, namespaces: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an IPC namespace per command, a segment made outside does not exist for it and what it makes
    goes with it; without one, SysV IPC is refused altogether."""
    monkeypatch.setenv("MYLM_SANDBOX_NAMESPACES", namespaces)
    theirs, mine = 0x6D796C00 + os.getpid() % 256, 0x6D796D00 + os.getpid() % 256
    segment = _shm(theirs, 4096, 0o1000 | 0o600)
    assert segment >= 0
    try:
        (workspace / "shm.py").write_text(SHM_PROBE)
        result = run("workspace-write", f"python3 shm.py {theirs} {mine}", workspace)
        out = result.stdout  # type: ignore[attr-defined]
        assert "reach ok" not in out and "reach" in out, out
        assert ("make ok" in out) == (namespaces == "on"), out
        assert _shm(mine, 0, 0) < 0  # nothing the command made is left
    finally:
        ctypes.CDLL(None).shmctl(segment, 0, None)  # IPC_RMID


SET_ID = r"""
import os, shutil, stat, subprocess
shutil.copy("/bin/bash", "b1")
for name, call in (
    ("chmod", lambda: os.chmod("b1", 0o4755)),
    ("chmod-g", lambda: os.chmod("b1", 0o2755)),
    ("fchmod", lambda: os.fchmod(os.open("b1", os.O_RDONLY), 0o6755)),
    ("open", lambda: os.open("b2", os.O_CREAT | os.O_WRONLY, 0o4755)),
    ("mknod", lambda: os.mknod("b3", stat.S_IFREG | 0o4755)),
):
    try:
        call()
        print(name, "ok")
    except OSError as error:
        print(name, error.errno)
subprocess.run(["chmod", "u+s", "b1"])
subprocess.run(["install", "-m", "4755", "/bin/bash", "b4"])
subprocess.run(["cp", "--preserve=mode", "/usr/bin/passwd", "b5"])
"""


def test_an_approved_command_cannot_leave_a_set_id_program_in_the_workspace(workspace: Path) -> None:
    (workspace / "setid.py").write_text(SET_ID)
    result = run("workspace-write", "python3 setid.py", workspace)
    assert (workspace / "b1").exists(), (result.stdout, result.stderr)  # type: ignore[attr-defined]
    set_id = [p.name for p in workspace.iterdir() if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]
    assert set_id == [], (set_id, result.stdout)  # type: ignore[attr-defined]
    assert " ok" not in result.stdout  # type: ignore[attr-defined]


def test_ordinary_modes_still_work(workspace: Path) -> None:
    result = run("workspace-write", "touch s && chmod 755 s && mkdir d && chmod 700 d && echo fine", workspace)
    assert "fine" in result.stdout, result.stderr  # type: ignore[attr-defined]
    assert stat.S_IMODE((workspace / "s").stat().st_mode) == 0o755


ABSTRACT = r"""
import socket, sys
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(b"\0" + sys.argv[1].encode())
    s.sendall(b"reached")
    print("connected")
except OSError as error:
    print("refused", error.errno)
"""


@pytest.mark.parametrize("backend", ["landlock", "bubblewrap"])
def test_abstract_unix_sockets_outside_are_out_of_reach_without_unix_sockets(
    workspace: Path, backend: str
) -> None:
    """With `sandbox_unix_sockets = false` and the network on, an approved command reaches no abstract socket
    of the machine: Landlock scopes them (ABI 6); under bubblewrap the same seccomp filter refuses AF_UNIX."""
    import socket

    from sandbox_support import make

    sandbox = make(backend, network=True)
    name = f"mylm-abstract-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(b"\0" + name.encode())
    server.listen(1)
    server.setblocking(False)
    try:
        (workspace / "abstract.py").write_text(ABSTRACT)
        env = child_environment()
        with sandbox.launch("workspace-write", workspace, env) as launch:
            result = run_command(f"python3 abstract.py {name}", cwd=workspace, timeout=30, env=env, launch=launch)
        assert "refused" in result.stdout, (result.stdout, result.stderr)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


UNPRIVILEGED = r"""
import sys
sys.path.insert(0, sys.argv[1])
from mylm.sandbox import detect
from mylm.sandbox.rulesets import kept_rulesets
from mylm.tools.shell import child_environment, run_command
sandbox, env = detect(), child_environment()
with sandbox.launch("workspace-write", sys.argv[2], env) as launch:
    result = run_command("touch made; echo $$; (setsid sleep 7777 &); echo done", cwd=sys.argv[2], timeout=20,
                         env=env, launch=launch)
print(result.stdout.split(), [launcher.pid_namespaces for launcher in kept_rulesets.launchers()])
"""


def test_an_unprivileged_user_gets_the_same_containers_through_a_user_namespace() -> None:
    """Not root: the launcher makes its namespaces inside a user namespace (where the system allows one)."""
    import pwd
    import shutil

    from mylm.core.paths import __file__ as paths_file

    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to become another user) and a system python3")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user")
    checkout = str(Path(paths_file).resolve().parents[1])
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="mylm-nobody-", dir="/tmp"))  # pytest's own directories are root's alone
    space, home = top / "space", top / "home"
    top.chmod(0o755)
    for directory in (space, home):
        directory.mkdir()
        os.chown(directory, nobody.pw_uid, nobody.pw_gid)
    probe = subprocess.run([python, "-c", "import mylm.sandbox"], cwd="/", env={"PYTHONPATH": checkout},
                           user=nobody.pw_uid, group=nobody.pw_gid, capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the checkout is not importable by 'nobody' with the system python3")
    done = subprocess.run([python, "-c", UNPRIVILEGED, checkout, str(space)], cwd="/",
                          env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, user=nobody.pw_uid,
                          group=nobody.pw_gid, capture_output=True, text=True, timeout=120, check=False)
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "['2', 'done'] [True]", (done.stdout, done.stderr[-2000:])
        assert (space / "made").stat().st_uid == nobody.pw_uid
        assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).endswith("sleep 7777")]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


# A spare init's rehearsal, outside any launcher: it spawns (a child whose exec of the root directory fails) and
# must leave no child, no pending wake-up and nothing of its own behind for the command.
REHEARSAL = r"""
import errno, os, sys
sys.path.insert(0, sys.argv[1])
import launcher_main
failed = []
real = launcher_main.spawn
def spawn(*args):
    try:
        return real(*args)
    except OSError as error:
        failed.append(errno.errorcode[error.errno])
        raise
launcher_main.spawn = spawn
init = launcher_main.Init(namespace=False)
try:
    os.waitpid(-1, os.WNOHANG)
    print("a child is left")
except ChildProcessError:
    print("no child left")
try:
    os.read(init.wake_r, 64)
    print("a wake-up is pending")
except BlockingIOError:
    print("nothing to wake for")
print("spawn failed with", *failed)
"""


def test_a_spare_init_rehearses_a_spawn_of_nothing_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """The rehearsal goes through a command's spawn and makes a real child (so that a command's start finds its
    pages written already), whose exec of the root directory fails: libc collects it, and the wake-up its end
    caused is drained before a command."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", REHEARSAL, str(Path(launcher_main_path()).parent)],
        capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path,
    )
    assert done.stdout.splitlines() == ["no child left", "nothing to wake for", "spawn failed with EACCES"], done


def launcher_main_path() -> str:
    from mylm.sandbox import launcher

    return launcher._PROGRAM
