"""Choosing the sandbox (Landlock, else bubblewrap, else none) and preparing one command's confinement."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ..core.errors import LauncherGoneError, ToolError
from ..core.types import Grant
from . import bwrap, caps, landlock, seccomp
from .hidden import scans
from .launcher import Child, Launcher, LauncherSpec
from .profile import Profile, build_profile
from .rulesets import kept_rulesets

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

Mode = Literal["auto", "off"]
#: Starts a command through a launcher: (argv, env, cwd, (stdin, stdout, stderr) descriptors) -> its handle.
Starter = Callable[[Sequence[str], Mapping[str, str], "str | os.PathLike[str]", tuple[int, int, int]], Child]
Backend = Literal["landlock", "bubblewrap", "none", "off"]
#: Testing aid: force a backend (`landlock`, `bubblewrap`, `none`). It can only choose a weaker or equal
#: sandbox, and with none every command asks: it never lets a command run unconfined without approval.
BACKEND_ENV = "MYLM_SANDBOX_BACKEND"
#: Testing aid: `off` starts commands without their own PID and IPC namespaces (the fallback where the system
#: allows none): the launcher then sweeps a command's processes and the filter refuses SysV IPC.
NAMESPACES_ENV = "MYLM_SANDBOX_NAMESPACES"
#: Testing aid: `off` masks nothing (the fallback where no mount namespace can be made): the approval policy's
#: checks and Landlock's rules are then all that keep secrets from commands.
MASKS_ENV = "MYLM_SANDBOX_MASKS"


@dataclass(frozen=True)
class Launch:
    """How to start one confined command: words before the shell, the confinement to take, its environment."""

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: Starts the command in a confined launcher process (Landlock): (argv, env, cwd, (stdin, stdout,
    #: stderr) descriptors) -> the command's handle. None: start it with Popen (after `prefix`).
    start: Starter | None = None
    #: Descriptors the command (bubblewrap) must inherit: its seccomp program.
    pass_fds: tuple[int, ...] = ()


@dataclass(frozen=True)
class Sandbox:
    """The sandbox in force for a run's commands: its backend and the workspace-write network setting."""

    backend: Backend
    #: Whether workspace-write commands may use the network (read-only ones never can).
    network: bool = True
    landlock_abi: int = 0
    #: Directories no command may read even if a granted tree holds them (mylm's config and data).
    private: tuple[str, ...] = ()
    bwrap_program: str | None = None
    #: Whether workspace-write commands may open UNIX sockets (read-only ones never can). Landlock does not
    #: cover connecting to a socket file, and one the user can reach (Docker's, the user's D-Bus, which starts
    #: programs outside any sandbox) would let a command out; socketpair() is allowed either way.
    unix_sockets: bool = False

    @property
    def confines(self) -> bool:
        """Whether commands run confined (False: unconfined, so none may run without the user's approval)."""
        return self.backend in ("landlock", "bubblewrap")

    def describe(self) -> str:
        """One line for `mylm config` and the start of a run."""
        profiles = "auto-approved commands read-only, no network; approved ones write the workspace, network "
        profiles += "on" if self.network else "off"
        profiles += self._unix_note()
        if self.backend == "landlock":
            gaps = "" if self.landlock_abi >= 6 else "; signals and abstract sockets not scoped (ABI < 6)"
            return f"landlock ABI {self.landlock_abi}: {profiles}{gaps}"
        if self.backend == "bubblewrap":
            return f"bubblewrap ({self.bwrap_program}): {profiles}"
        if self.backend == "off":
            return "unconfined (sandbox = off): every command asks unless you approve commands"
        return "unconfined (no Landlock, no bubblewrap here): every command asks unless you approve commands"

    def access(self, grant: Grant, workspace: str | os.PathLike[str]) -> str:
        """What a command with `grant` may do, for the approval prompt."""
        if not self.confines:
            return "runs UNCONFINED: it can do anything you can (no sandbox)"
        if grant == "read-only":
            return f"runs read-only: it may read {workspace} and the system, write nothing, use no network"
        net = "network on" if self.network else "no network"
        return f"runs with write access to {workspace} and a private TMPDIR only; {net}{self._unix_note()}"

    def explain(self, grant: Grant, workspace: str | os.PathLike[str], environ: Mapping[str, str] | None,
                output: str) -> str:
        """One line when a confined command's `output` shows the sandbox stopped it (see
        `mylm.sandbox.explain`), else ""."""
        from .explain import explain, worth_a_look

        if not self.confines or not worth_a_look(output):
            return ""
        profile = build_profile(grant, workspace, network=self.network, environ=environ, private=self.private)
        return explain(profile, output, profile.workspace)

    def _unix_note(self) -> str:
        """What approved commands may do with UNIX sockets, where the seccomp filter says so (Landlock on a
        machine mylm has system call numbers for); bubblewrap mounts only the granted trees instead."""
        if self.backend != "landlock" or not seccomp.supported():
            return ""
        return ", UNIX sockets on" if self.unix_sockets else ", no UNIX sockets"

    @contextmanager
    def launch(self, grant: Grant, workspace: str | os.PathLike[str],
               environ: Mapping[str, str] | None = None, anchor: int | None = None) -> Iterator[Launch]:
        """Prepare one command; on leaving, its temporary directory and ruleset are gone. Call it around the
        whole run of the command, so that the temporary directory goes only once every process is stopped.

        `anchor`, a descriptor holding the workspace open, confines the command to that object: it starts
        there, and its workspace rule is made on it. A workspace path that no longer leads to it (swapped for
        a link meanwhile) is refused."""
        if anchor is not None:
            _same_object(workspace, anchor)
        if not self.confines:
            yield Launch()
            return
        unix = seccomp.UNIX if self.unix_sockets else ()
        if grant == "read-only":
            families: tuple[int, ...] = ()
        else:
            families = (*seccomp.INTERNET, *unix) if self.network else unix
        if self.backend == "bubblewrap":
            with self._bubblewrap(grant, workspace, environ, families) as launch:
                yield launch
            return
        base = build_profile(grant, workspace, network=self.network, environ=environ, private=self.private,
                             anchor=anchor)

        namespaces = os.environ.get(NAMESPACES_ENV) != "off"
        masks = self.masks(grant, base)

        def make(ruleset: int, tmproot: str | None) -> Launcher:
            protected = _protected_ids()
            return Launcher(LauncherSpec(
                ruleset, seccomp.command_program(families, protected), seccomp.command_program(
                    families, protected, sysv=False), caps.bounding_drop(), tmproot, namespaces, masks))

        held = None if anchor is None else (os.fstat(anchor).st_dev, os.fstat(anchor).st_ino)
        extra = (self.unix_sockets, namespaces, masks, held)
        with (kept_rulesets.launcher(self.landlock_abi, base, make, extra) as launcher,
              self._own_layer(base, launcher, environ) as (ruleset, tmp_env)):
            def start(argv: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str],
                      stdio: tuple[int, int, int]) -> Child:
                try:
                    return launcher.start(argv, env, cwd, stdio, ruleset, cwd_id=held)
                except LauncherGoneError:
                    kept_rulesets.discard(launcher)  # the next command starts another
                    raise

            yield Launch(env=tmp_env, start=start)

    def masks(self, grant: Grant, profile: Profile) -> tuple[tuple[str, bool], ...]:
        """What a command's mount namespace covers: the credential floor and mylm's own directories (hidden
        by Landlock's rules as well) and, for a read-only command, every secret in the workspace (which
        Landlock grants whole): the auto-approved cannot read a secret by any name. Never the workspace or
        a directory holding it."""
        if os.environ.get(MASKS_ENV) == "off":
            return ()
        return _masks(profile.workspace, profile.hidden, scans.get(profile.workspace).found if grant == "read-only"
                      else ())

    @contextmanager
    def _own_layer(self, base: Profile, launcher: Launcher, environ: Mapping[str, str] | None
                   ) -> Iterator[tuple[int | None, dict[str, str]]]:
        """A read-only command runs in a copy of its launcher's domain (no ruleset to make); a workspace-write
        one gets a TMPDIR inside the launcher's and a ruleset granting only that one."""
        if launcher.tmproot is None:
            yield None, {}
            return
        tmpdir = tempfile.mkdtemp(prefix="mylm-cmd-", dir=launcher.tmproot)
        ruleset: int | None = None
        try:
            own = build_profile(base.grant, base.workspace, network=self.network, tmpdir=tmpdir,
                                environ=environ, private=self.private, anchor=base.anchor)
            ruleset = kept_rulesets.ruleset(self.landlock_abi, own)
            yield ruleset, {"TMPDIR": tmpdir}
        finally:
            if ruleset is not None:
                os.close(ruleset)
            _discard(tmpdir)

    @contextmanager
    def _bubblewrap(self, grant: Grant, workspace: str | os.PathLike[str], environ: Mapping[str, str] | None,
                    families: tuple[int, ...]) -> Iterator[Launch]:
        """bubblewrap's words for one command, with the seccomp filter handed to it in a memfd (its own
        namespaces hold the command's processes, IPC and, without network, its sockets)."""
        assert self.bwrap_program is not None
        tmpdir = tempfile.mkdtemp(prefix="mylm-cmd-") if grant == "workspace-write" else None
        program = seccomp.command_program(families)
        memfd: int | None = None
        try:
            profile = build_profile(grant, workspace, network=self.network, tmpdir=tmpdir, environ=environ,
                                    private=self.private)
            masked = frozenset(path for path, _ in self.masks(grant, profile))
            profile = replace(profile, hidden=profile.hidden | masked)  # bubblewrap covers each one it mounts
            words = bwrap.argv(self.bwrap_program, profile, caps.bounding_drop())
            if program:
                memfd = os.memfd_create("mylm-seccomp", 0)
                os.write(memfd, program)
                os.lseek(memfd, 0, os.SEEK_SET)
                words[-1:-1] = ["--seccomp", str(memfd)]
            yield Launch(prefix=tuple(words), env={"TMPDIR": tmpdir} if tmpdir else {},
                         pass_fds=(memfd,) if memfd is not None else ())
        finally:
            if memfd is not None:
                os.close(memfd)
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)


