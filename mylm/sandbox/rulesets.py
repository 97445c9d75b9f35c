"""Landlock rules for a profile; rulesets and launchers kept while their directories are unchanged."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache

from . import landlock
from .launcher import Launcher
from .profile import Profile, split_hidden

#: Launchers kept, one per grant and workspace (a batch runs many): each is two idle processes.
KEPT_LAUNCHERS = 16
#: Kept name for what tests and benchmarks import.
KEPT_READ_ONLY = KEPT_LAUNCHERS


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
            split = _split_system(root, profile.hidden) if system else split_hidden(root, profile.hidden)
            for path, whole in split or []:
                if path == profile.workspace and profile.anchor is not None:
                    # The object held open, through its descriptor (a magic link: followed on purpose).
                    rights = rights if whole else landlock.READ_DIR
                    rules.append(landlock.Rule(f"/proc/self/fd/{profile.anchor}", rights, follow=True))
                    continue
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


@lru_cache(maxsize=1)
def _forget_in_forked_children() -> None:
    """Once, when the first launcher is kept (not at import): a forked child does not own them, and this
    process ends them (and collects them) when it exits."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: kept_rulesets.forget())
    atexit.register(lambda: kept_rulesets.close_all())


@lru_cache(maxsize=256)
def _split_system(root: str, hidden: frozenset[str]) -> list[tuple[str, bool]] | None:
    return split_hidden(root, hidden)


def _system_key(abi: int, profile: Profile) -> tuple[object, ...]:
    """What the system's rules are made from: not the workspace (nor the TMPDIR), so that commands in several
    workspaces (a batch) share them and keep their launchers; before, each change of workspace made them
    again and retired every launcher. Unless a system tree holds the workspace: it may then be split around
    it."""
    return (abi, *_system_roots(profile.read, profile.write, profile.workspace, profile.tmpdir, profile.anchor),
            profile.hidden)


@lru_cache(maxsize=64)
def _system_roots(read: tuple[str, ...], write: tuple[str, ...], ws: str, tmpdir: str | None,
                  anchor: int | None) -> tuple[tuple[str, ...], tuple[str, int | None] | None]:
    """The trees granted but the command's own, and the workspace when one of them holds it (once per
    profile: this is on every command's path)."""
    roots = tuple(r for r in (*read, *write) if r not in (ws, tmpdir))
    inside = any(ws == r or ws.startswith(r.rstrip(os.sep) + os.sep) for r in roots)
    return roots, (ws, anchor) if inside else None


@dataclass(frozen=True)
class _Watched:
    """What the directories a set of rules was made from looked like then: a listed-only directory by its
    contents (a new or renamed entry changes its modification time, and the rules must be made again), a root
    by its identity (a workspace replaced by another directory of the same name must not keep the old one's
    rule)."""

    listed: tuple[str, ...]
    roots: tuple[str, ...]
    stamps: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, rules: list[landlock.Rule], roots: tuple[str, ...] = ()) -> _Watched:
        """Taken before the rules' paths are opened: a change in between only makes them again, later."""
        listed = tuple(dict.fromkeys(r.path for r in rules if r.rights == landlock.READ_DIR))
        return cls(listed, roots, _stamps(listed, roots))

    def current(self) -> bool:
        """Whether every watched directory is as it was."""
        return _stamps(self.listed, self.roots) == self.stamps


