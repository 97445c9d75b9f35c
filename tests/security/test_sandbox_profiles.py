"""The two sandbox profiles, by really running commands under each backend: what they stop and what they allow."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_support import landlock_sandbox, make

from mylm.sandbox import Sandbox
from mylm.tools.shell import CommandResult, child_environment, run_command
from mylm.core.types import Grant


def run(sandbox: Sandbox, grant: Grant, command: str, workspace: Path) -> CommandResult:
    env = child_environment()
    with sandbox.launch(grant, workspace, env) as launch:
        return run_command(command, cwd=workspace, timeout=20, env=env, launch=launch)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on loopback that accepts connections (the OS picks it)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


CONNECT = "exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"


def test_sandbox_read_only_reads_the_workspace_and_the_system(backend: str, isolated_user_state: Path) -> None:
    (isolated_user_state / "notes.txt").write_text("workspace-content\n")
    result = run(make(backend), "read-only", "cat notes.txt && ls /usr/bin | grep -c . && echo ok > /dev/null",
                 isolated_user_state)
    assert result.exit_code == 0, result.stderr
    assert "workspace-content" in result.stdout


def test_sandbox_read_only_writes_nothing(backend: str, isolated_user_state: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    result = run(make(backend), "read-only",
                 f"echo x > inside.txt; echo x > {outside}; touch {tmp_path}/t; mkdir made; echo rc=$?",
                 isolated_user_state)
    assert not (isolated_user_state / "inside.txt").exists() and not (isolated_user_state / "made").exists()
    assert not outside.exists() and not (tmp_path / "t").exists()
    assert "rc=1" in result.stdout


def test_sandbox_read_only_has_no_network(backend: str, isolated_user_state: Path, listener: int) -> None:
    result = run(make(backend), "read-only", CONNECT.format(port=listener), isolated_user_state)
    assert "CONNECTED" not in result.stdout and result.exit_code != 0


@pytest.mark.parametrize("grant", ["read-only", "workspace-write"])
def test_sandbox_never_reads_credential_places(backend: str, grant: Grant, isolated_user_state: Path) -> None:
    home = Path(os.environ["HOME"])
    for rel in (".ssh/id_rsa", ".aws/credentials", ".netrc", ".config/gh/hosts.yml", ".git-credentials",
                ".docker/config.json", ".kube/config", ".pypirc", ".npmrc", ".gnupg/secring.gpg"):
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"canary-{rel}\n")
    (home / "plain.txt").write_text("canary-home\n")
    mine = home / "config" / "mylm"
    mine.mkdir(parents=True)
    (mine / "config.toml").write_text("canary-mylm-config\n")
    command = "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc ~/.config/gh/hosts.yml ~/.git-credentials " \
              "~/.docker/config.json ~/.kube/config ~/.pypirc ~/.npmrc ~/.gnupg/secring.gpg ~/plain.txt " \
              f"{mine}/config.toml; ls ~/.ssh"
    sandbox = make(backend)
    sandbox = Sandbox(sandbox.backend, landlock_abi=sandbox.landlock_abi, bwrap_program=sandbox.bwrap_program,
                      private=(str(mine),))
    result = run(sandbox, grant, command, isolated_user_state)
    assert "canary" not in result.stdout + result.stderr
    assert "id_rsa" not in result.stdout


def test_sandbox_workspace_write_writes_the_workspace_and_a_private_tmpdir(
    backend: str, isolated_user_state: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    command = (f'echo made > made.txt; echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"; echo "$TMPDIR" > where; '
               f"echo x > {outside}; echo x > /tmp/mylm-sandbox-test-$$; echo done")
    result = run(make(backend), "workspace-write", command, isolated_user_state)
    assert (isolated_user_state / "made.txt").read_text() == "made\n"
    assert "tmp\n" in result.stdout, result.stderr
    tmpdir = (isolated_user_state / "where").read_text().strip()
    assert tmpdir and not Path(tmpdir).exists()  # removed once the command is over
    assert not outside.exists()
    assert not list(Path("/tmp").glob("mylm-sandbox-test-*"))


def test_sandbox_workspace_write_network_setting(backend: str, isolated_user_state: Path, listener: int) -> None:
    on = run(make(backend, network=True), "workspace-write", CONNECT.format(port=listener), isolated_user_state)
    off = run(make(backend, network=False), "workspace-write", CONNECT.format(port=listener), isolated_user_state)
    assert "CONNECTED" in on.stdout, on.stderr
    assert "CONNECTED" not in off.stdout and off.exit_code != 0


def test_sandbox_symlinks_do_not_lead_out(backend: str, isolated_user_state: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("canary-target\n")
    (isolated_user_state / "link").symlink_to(target)
    (isolated_user_state / "dirlink").symlink_to(tmp_path)
    result = run(make(backend), "workspace-write", "cat link; echo pwned > link; echo pwned > dirlink/new.txt",
                 isolated_user_state)
    assert "canary-target" not in result.stdout
    assert target.read_text() == "canary-target\n" and not (tmp_path / "new.txt").exists()


def test_sandbox_background_processes_stay_confined(backend: str, isolated_user_state: Path, tmp_path: Path) -> None:
    marker = tmp_path / "late.txt"
    run(make(backend), "workspace-write", f"(sleep 0.2; echo late > {marker}) & nohup sh -c 'echo x > {marker}' &"
        " disown; exit 0", isolated_user_state)
    assert not marker.exists()


def test_sandbox_landlock_udp_and_unix_sockets_are_blocked_without_network(
    isolated_user_state: Path, tmp_path: Path
) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    port = receiver.getsockname()[1]
    unix = socket.socket(socket.AF_UNIX)
    path = isolated_user_state / "sock"
    unix.bind(str(path))
    unix.listen(1)
    try:
        for grant in ("read-only", "workspace-write"):
            result = run(landlock_sandbox(network=False), grant,
                         f"echo udp > /dev/udp/127.0.0.1/{port}; echo rc=$?", isolated_user_state)
            assert "rc=1" in result.stdout
            with pytest.raises(BlockingIOError):
                receiver.recv(16)
        # A read-only command may not even talk to a local daemon's socket (docker.sock, an ssh agent).
        python = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('sock'); print('UNIX-CONNECTED')"
        result = run(landlock_sandbox(), "read-only", f"python3 -c \"{python}\"", isolated_user_state)
        assert "UNIX-CONNECTED" not in result.stdout
    finally:
        receiver.close()
        unix.close()


UNIX_CONNECT = (
    "import socket\n"
    "a, b = socket.socketpair(); a.sendall(b'x'); print('PAIR-' + b.recv(1).decode())\n"
    "s = socket.socket(socket.AF_UNIX); s.connect('daemon.sock'); print('UNIX-CONNECTED')\n"
)


@pytest.mark.parametrize("network", [True, False])
def test_sandbox_landlock_approved_commands_reach_no_unix_socket_by_default(
    isolated_user_state: Path, network: bool, listener: int
) -> None:
    """Landlock does not cover connecting to a socket file: a Docker socket or the user's D-Bus (which starts
    programs outside any sandbox) would let an approved command out. socket(AF_UNIX) is refused unless the user
    allows it; socketpair() still works, and so does TCP when the network is on."""
    (isolated_user_state / "probe.py").write_text(UNIX_CONNECT)
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(str(isolated_user_state / "daemon.sock"))
    daemon.listen(4)
    try:
        closed = run(landlock_sandbox(network=network), "workspace-write", "python3 probe.py", isolated_user_state)
        allowed = Sandbox("landlock", network, landlock_abi=landlock_sandbox().landlock_abi, unix_sockets=True)
        opened = run(allowed, "workspace-write", "python3 probe.py", isolated_user_state)
        tcp = run(landlock_sandbox(network=network), "workspace-write", CONNECT.format(port=listener),
                  isolated_user_state)
    finally:
        daemon.close()
    assert "PAIR-x" in closed.stdout and "UNIX-CONNECTED" not in closed.stdout, closed.stderr
    assert "PermissionError" in closed.stderr
    assert "PAIR-x" in opened.stdout and "UNIX-CONNECTED" in opened.stdout, opened.stderr
    assert ("CONNECTED" in tcp.stdout) is network


def test_sandbox_unix_socket_setting_is_described() -> None:
    closed = Sandbox("landlock", True, landlock_abi=6)
    opened = Sandbox("landlock", True, landlock_abi=6, unix_sockets=True)
    assert "no UNIX sockets" in closed.describe() and "no UNIX sockets" in closed.access("workspace-write", "/w")
    assert "UNIX sockets on" in opened.describe() and "UNIX sockets on" in opened.access("workspace-write", "/w")


@pytest.mark.parametrize("grant", ["workspace-write", "read-only"])
def test_sandbox_landlock_cannot_signal_or_inspect_mylm(grant: Grant, isolated_user_state: Path) -> None:
    """mylm is not the command's parent (its launcher's init is): by its pid, as found in /proc, it can be
    neither signalled nor inspected; the init the command can see cannot be killed or inspected either. A
    read-only command's init took the command's layer before the command came: the same holds for it."""
    mylm = os.getpid()
    result = run(landlock_sandbox(), grant,
                 f"kill -0 {mylm} && echo SIGNALLED; kill -KILL $PPID; kill -STOP $PPID; "
                 f"ls -l /proc/{mylm}/cwd /proc/{mylm}/fd/ /proc/$PPID/root /proc/$PPID/fd/ 2>&1 | grep -c -- '->'",
                 isolated_user_state)
    assert "SIGNALLED" not in result.stdout
    assert result.stdout.strip().endswith("0"), result  # the init survived: the command ran on


def test_sandbox_confines_only_the_command_not_mylm(isolated_user_state: Path, tmp_path: Path) -> None:
    """The confinement is taken on by a throwaway thread: mylm's own threads keep their access."""
    run(landlock_sandbox(network=False), "read-only", "true", isolated_user_state)
    (tmp_path / "still-writable.txt").write_text("yes")
    with open("/proc/thread-self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    assert fields["NoNewPrivs"].strip() == "0" and fields["Seccomp"].strip() == "0"


def test_sandbox_read_only_git_works_and_its_credentials_stay_hidden(backend: str, isolated_user_state: Path) -> None:
    """git refuses to run when ~/.gitconfig is unreadable, so that one file is readable; its credentials are not."""
    import subprocess

    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text("[user]\n\tname = Someone\n\temail = s@example.com\n")
    (home / ".git-credentials").write_text("https://u:canary-git-token@example.com\n")
    subprocess.run(["git", "init", "-q"], cwd=isolated_user_state, check=True)
    (isolated_user_state / "a.txt").write_text("a\n")
    result = run(make(backend), "read-only",
                 "git status --short && git config user.name && cat ~/.git-credentials", isolated_user_state)
    assert "?? a.txt" in result.stdout and "Someone" in result.stdout, result.stderr
    assert "canary-git-token" not in result.stdout + result.stderr


@pytest.mark.parametrize("abi", [1, 2, 3, 4, 5, 6])
def test_sandbox_landlock_older_abis_still_confine(
    abi: int, isolated_user_state: Path, tmp_path: Path, listener: int
) -> None:
    """An older kernel's ABI (simulated: a newer kernel accepts an older ruleset) handles fewer rights; what it
    lacks for the network the seccomp filter covers."""
    current = landlock_sandbox()
    if current.landlock_abi < abi:
        pytest.skip(f"this kernel has Landlock ABI {current.landlock_abi}")
    older = Sandbox("landlock", True, landlock_abi=abi)
    (isolated_user_state / "in.txt").write_text("readable\n")
    command = f"cat in.txt; echo x > {tmp_path}/out.txt; echo x > new.txt; " + CONNECT.format(port=listener)
    result = run(older, "read-only", command, isolated_user_state)
    assert "readable" in result.stdout and "CONNECTED" not in result.stdout
    assert not (tmp_path / "out.txt").exists() and not (isolated_user_state / "new.txt").exists()
    written = run(older, "workspace-write", f"echo x > new.txt; echo x > {tmp_path}/out.txt", isolated_user_state)
    assert (isolated_user_state / "new.txt").exists() and not (tmp_path / "out.txt").exists(), written.stderr
