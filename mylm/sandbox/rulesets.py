"""Landlock rules for a profile; rulesets and confined threads kept while their directories are unchanged."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

from . import landlock
from .profile import Profile, split_hidden
from .thread import ConfinedThread, forget_after_fork

#: Read-only confinements kept, one per workspace (a batch runs many): each is one idle thread.
KEPT_READ_ONLY = 16


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
    """Once, when the first thread is kept (not at import): a forked child has none of them."""
    forget_after_fork(lambda: kept_rulesets.forget())


@lru_cache(maxsize=256)
def _split_system(root: str, hidden: frozenset[str]) -> list[tuple[str, bool]] | None:
    return split_hidden(root, hidden)


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
    """A confined thread kept for one read-only confinement, and how many launches are using it."""

    def __init__(self, generation: int, watched: _Watched, thread: ConfinedThread) -> None:
        self.generation, self.watched, self.thread = generation, watched, thread
        self.users = 0
        self.retired = False


class KeptRulesets:
    """Rulesets made once and kept while the directories they were split from are unchanged.

    The system's rules are the same for every command of a process (one PATH and HOME) and for both grants:
    their paths are opened once. A read-only command adds only its workspace, so its confinement is kept
    whole per workspace, as a thread already confined (`ConfinedThread`) that starts its commands: that saves
    building a ruleset (~0.6 ms), a thread and the confining system calls (~0.4 ms) per command. A
    workspace-write command has a fresh TMPDIR, so its ruleset is made per command from the opened system
    rules. Everything is added to a ruleset under the lock: a descriptor closed by another thread could
    otherwise be reused by an unrelated file between the check and the add. A kept thread that is replaced
    ends only once no launch uses it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._system: tuple[tuple[object, ...], _Watched, landlock.OpenedRules] | None = None
        self._generation = 0
        self._read_only: OrderedDict[tuple[object, ...], _Kept] = OrderedDict()

    def ruleset(self, abi: int, profile: Profile) -> int:
        """A new ruleset descriptor for `profile`: the caller closes it."""
        with self._lock:
            return self._build(abi, profile, self._system_rules(abi, profile))[0]

    @contextmanager
    def read_only_thread(
        self, abi: int, profile: Profile, restrictor: Callable[[int], Callable[[], None]]
    ) -> Iterator[ConfinedThread]:
        """A thread confined by `restrictor(ruleset)` for read-only `profile`, kept for later commands."""
        key = (abi, profile.read, profile.hidden, profile.network, profile.workspace)
        with self._lock:
            system = self._system_rules(abi, profile)
            kept = self._read_only.get(key)
            if kept is None or kept.generation != self._generation or not kept.watched.current():
                fd, watched = self._build(abi, profile, system)
                _forget_in_forked_children()
                try:
                    kept = _Kept(self._generation, watched, ConfinedThread(restrictor(fd)))
                finally:
                    os.close(fd)  # the thread is confined now: the ruleset is not needed again
                if kept.thread.failed:
                    kept.retired = True  # its one launch raises the failure; the next one tries again
                else:
                    self._keep(key, kept)
            if not kept.retired:
                self._read_only.move_to_end(key)
            kept.users += 1
        try:
            yield kept.thread
        finally:
            with self._lock:
                kept.users -= 1
                if kept.retired and not kept.users:
                    kept.thread.close()

    def threads(self) -> list[threading.Thread]:
        """The threads kept now (one per workspace, at most `KEPT_READ_ONLY`)."""
        with self._lock:
            return [kept.thread.thread for kept in self._read_only.values()]

    def forget(self) -> None:
        """Drop everything kept (in a forked child: its threads are the parent's, and not there)."""
        self._lock = threading.Lock()
        self._system = None
        self._read_only = OrderedDict()
        _split_system.cache_clear()

    def _build(self, abi: int, profile: Profile, system: landlock.OpenedRules) -> tuple[int, _Watched]:
        own = _rules(profile, system=False)
        watched = _Watched.of(own, (profile.workspace,))
        return landlock.build_ruleset(abi, own, network=profile.network, opened=[system]), watched

    def _system_rules(self, abi: int, profile: Profile) -> landlock.OpenedRules:
        key = (abi, profile.read, profile.hidden)
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

    def _keep(self, key: tuple[object, ...], kept: _Kept) -> None:
        old = self._read_only.pop(key, None)
        self._read_only[key] = kept
        while len(self._read_only) > KEPT_READ_ONLY:
            self._retire(self._read_only.popitem(last=False)[1])
        if old is not None:
            self._retire(old)

    @staticmethod
    def _retire(kept: _Kept) -> None:
        kept.retired = True
        if not kept.users:
            kept.thread.close()


kept_rulesets = KeptRulesets()
