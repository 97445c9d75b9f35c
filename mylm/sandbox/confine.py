"""Choosing the sandbox (Landlock, else bubblewrap, else none) and preparing one command's confinement."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator, Literal, Mapping, Sequence

from ..types import Grant
from . import bwrap, caps, landlock, seccomp
from .profile import Profile, build_profile, split_hidden

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
    #: inherits that thread's confinement (see `mylm.tools.shell.spawn`).
    restrict: Callable[[], None] | None = None
    env: Mapping[str, str] = field(default_factory=dict)


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

    @property
    def confines(self) -> bool:
        """Whether commands run confined (False: unconfined, so none may run without the user's approval)."""
        return self.backend in ("landlock", "bubblewrap")

    def describe(self) -> str:
        """One line for `mylm config` and the start of a run."""
        profiles = "auto-approved commands read-only, no network; approved ones write the workspace, network "
        profiles += "on" if self.network else "off"
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
        return f"runs with write access to {workspace} and a private TMPDIR only; {net}"

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
            ruleset = landlock.build_ruleset(
                self.landlock_abi, _rules(profile, system=False), network=profile.network,
                opened=[_system_opened(self.landlock_abi, profile)],
            )
            families: tuple[int, ...] | None = None
            if not profile.network:
                families = () if grant == "read-only" else seccomp.LOCAL_ONLY
            socket_filter = seccomp.socket_filter(families) if families is not None else None
            restrict = landlock.restrictor(ruleset, drop_caps=caps.bounding_drop(), seccomp=socket_filter)
            yield Launch(restrict=restrict, env=env)
        finally:
            if ruleset is not None:
                os.close(ruleset)
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)


def landlock_rules(profile: Profile) -> list[landlock.Rule]:
    """The profile as Landlock rules: reads, writes and devices, hidden paths carved out of every tree."""
    return [*_rules(profile, system=True), *_rules(profile, system=False)]


def _rules(profile: Profile, *, system: bool) -> list[landlock.Rule]:
    """The system's rules (the same for every command of a run) or the command's own (workspace, TMPDIR)."""
    write = landlock.fs_rights(6) & ~(landlock.MAKE_CHAR | landlock.MAKE_BLOCK)
    mine = (profile.workspace, profile.tmpdir)
    rules: list[landlock.Rule] = []
    for roots, rights in ((profile.read, landlock.READ), (profile.write, landlock.READ | write)):
        for root in roots:
            if (root in mine) == system:
                continue
            for path, whole in _split(root, profile.hidden, cached=system) or []:
                # A directory on the way to a hidden path may only be listed: a right on it would reach below.
                rules.append(landlock.Rule(path, rights if whole else landlock.READ_DIR, follow=False))
    if system:
        rules.append(landlock.Rule("/dev", landlock.READ_DIR))
        # Not followed: /dev/stdin leads to mylm's own descriptors, which are not the command's to reach.
        rules += [landlock.Rule(d, landlock.READ_FILE | landlock.READ_DIR, follow=False)
                  for d in profile.devices_read]
        rules += [landlock.Rule(d, landlock.WRITE_FILE | landlock.IOCTL_DEV, follow=False)
                  for d in profile.devices_write]
    return rules


def _split(root: str, hidden: frozenset[str], *, cached: bool) -> list[tuple[str, bool]] | None:
    return _split_system(root, hidden) if cached else split_hidden(root, hidden)


@lru_cache(maxsize=256)
def _split_system(root: str, hidden: frozenset[str]) -> list[tuple[str, bool]] | None:
    return split_hidden(root, hidden)


_opened_lock = threading.Lock()
_opened: dict[tuple[object, ...], tuple[tuple[tuple[str, int], ...], landlock.OpenedRules]] = {}


def _system_opened(abi: int, profile: Profile) -> landlock.OpenedRules:
    """The system's rules, opened once and kept while the directories they were split from are unchanged (a
    file renamed over /etc/resolv.conf changes /etc's modification time, and the rules are opened again)."""
    key = (abi, profile.grant, profile.read, profile.hidden)
    with _opened_lock:
        rules = _rules(profile, system=True)
        stamps = tuple((r.path, _mtime(r.path)) for r in rules if r.rights == landlock.READ_DIR)
        found = _opened.get(key)
        if found is not None and found[0] == stamps:
            return found[1]
        # One set at a time (a process has one PATH and HOME): each holds a descriptor per rule.
        for old in _opened.values():
            old[1].close()
        _opened.clear()
        _split_system.cache_clear()
        opened = landlock.OpenedRules(abi, _rules(profile, system=True))
        _opened[key] = (stamps, opened)
        return opened


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def detect(mode: Mode = "auto", *, network: bool = True, private: Sequence[str | os.PathLike[str]] = (),
           environ: Mapping[str, str] | None = None) -> Sandbox:
    """The best sandbox this system offers (Landlock, else bubblewrap), or none; `off` if the user said so."""
    env = os.environ if environ is None else environ
    kept = tuple(str(p) for p in private)
    if mode == "off":
        return Sandbox("off", network, private=kept)
    forced = env.get(BACKEND_ENV, "")
    abi = landlock.abi_version() if forced in ("", "landlock") else 0
    if abi >= 1:
        return Sandbox("landlock", network, landlock_abi=abi, private=kept)
    program = bwrap.find() if forced in ("", "bubblewrap") else None
    if program is not None:
        return Sandbox("bubblewrap", network, private=kept, bwrap_program=program)
    return Sandbox("none", network, private=kept)