@functools.lru_cache(maxsize=64)
def _masks(ws: str, hidden: frozenset[str], found: tuple[tuple[str, bool], ...]) -> tuple[tuple[str, bool], ...]:
    """`Sandbox.masks` for one workspace, hidden set and scan: the same for every command until the scan
    changes (filtering ~90 paths cost ~30 µs a command)."""
    listed = [(path, False) for path in sorted(hidden)] + list(found)
    return tuple(m for m in listed if not (ws == m[0] or ws.startswith(m[0].rstrip(os.sep) + os.sep)))


def _discard(tmpdir: str) -> None:
    """Remove a finished command's TMPDIR: renamed out of the way at once (its path is gone when the command
    is), deleted on a thread of its own. Deleting a directory waits on the file system's journal (~4 ms on
    an ext4 mounted with `discard`, 0.04 ms of it CPU), which would otherwise be on every approved command's
    path. Whatever is left at exit goes with the launcher's TMPDIR root, which holds it."""
    gone = os.path.join(os.path.dirname(tmpdir), ".gone-" + os.path.basename(tmpdir))
    try:
        os.rename(tmpdir, gone)
    except OSError:
        shutil.rmtree(tmpdir, ignore_errors=True)
        return
    _remover().submit(shutil.rmtree, gone, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def _remover() -> ThreadPoolExecutor:
    """One thread deleting finished TMPDIRs (made on first use, not at import; a forked child makes its own)."""
    import concurrent.futures

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_remover.cache_clear)
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mylm-tmpdir-removal")


