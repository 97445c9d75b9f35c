"""mylm's side of the launcher (see `launcher_main`): starting one, sending it commands, a command's handle."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import LauncherGoneError, ToolError

_PROGRAM = str(Path(__file__).with_name("launcher_main.py"))
#: A request longer than this goes in a memfd (a SEQPACKET message must fit the socket's buffer).
_INLINE = 32 * 1024
#: How long a launcher may take to start and confine itself (a fresh interpreter: ~15-50 ms when idle).
_START_TIMEOUT = 30.0


@dataclass(frozen=True)
class LauncherSpec:
    """How a launcher confines itself: its Landlock ruleset (a descriptor, passed), the seccomp programs
    (with and without SysV IPC, used when it gets no IPC namespace of its own), the capabilities to drop."""

    ruleset: int
    seccomp: bytes
    seccomp_no_ipc_ns: bytes
    caps_drop: tuple[int, ...]
    #: The directory holding the TMPDIRs of its commands (workspace-write), removed when it ends.
    tmproot: str | None = None
    namespaces: bool = True
    #: Secrets to mask in the launcher's mount namespace: (absolute path, is a directory).
    masks: tuple[tuple[str, bool], ...] = ()



class Launcher:
    """One confined launcher process and its control socket; `start` runs a command through it."""

    def __init__(self, spec: LauncherSpec) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {
            "control": theirs.fileno(), "ruleset": spec.ruleset, "seccomp": spec.seccomp.hex(),
            "seccomp_no_ipc_ns": spec.seccomp_no_ipc_ns.hex(), "caps_drop": list(spec.caps_drop),
            "tmproot": spec.tmproot, "namespaces": spec.namespaces, "userns": os.geteuid() != 0,
            "uid": os.geteuid(), "gid": os.getegid(), "masks": [list(m) for m in spec.masks],
        }
        self.tmproot = spec.tmproot
        self._lock = threading.Lock()
        self._control = ours
        #: Inits the launcher forked ahead, each waiting on its socket for one command.
        self._spares: list[socket.socket] = []
        # In a memfd, not on the command line: a workspace with many secrets to mask makes a long list, and one
        # argument may not exceed 128 KiB.
        settings = os.memfd_create("mylm-launcher-config", os.MFD_CLOEXEC)
        os.write(settings, json.dumps(config).encode())
        os.lseek(settings, 0, os.SEEK_SET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", _PROGRAM, str(settings)],
                pass_fds=(theirs.fileno(), spec.ruleset, settings),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                # Its own session (a Ctrl-C at the terminal is mylm's to handle), holding no directory.
                start_new_session=True, env={}, cwd="/",
            )
        except OSError as error:
            ours.close()
            why = f"the command did not run: its sandbox's launcher could not start ({error})"
            raise ToolError(why) from error
        finally:
            theirs.close()
            os.close(settings)
        ready, _, _ = select.select([ours], [], [], _START_TIMEOUT)
        hello = ours.recv(4096) if ready else b""
        if hello[:1] != b"R":
            self.close()
            why = hello[1:].decode(errors="replace") or "it ended or did not answer"
            raise ToolError(f"the command did not run: its sandbox could not be applied ({why})")
        facts = json.loads(hello[1:])
        #: Whether each command gets a PID namespace of its own (the kernel then empties it at once).
        self.pid_namespaces: bool = facts["pidns"]
        #: Whether its commands run in a mount namespace of its own, and how many secrets it masks there.
        self.mount_namespace: bool = facts["mountns"]
        self.masked: int = facts["masked"]

    def alive(self) -> bool:
        """Whether the launcher is still running."""
        return self._process.poll() is None

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str],
              stdio: tuple[int, int, int], ruleset: int | None = None,
              cwd_id: tuple[int, int] | None = None) -> Child:
        """Start `argv` in `cwd` (only if it is the directory with device and inode `cwd_id`, when given) with
        `env` and the three descriptors as its stdin, stdout and stderr, in its own layer of `ruleset` (else
        the launcher's own). Raises `LauncherGoneError` if the launcher has ended."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = [theirs.fileno(), *stdio]
        header: dict[str, object] = {"argv": list(argv), "env": dict(env), "cwd": os.fspath(cwd)}
        if ruleset is not None:
            header["ruleset"] = len(fds)
            fds.append(ruleset)
        if cwd_id is not None:
            header["cwd_id"] = list(cwd_id)
        body = json.dumps(header).encode()
        memfd = None
        try:
            if len(body) > _INLINE:
                memfd = os.memfd_create("mylm-request", os.MFD_CLOEXEC)
                os.write(memfd, body)
                os.lseek(memfd, 0, os.SEEK_SET)
                body = json.dumps({"body": len(fds)}).encode()
                fds.append(memfd)
            with self._lock:
                self._send(body, fds)
        except OSError as error:
            ours.close()
            raise LauncherGoneError(f"the sandbox's launcher ended ({error})") from error
        finally:
            theirs.close()
            if memfd is not None:
                os.close(memfd)
        return Child(ours)

    def _send(self, body: bytes, fds: list[int]) -> None:
        """To an init waiting for it when there is one, else to the launcher. Under the lock. (The launcher
        forks another spare when this one's init ends, after the command.)

        The inits the launcher sent since are taken in after the command is sent when one was already at hand
        (the command is then under way in the init, and mylm only waits for it), else before. Those at hand came
        first, so the one forked first is still the one used."""
        for collected in (False, True):
            if collected:
                self._collect()
            while self._spares:
                spare = self._spares.pop(0)  # the one forked first: settled for longest
                try:
                    socket.send_fds(spare, [body], fds)
                except OSError:
                    continue  # that init is gone (killed): the next one, or the launcher
                finally:
                    spare.close()
                if not collected:
                    with contextlib.suppress(OSError):  # the launcher ended: the next command finds out
                        self._collect()
                return
        socket.send_fds(self._control, [body], fds)

    def _collect(self) -> None:
        """Take the inits the launcher has sent since."""
        while True:
            try:
                # Not socket.recv_fds: it drops its flags argument (CPython 3.11), and this must not block.
                message, ancillary, _, _ = self._control.recvmsg(16, socket.CMSG_LEN(4), socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            fds = [int.from_bytes(data[i:i + 4], sys.byteorder) for level, kind, data in ancillary
                   if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS for i in range(0, len(data) - 3, 4)]
            if not message:
                raise OSError("the launcher ended")
            for fd in fds:
                if message == b"S":
                    self._spares.append(socket.socket(fileno=fd))
                else:
                    os.close(fd)

    def close(self, deadline: float | None = None) -> None:
        """End the launcher (and anything it still runs), collect it and remove its commands' TMPDIR root.
        It is killed if it has not ended by `deadline` (a `time.monotonic()` value; default: 2 s from now)."""
        self.shutdown()
        self.collect(deadline)

    def shutdown(self) -> None:
        """Tell the launcher to end (its control socket closes), without waiting for it."""
        for spare in self._spares:
            spare.close()
        self._spares.clear()
        self._control.close()

    def collect(self, deadline: float | None = None) -> None:
        """Wait for the launcher that was told to end until `deadline`, then SIGKILL it (its launcher, pid 1
        of its namespace, dies with it and takes every command along); remove the TMPDIR root, which the
        confined launcher could empty but not remove (it may not write its parent)."""
        end = time.monotonic() + 2.0 if deadline is None else deadline
        try:
            self._process.wait(timeout=max(end - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self.tmproot is not None:
            shutil.rmtree(self.tmproot, ignore_errors=True)


class Child:
    """One command started by a launcher, seen through its reply socket: its init reports the shell's exit
    ("X<code>") and when nothing of the command is left ("E"), and kills everything when told ("K") or when
    this socket closes."""

    def __init__(self, reply: socket.socket) -> None:
        reply.setblocking(False)
        self._reply = reply
        self.returncode: int | None = None
        #: Whether nothing of the command is left (its namespace is empty).
        self.empty = False
        #: Whether the reply socket is closed: the init ended.
        self.gone = False

    def fileno(self) -> int:
        """Readable when the init reports something."""
        return self._reply.fileno()

    @property
    def exited(self) -> bool:
        """Whether the shell has exited (or the init ended without saying: it was killed)."""
        return self.returncode is not None or self.gone

    def read_reports(self) -> None:
        """Take in every report waiting."""
        while not self.gone:
            try:
                report = self._reply.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                report = b""
            if not report:
                self.gone = self.empty = True  # an init that ended took its namespace with it
            elif report[:1] == b"X":
                self.returncode = int(report[1:])
            elif report == b"E":
                self.empty = True

    def _order(self, order: bytes) -> None:
        try:
            self._reply.send(order)
        except OSError:
            pass  # the init is gone, and everything with it

    def kill(self) -> None:
        """SIGKILL everything of the command now (from any thread)."""
        self._order(b"K")

    def stop(self, grace: float) -> int:
        """SIGTERM everything of the command, SIGKILL what is left after `grace` seconds (at once if 0);
        return how many survive a further second (0, or 1 if the init could not empty its namespace)."""
        self.read_reports()
        if self.empty:
            return 0
        if grace > 0:
            self._order(b"T")
            if self._wait_empty(grace):
                return 0
        self.kill()
        return 0 if self._wait_empty(1.0) else 1

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the shell to exit; its exit code (negative: the signal), None if killed unreported."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.read_reports()
        while not self.exited:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self._reply], [], [], left)[0] and left == 0:
                break
            self.read_reports()
        return self.returncode

    def _wait_empty(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        self.read_reports()
        while not self.empty:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([self._reply], [], [], left)
            self.read_reports()
        return True

    def close(self) -> None:
        """Let the init go (it kills whatever is still there and ends). Unless it said its namespace is empty,
        see it end, so that nothing of the command outlives the call (a second at most: it only has to
        collect what it killed)."""
        self.read_reports()
        if self.empty:
            self._reply.close()
            return
        try:
            self._reply.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 1.0
            self.read_reports()
            while not self.gone and (left := deadline - time.monotonic()) > 0:
                select.select([self._reply], [], [], left)
                self.read_reports()
        except OSError:
            pass
        finally:
            self._reply.close()