def _stamps(listed: tuple[str, ...], roots: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    return (*(_stamp(p, contents=True) for p in listed), *(_stamp(p, contents=False) for p in roots))


def _stamp(path: str, *, contents: bool) -> tuple[int, int, int]:
    """A directory's device and inode and, when its listing matters, its modification time; (-1, -1, -1) if
    it is gone."""
    try:
        info = os.stat(path)
    except OSError:
        return -1, -1, -1
    return info.st_dev, info.st_ino, info.st_mtime_ns if contents else 0


class _Kept:
    """A launcher kept for one confinement, and how many commands are using it."""

    def __init__(self, generation: int, watched: _Watched, launcher: Launcher) -> None:
        self.generation, self.watched, self.launcher = generation, watched, launcher
        self.users = 0
        self.retired = False


#: (grant, abi, readable trees, hidden paths, network, workspace, what else the launcher was made with)
Key = tuple[object, ...]


class KeptRulesets:
    """Rulesets made once and kept while the directories they were split from are unchanged, and the
    launchers confined by them (see `mylm.sandbox.launcher`).

    The system's rules are the same for every command of a process (one PATH and HOME) and for both grants:
    their paths are opened once. A launcher is kept per grant and workspace, confined once: a read-only
    command starts in a copy of its domain, so it costs no ruleset at all; a workspace-write command has a
    fresh TMPDIR under the launcher's, so its own layer is made per command from the opened system rules.
    Everything is added to a ruleset under the lock: a descriptor closed by another thread could otherwise be
    reused by an unrelated file between the check and the add. A kept launcher that is replaced ends only once
    no command uses it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._system: tuple[tuple[object, ...], _Watched, landlock.OpenedRules] | None = None
        self._generation = 0
        self._kept: OrderedDict[Key, _Kept] = OrderedDict()

    def ruleset(self, abi: int, profile: Profile) -> int:
        """A new ruleset descriptor for `profile`: the caller closes it."""
        with self._lock:
            return self._build(abi, profile, self._system_rules(abi, profile))[0]

    @contextmanager
    def launcher(self, abi: int, profile: Profile, make: Callable[[int, str | None], Launcher],
                 extra: tuple[object, ...] = ()) -> Iterator[Launcher]:
        """A launcher for `profile` (without its TMPDIR), kept for later commands: `make(ruleset, tmproot)`
        starts one, confined by the ruleset; a workspace-write one gets a directory for its commands' TMPDIRs,
        granted to it (each command is then confined to its own)."""
        key = (profile.grant, abi, profile.read, profile.hidden, profile.network, profile.workspace, *extra)
        with self._lock:
            system = self._system_rules(abi, profile)
            kept = self._kept.get(key)
            if (kept is None or kept.generation != self._generation or not kept.watched.current()
                    or not kept.launcher.alive()):
                kept = self._start(abi, profile, system, make)
                _forget_in_forked_children()
                self._keep(key, kept)
            self._kept.move_to_end(key)
            kept.users += 1
        try:
            yield kept.launcher
        finally:
            with self._lock:
                kept.users -= 1
                done = kept.retired and not kept.users
            if done:
                _end(kept.launcher)

    def discard(self, launcher: Launcher) -> None:
        """Forget `launcher` (it ended): the next command starts another."""
        with self._lock:
            for key, kept in list(self._kept.items()):
                if kept.launcher is launcher:
                    del self._kept[key]
                    kept.retired = True

    def launchers(self) -> list[Launcher]:
        """The launchers kept now (one per grant and workspace, at most `KEPT_LAUNCHERS`)."""
        with self._lock:
            return [kept.launcher for kept in self._kept.values()]

    def close_all(self) -> None:
        """End every launcher kept (at exit: their commands are over)."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), OrderedDict()
        # All told at once, then collected against one deadline: mylm's exit (after Ctrl-C too) waits a
        # couple of seconds at most, however many launchers it kept.
        for one in kept:
            one.launcher.shutdown()
        deadline = time.monotonic() + 2.0
        for one in kept:
            one.launcher.collect(deadline)

    def forget(self) -> None:
        """Drop everything kept (in a forked child: the launchers are the parent's)."""
        self._lock = threading.Lock()
        self._system = None
        self._kept = OrderedDict()
        _split_system.cache_clear()

    def _start(self, abi: int, profile: Profile, system: landlock.OpenedRules,
               make: Callable[[int, str | None], Launcher]) -> _Kept:
        tmproot = tempfile.mkdtemp(prefix="mylm-cmds-") if profile.grant == "workspace-write" else None
        base = profile
        if tmproot is not None:
            base = replace(profile, write=(*profile.write, tmproot), tmpdir=tmproot)
        fd, watched = self._build(abi, base, system)
        try:
            return _Kept(self._generation, watched, make(fd, tmproot))
        except BaseException:
            if tmproot is not None:
                shutil.rmtree(tmproot, ignore_errors=True)
            raise
        finally:
            os.close(fd)  # the launcher has its copy

    def _build(self, abi: int, profile: Profile, system: landlock.OpenedRules) -> tuple[int, _Watched]:
        own = _rules(profile, system=False)
        watched = _Watched.of(own, (profile.workspace,))
        return landlock.build_ruleset(abi, own, network=profile.network, opened=[system]), watched

    def _system_rules(self, abi: int, profile: Profile) -> landlock.OpenedRules:
        key = _system_key(abi, profile)
        if self._system is not None and self._system[0] == key and self._system[1].current():
            return self._system[2]
        if self._system is not None:
            self._system[2].close()
        _split_system.cache_clear()
        rules = _rules(profile, system=True)
        watched = _Watched.of(rules)
        self._system = (key, watched, landlock.OpenedRules(abi, rules))
        self._generation += 1
        return self._system[2]

    def _keep(self, key: Key, kept: _Kept) -> None:
        old = self._kept.pop(key, None)
        self._kept[key] = kept
        while len(self._kept) > KEPT_LAUNCHERS:
            self._retire(self._kept.popitem(last=False)[1])
        if old is not None:
            self._retire(old)

    @staticmethod
    def _retire(kept: _Kept) -> None:
        kept.retired = True
        if not kept.users:
            _end(kept.launcher)


def _end(launcher: Launcher) -> None:
    """End a launcher no command uses (on its own thread: collecting it may take a moment)."""
    threading.Thread(target=launcher.close, name="mylm-launcher-end", daemon=True).start()


kept_rulesets = KeptRulesets()
