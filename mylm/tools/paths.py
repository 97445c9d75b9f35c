"""Workspace confinement: open paths strictly beneath a root; `..`, absolute paths and escaping links fail.

Resolution happens in the kernel relative to a directory descriptor, so a symlink swapped in between a check
and the open cannot lead outside: `openat2(RESOLVE_BENEATH)` on Linux 5.6+, else a component-by-component walk
with `O_NOFOLLOW` that resolves each symlink itself and refuses any that leaves the root.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import posixpath
import stat
import sys
import weakref
from pathlib import Path
from typing import Literal

from ..core.errors import EscapeError, ToolError
from ..sandbox.hidden import real_path

Resolver = Literal["auto", "openat2", "walk"]

_SYS_OPENAT2 = 437  # the same on every Linux architecture (added after the syscall tables were unified)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_MAX_SYMLINKS = 40
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_openat2_works: bool | None = None


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS); raises OSError, or NotImplementedError without it."""
    global _openat2_works
    if _openat2_works is False or not sys.platform.startswith("linux"):
        raise NotImplementedError  # the syscall number means something else on other systems
    libc = _libc()
    how = _OpenHow(flags | _CLOEXEC, mode if flags & os.O_CREAT else 0,
                   _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = libc.syscall(
        ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        # ENOSYS: kernel before 5.6; EPERM: a seccomp filter (some container runtimes) forbids the call.
        if code in (errno.ENOSYS, errno.EPERM) and _openat2_works is None:
            _openat2_works = False
            raise NotImplementedError
        raise OSError(code, os.strerror(code), path)
    _openat2_works = True
    return int(fd)


class Workspace:
    """The directory the file tools are confined to; every open resolves beneath it."""

    def __init__(self, root: str | os.PathLike[str], *, resolver: Resolver = "auto") -> None:
        self.root = Path(os.path.realpath(root))
        try:
            # Held open for the workspace's life: every open and every command starts from this object, so a
            # path swapped for a link later (another task of `mylm mcp` working in the parent) leads nowhere.
            fd = os.open(self.root, _DIR_FLAGS)
        except OSError:
            raise ToolError(f"the workspace {self.root} is not a directory") from None
        self.fd = fd
        weakref.finalize(self, os.close, fd)
        self._given = Path(os.path.abspath(root))
        self.resolver: Resolver = resolver

    def check_same(self) -> None:
        """Refuse (`EscapeError`) when the workspace's path no longer leads to the directory held open."""
        try:
            now = os.stat(self.root)
        except OSError:
            raise EscapeError(f"the workspace {self.root} is gone") from None
        held = os.fstat(self.fd)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            raise EscapeError(f"the workspace {self.root} was replaced (by a link or another directory) since "
                              "the task began; nothing was done")

    def _root_fd(self) -> int:
        """A fresh descriptor of the held directory (the callers close theirs)."""
        return os.open(".", _DIR_FLAGS, dir_fd=self.fd)

    # ------------------------------------------------------------------------------------- lexical checks

    def relative(self, path: str) -> str:
        """Turn a path the model gave into a clean workspace-relative one ('.' for the root, which "", "./" and
        blanks also name), or refuse it."""
        if "\0" in path:
            raise EscapeError(f"the path {path!r} contains a NUL character")
        # An empty or blank path means the workspace itself, as '.' does: small models list "" to look around.
        text = path.strip() or "."
        if text.startswith("~"):
            raise EscapeError(
                f"'{path}' starts with '~', which is not expanded here; give a path relative to the workspace"
            )
        if posixpath.isabs(text) or os.path.isabs(text):
            for base in (self.root, self._given):
                try:
                    text = str(Path(os.path.normpath(text)).relative_to(base)) or "."
                    break
                except ValueError:
                    continue
            else:
                raise EscapeError(
                    f"'{path}' is outside the workspace ({self.root}); use a path relative to the workspace"
                )
        normal = posixpath.normpath(text.replace(os.sep, "/"))
        if normal == ".." or normal.startswith("../"):
            raise EscapeError(f"'{path}' leads outside the workspace (through '..'); stay inside {self.root}")
        return normal

    def resolve(self, path: str) -> str:
        """The workspace-relative path `path` leads to once symbolic links are followed, as an open would;
        one that leads outside raises `EscapeError`. For the approval policy's checks (secrets, protected
        paths), which must judge the file a call reaches rather than the name it gives."""
        rel = self.relative(path)
        # Not os.path.realpath: it would follow a planted link to /proc/self/cwd/... into mylm's own directory;
        # the open itself refuses links through /proc (RESOLVE_NO_MAGICLINKS), and so does this.
        found = real_path(str(self.root / rel))
        if found is None:
            raise EscapeError(f"'{path}' goes through a link into /proc or /dev/fd (or a link loop)")
        real = Path(found)
        try:
            return real.relative_to(self.root).as_posix()
        except ValueError:
            raise EscapeError(f"'{path}' resolves outside the workspace (through a symbolic link)") from None

    # ------------------------------------------------------------------------------------------ opening

    def open(self, path: str, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
        """Open `path` beneath the root and return the descriptor; symlinks may be followed only inside."""
        rel = self.relative(path)
        root_fd = self._root_fd()
        try:
            return self._open_beneath(root_fd, rel, flags, mode, shown=path)
        finally:
            os.close(root_fd)

    def open_dir(self, path: str, *, create: bool = False) -> int:
        """Open the directory `path` beneath the root (creating missing ones if asked) and return its fd."""
        rel = self.relative(path)
        root_fd = self._root_fd()
        try:
            return self._dir_beneath(root_fd, rel, create=create, shown=path)
        finally:
            os.close(root_fd)

    def _dir_beneath(self, root_fd: int, rel: str, *, create: bool, shown: str) -> int:
        try:
            return self._open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY, 0, shown=shown)
        except FileNotFoundError:
            if not create or rel == ".":
                raise
        parent, name = posixpath.split(rel)
        parent_fd = self._dir_beneath(root_fd, parent or ".", create=True, shown=shown)
        try:
            os.mkdir(name, 0o777, dir_fd=parent_fd)
        except FileExistsError:
            pass  # created meanwhile, or a dangling link sits there: the open below decides
        finally:
            os.close(parent_fd)
        # Resolve again from the root: whatever is there now must still lie beneath it.
        return self._open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY, 0, shown=shown)

    def _open_beneath(self, dir_fd: int, rel: str, flags: int, mode: int, *, shown: str) -> int:
        if self.resolver != "walk":
            try:
                return _openat2(dir_fd, rel, flags, mode)
            except NotImplementedError:
                if self.resolver == "openat2":
                    raise ToolError("openat2 is not available on this system") from None
            except OSError as error:
                # EXDEV: the kernel refuses every absolute symlink under RESOLVE_BENEATH, even one pointing
                # inside; the walk below follows those and refuses (with a clear reason) the ones that escape.
                if error.errno == errno.ELOOP:
                    raise EscapeError(f"'{shown}' goes through too many or unsafe symbolic links") from None
                if error.errno != errno.EXDEV:
                    raise
                if self.resolver == "openat2":
                    raise EscapeError(f"'{shown}' resolves outside the workspace (through a link)") from None
        return self._walk(dir_fd, rel, flags, mode, shown=shown)

    def _walk(self, dir_fd: int, rel: str, flags: int, mode: int, *, shown: str) -> int:
        """Userspace RESOLVE_BENEATH: one `O_NOFOLLOW` step per component, symlinks resolved by hand."""
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        stack = [os.dup(dir_fd)]
        hops = 0
        try:
            if not parts:
                return os.open(".", flags | os.O_NOFOLLOW | _CLOEXEC, mode, dir_fd=stack[-1])
            while parts:
                name = parts.pop(0)
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(stack) == 1:
                        raise EscapeError(f"'{shown}' leads outside the workspace (through '..')")
                    os.close(stack.pop())
                    continue
                last = not parts
                step_flags = (flags if last else _DIR_FLAGS) | os.O_NOFOLLOW | _CLOEXEC
                try:
                    fd = os.open(name, step_flags, mode, dir_fd=stack[-1])
                except OSError as error:
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise
                    hops += 1
                    try:
                        target = os.readlink(name, dir_fd=stack[-1])
                    except OSError:
                        if hops > _MAX_SYMLINKS:
                            raise error from None
                        parts.insert(0, name)  # no longer a link (swapped meanwhile): look at it again
                        continue
                    if hops > _MAX_SYMLINKS:
                        raise EscapeError(f"'{shown}' goes through too many symbolic links") from None
                    if os.path.isabs(target):
                        inside = self._inside(target)
                        if inside is None:
                            raise EscapeError(
                                f"'{shown}' resolves outside the workspace (a symbolic link to {target})"
                            ) from None
                        while len(stack) > 1:
                            os.close(stack.pop())
                        target = inside
                    parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                    continue
                if last:
                    return fd
                stack.append(fd)
            # The path ended in '..' or '.': open the directory we are in.
            return os.open(".", flags | _CLOEXEC, mode, dir_fd=stack[-1])
        finally:
            for fd in stack:
                os.close(fd)

    def _inside(self, absolute: str) -> str | None:
        normal = os.path.normpath(absolute)
        for base in (self.root, self._given):
            try:
                return str(Path(normal).relative_to(base))
            except ValueError:
                continue
        return None


def check_regular(fd: int, shown: str) -> os.stat_result:
    """fstat an open file; refuse all but a regular file with a single link (a hard link can escape)."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"'{shown}' is a directory; use list_dir to see what it contains")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"'{shown}' is not a regular file (but a device, FIFO or socket), so it is not read")
    if info.st_nlink > 1:
        raise EscapeError(
            f"'{shown}' has {info.st_nlink} hard links; a hard link may point at a file outside the "
            "workspace, so mylm does not open it"
        )
    return info