def _same_object(workspace: str | os.PathLike[str], anchor: int) -> None:
    """Refuse a command whose workspace path no longer leads to the directory held open for it."""
    try:
        now = os.stat(workspace)
    except OSError as error:
        raise ToolError(f"the command did not run: its workspace {workspace} is gone ({error.strerror})") from None
    held = os.fstat(anchor)
    if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise ToolError(f"the command did not run: its workspace {workspace} was replaced (by a link or another "
                        "directory) since the task began")


#: The most thread ids a command's filter protects (a jump in classic BPF reaches 255 instructions).
_MAX_PROTECTED = 64


def _protected_ids() -> tuple[int, ...]:
    """mylm's pid and its threads' ids when a launcher starts: what a command may not signal or inspect, where
    neither its PID namespace nor Landlock's scoping already hides them."""
    own = threading.get_native_id()
    others = [t.native_id for t in threading.enumerate() if t.native_id and t.native_id != own]
    return (os.getpid(), own, *others[: _MAX_PROTECTED - 2])


def detect(mode: Mode = "auto", *, network: bool = True, private: Sequence[str | os.PathLike[str]] = (),
           environ: Mapping[str, str] | None = None, unix_sockets: bool = False) -> Sandbox:
    """The best sandbox this system offers (Landlock, else bubblewrap), or none; `off` if the user said so."""
    env = os.environ if environ is None else environ
    kept = tuple(str(p) for p in private)
    if mode == "off":
        return Sandbox("off", network, private=kept, unix_sockets=unix_sockets)
    forced = env.get(BACKEND_ENV, "")
    abi = landlock.abi_version() if forced in ("", "landlock") else 0
    if abi >= 1:
        return Sandbox("landlock", network, landlock_abi=abi, private=kept, unix_sockets=unix_sockets)
    program = bwrap.find() if forced in ("", "bubblewrap") else None
    if program is not None:
        return Sandbox("bubblewrap", network, private=kept, bwrap_program=program, unix_sockets=unix_sockets)
    return Sandbox("none", network, private=kept, unix_sockets=unix_sockets)
