"""Choosing the sandbox (Landlock, else bubblewrap, else none) and preparing one command's confinement."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Mapping, Sequence

from ..types import Grant
from . import bwrap, caps, landlock, process, seccomp
from .profile import build_profile
from .rulesets import kept_rulesets
from .thread import ConfinedThread

Mode = Literal["auto", "off"]
Backend = Literal["landlock", "bubblewrap", "none", "off"]
#: Testing aid: force a backend (`landlock`, `bubblewrap`, `none`). It can only choose a weaker or equal
#: sandbox, and with none every command asks: it never lets a command run unconfined without approval.
BACKEND_ENV = "MYLM_SANDBOX_BACKEND"


@dataclass(frozen=True)
class Launch:
    """How to start one confined command: words before the shell, the confinement to take, its environment."""

    prefix: tuple[str, ...] = ()
    #: Confines the calling thread for good: call it on a fresh thread that then starts the command, which
    #: inherits that thread's confinement (see `mylm.sandbox.thread`).
    restrict: Callable[[], None] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    #: A thread already confined as this command must be, to start it on (instead of `restrict`).
    thread: ConfinedThread | None = None


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

    def _unix_note(self) -> str:
        """What approved commands may do with UNIX sockets, where the seccomp filter says so (Landlock on a
        machine mylm has system call numbers for); bubblewrap mounts only the granted trees instead."""
        if self.backend != "landlock" or not seccomp.supported():
            return ""
        return ", UNIX sockets on" if self.unix_sockets else ", no UNIX sockets"

    @contextmanager
    def launch(self, grant: Grant, workspace: str | os.PathLike[str],
               environ: Mapping[str, str] | None = None) -> Iterator[Launch]:
        """Prepare one command; on leaving, its temporary directory and ruleset are gone. Call it around the
        whole run of the command, so that the temporary directory goes only once every process is stopped."""
        if not self.confines:
            yield Launch()
            return
        tmpdir = tempfile.mkdtemp(prefix="mylm-cmd-") if grant == "workspace-write" else None
        ruleset: int | None = None
        try:
            profile = build_profile(grant, workspace, network=self.network, tmpdir=tmpdir, environ=environ,
                                    private=self.private)
            env = {"TMPDIR": tmpdir} if tmpdir else {}
            if self.backend == "bubblewrap":
                assert self.bwrap_program is not None
                yield Launch(prefix=tuple(bwrap.argv(self.bwrap_program, profile)), env=env)
                return
            unix = seccomp.UNIX if self.unix_sockets else ()
            if grant == "read-only":
                families: tuple[int, ...] = ()
            else:
                families = (*seccomp.INTERNET, *unix) if profile.network else unix

            def restrictor(ruleset: int) -> Callable[[], None]:
                def restrict() -> None:
                    # Built on the thread that confines itself, whose id is then among those protected.
                    guard = seccomp.command_filter(families, _protected_ids())
                    landlock.restrictor(ruleset, drop_caps=caps.bounding_drop(), seccomp=guard)()

                return restrict

            if grant == "read-only" and process.dumpable() is False:
                # The same confinement for every read-only command in this workspace: a thread kept for it.
                # Only in a non-dumpable process: a kept thread shares the commands' Landlock domain, so its
                # /proc/PID/task/TID files (mylm's environment, memory) are as readable to them as
                # dumpability lets them be. Elsewhere a thread confines itself per command and ends.
                with kept_rulesets.read_only_thread(self.landlock_abi, profile, restrictor) as thread:
                    yield Launch(env=env, thread=thread)
                return
            ruleset = kept_rulesets.ruleset(self.landlock_abi, profile)
            yield Launch(restrict=restrictor(ruleset), env=env)
        finally:
            if ruleset is not None:
                os.close(ruleset)
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)


#: The most thread ids a command's filter protects (a jump in classic BPF reaches 255 instructions).
_MAX_PROTECTED = 128


def _protected_ids() -> tuple[int, ...]:
    """mylm's pid and its threads' ids, the calling thread's first: what a command may not signal or inspect."""
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
