"""The launcher: a small confined process that starts mylm's commands, so no thread of mylm holds their
confinement.

Run by `mylm.sandbox.launcher` as `python -I -S launcher_main.py FD` (FD: a memfd holding its JSON
configuration) with the standard library only (it never imports mylm: a fresh interpreter without
site-packages starts in ~15 ms, once per profile and workspace).

It confines itself once (capabilities, no_new_privs, the seccomp filter, the profile's Landlock ruleset), then
for each request received on its control socket (SEQPACKET: a JSON header and, with SCM_RIGHTS, the reply
socket, stdin, stdout, stderr and, for a workspace-write command, the command's own ruleset) it forks an init
(pid 1 of a fresh PID and IPC namespace where the system allows them) that forks the command. The command adds
one more Landlock layer before exec, so its domain is nested below the launcher's: Landlock's scoping keeps it
from signalling the launcher, its init or a sibling command, and its PID namespace gives it no number for any
process outside. The init reports on the reply socket ("X<status>" when the shell exits, "E" when nothing of
the command is left) and obeys it ("T": SIGTERM everything, "K" or the socket closing: SIGKILL everything).
Killing the init empties its namespace (the kernel kills every process in it); without namespaces the init is
a subreaper and sweeps its descendants until none is left.

The control socket closing (mylm ended, even by SIGKILL) ends the launcher, and with it, as the init of its
own PID namespace, every process it started.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import select
import shutil
import signal
import socket
import sys
from typing import Any, NoReturn

# Run as a script with -I (no script directory on sys.path): its two helpers sit beside it, standard library
# only like itself.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launcher_mounts import map_user, mask, own_mount_namespace  # type: ignore[import-not-found]
from launcher_sweep import descendants, drain, reap_children, send_signal  # type: ignore[import-not-found]

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x08000000, 0x10000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 22, 38, 36
LANDLOCK_RESTRICT_SELF = 446
#: close_range (the same number on every architecture) and its flag that marks instead of closing.
CLOSE_RANGE, CLOSE_RANGE_CLOEXEC = 436, 4
#: The reply socket, stdin, stdout, stderr, then optionally the command's ruleset and a long request's body.
FDS_PER_REQUEST = 6
#: A request as mylm sends one, for an init to rehearse with (see `Init._rehearse`): of a real one's size (a
#: read-only command's environment holds ~50 variables, git's forced settings among them), so that taking it
#: in and spawning with it write the pages a real one will. Made once, in the launcher, before any fork.
_SAMPLE_REQUEST = json.dumps({
    "argv": ["/bin/bash", "-c", "echo " + "x" * 60],
    "env": {f"MYLM_SAMPLE_VARIABLE_{i}": "x" * 40 for i in range(56)},
    "cwd": "/", "ruleset": 4, "cwd_id": [1, 2],
}).encode()
#: The signals a command starts with at their default disposition (the init handles some of them).
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD, signal.SIGTERM, signal.SIGQUIT)
#: Inits kept forked ahead: two, so that the one for the next command was forked a whole step earlier, not
#: during the few milliseconds between a command and the next (an agent over a fast model).
SPARES = 2

libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def restrict_self(ruleset: int) -> None:
    check(libc.syscall(ctypes.c_long(LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
          "landlock_restrict_self")


def enter_namespaces(config: dict[str, Any]) -> bool:
    """Become pid 1 of a PID and IPC namespace of our own (in a user namespace when not root), in a mount
    namespace of our own when there are secrets to mask: this process forks, the child goes on as the
    launcher and the parent waits for it. Returns whether that worked."""
    flags = CLONE_NEWPID | CLONE_NEWIPC | (CLONE_NEWUSER if config["userns"] else 0)
    if config["masks"] and libc.unshare(flags | CLONE_NEWNS) == 0:
        config["mountns"] = True
    elif libc.unshare(flags) != 0:
        return False
    if config["userns"]:
        map_user(config)
    child = os.fork()
    if child:
        # Stay, so the launcher is never anyone else's orphan; leave with it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            try:
                _, status = os.waitpid(child, 0)
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
            except InterruptedError:
                continue
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    return True


def nested_namespaces() -> tuple[int, int] | None:
    """Descriptors of this process's own PID and IPC namespaces, if it may make new ones per command and come
    back (unshare, then setns); else None."""
    try:
        own = (os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC),
               os.open("/proc/self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        return None
    if libc.unshare(CLONE_NEWPID | CLONE_NEWIPC) != 0:
        return None
    come_back(own)
    return own


def come_back(own: tuple[int, int]) -> None:
    check(libc.setns(own[0], CLONE_NEWPID), "setns(pid)")
    check(libc.setns(own[1], CLONE_NEWIPC), "setns(ipc)")


def confine(config: dict[str, Any], ruleset: int, own: tuple[int, int] | None) -> None:
    for cap in config["caps_drop"]:
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"PR_CAPBSET_DROP {cap}")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    # Without an IPC namespace per command, the filter refuses SysV IPC (other processes' segments, queues).
    program = bytes.fromhex(config["seccomp" if own is not None else "seccomp_no_ipc_ns"])
    if program:
        code = ctypes.create_string_buffer(program, len(program))

        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        prog = Prog(len(program) // 8, ctypes.addressof(code))
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
        check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.addressof(prog), 0, 0), "PR_SET_SECCOMP")
    restrict_self(ruleset)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def main() -> int:
    with os.fdopen(int(sys.argv[1]), "rb") as settings:  # a memfd mylm wrote the configuration to
        config = json.loads(settings.read())
    control = socket.socket(fileno=config["control"])
    ruleset = config["ruleset"]
    os.set_inheritable(ruleset, False)  # a command holding it could add rules to its later siblings' domain
    config["mountns"] = False
    masked = 0
    try:
        in_namespace = config["namespaces"] and enter_namespaces(config)
        if config["masks"] and not config["mountns"]:
            own_mount_namespace(config)
        if config["mountns"]:
            masked = mask(config["masks"])
        own = nested_namespaces() if in_namespace else None
        confine(config, ruleset, own)
    except OSError as error:
        control.send(b"F" + str(error).encode())
        return 1
    # No collection: it would write to every object, and each page written after a fork is a page copied.
    gc.disable()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    facts = {"pidns": own is not None, "launcher_ns": bool(in_namespace), "mountns": config["mountns"],
             "masked": masked}
    control.send(b"R" + json.dumps(facts).encode())
    try:
        # A launcher without a TMPDIR root serves read-only commands, each run in a layer of the launcher's own
        # ruleset (mylm sends none of its own): its spare inits take that layer while they wait.
        serve(control, ruleset, own, ahead=config.get("tmproot") is None)
    finally:
        if config.get("tmproot"):
            shutil.rmtree(config["tmproot"], ignore_errors=True)
        if in_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # everything this launcher started, wherever it is
            except ProcessLookupError:
                pass  # nothing was left
    return 0


def serve(control: socket.socket, ruleset: int, own: tuple[int, int] | None, *, ahead: bool = False) -> None:
    """Keep mylm supplied with inits forked ahead of time ("S" and the socket each waits on: mylm sends a
    command straight to one), so that neither the fork (with its namespaces, ~1 ms) nor a hop through this
    process is on a command's path. A spare is replaced when one handed out ends, that is once its command is
    over and mylm has let it go: the fork then overlaps mylm's next request to the model, not the command it
    was waiting for. A request sent here instead (two commands at once, or mylm out of spares)
    gets an init forked on the spot. With `ahead`, each init in a namespace of its own takes the command's
    layer of `ruleset` while it waits (see `wait_and_run`)."""
    # Our children (the inits) end with their commands: their exit wakes the loop to reap them and, when it
    # was a spare handed out, to fork another.
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    spares = {supply(control, ruleset, own, ahead) for _ in range(SPARES)} - {0}
    while True:
        try:
            ready, _, _ = select.select([control.fileno(), wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            drain(wake_r)
            ended = reap_children()
            if ended:  # (a fork that failed is tried again at the next init's end)
                spares -= ended
                spares |= {supply(control, ruleset, own, ahead) for _ in range(SPARES - len(spares))} - {0}
        if control.fileno() not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, FDS_PER_REQUEST)
        except InterruptedError:
            continue
        except OSError:
            return
        if not message:
            return
        try:
            for fd in fds:
                os.set_inheritable(fd, False)
            init, _ = fork_init(control, ruleset, own, ahead)
            socket.send_fds(init, [message], fds)
            init.close()
        except OSError as error:  # the reply socket, closed with the fds below, tells mylm it did not start
            report = f"mylm: the sandbox could not start the command: {error}\n".encode()
            try:
                os.write(fds[3], report)
            except (OSError, IndexError):
                pass
        finally:
            for fd in fds:
                os.close(fd)


def supply(control: socket.socket, ruleset: int, own: tuple[int, int] | None, ahead: bool) -> int:
    """Fork an init and hand mylm the socket it waits on; its pid (0 if it could not be forked)."""
    try:
        init, pid = fork_init(control, ruleset, own, ahead)
    except OSError:
        return 0  # no spare this time: requests come here and get an init forked on the spot
    try:
        socket.send_fds(control, [b"S"], [init.fileno()])
    except OSError:
        pass  # mylm is gone: the loop sees it next
    init.close()
    return pid


def fork_init(control: socket.socket, ruleset: int, own: tuple[int, int] | None, ahead: bool = False
              ) -> tuple[socket.socket, int]:
    """Fork an init (into fresh PID and IPC namespaces when `own`), waiting on the socket returned for its
    command; and its pid. `ahead`: see `wait_and_run`."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if own is not None:
        check(libc.unshare(CLONE_NEWPID | CLONE_NEWIPC), "unshare")
    try:
        pid = os.fork()
    except BaseException:
        if own is not None:
            come_back(own)
        raise
    if pid:
        if own is not None:
            come_back(own)  # only here: the child is pid 1 of the new namespace, and cannot leave it
        theirs.close()
        return ours, pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)  # the launcher's, closed below: the init makes its own
        # Only its socket and the ruleset: a fork copies every descriptor, close-on-exec or not, and one
        # kept here (another command's stdout, held by the launcher while it forked) would hold it open.
        low = 3
        for keep in sorted((theirs.fileno(), ruleset)):
            os.closerange(low, keep)
            low = keep + 1
        os.closerange(low, 1 << 16)
        control.detach()
        ours.detach()
        code = wait_and_run(theirs, ruleset, own is not None, ahead=ahead)
    finally:
        os._exit(code)


def wait_and_run(waiting: socket.socket, ruleset: int, namespace: bool, *, ahead: bool = False) -> int:
    """In a spare init: wait for a request (none: the launcher ended), then run it.

    With `ahead` (mylm sends its commands no ruleset: each runs in a layer of the launcher's own) and a
    namespace, the init takes that layer now, while it waits, instead of between the request and the start
    (the kernel copies the ruleset's rules into the new domain: ~0.07 ms). The command's domain is made of
    the same layers either way, the launcher's and one more of its ruleset, and, as before, the init shares
    it (see `spawn_command`); until the request the init runs nothing. A request that brings a ruleset of its
    own all the same gets it as one more layer, which can only narrow what the command may do."""
    init = Init(namespace)
    layered = False
    if ahead and namespace:
        # Refused, the command's path tries again, and reports the failure there.
        with contextlib.suppress(OSError):
            restrict_self(ruleset)
            layered = True
    try:
        message, fds, _, _ = socket.recv_fds(waiting, 65536, FDS_PER_REQUEST)
    except OSError:
        return 0
    waiting.close()
    if not message:
        return 0
    for fd in fds:  # received without close-on-exec: none may reach the command but as its 0-2
        os.set_inheritable(fd, False)
    request = json.loads(message)
    if request.get("body") is not None:  # too long for one message: the rest is in a memfd
        with os.fdopen(os.dup(fds[request["body"]]), "rb") as f:
            request.update(json.loads(f.read()))
    layer: int | None = ruleset
    if request.get("ruleset") is not None:
        layer = fds[request["ruleset"]]
    elif layered:
        layer = None  # taken already
    init.start(fds[0], fds[1:4], layer, request)
    return init.run(fds[1:])


class Init:
    """Pid 1 of one command's namespace (or, without one, the subreaper above it)."""

    def __init__(self, namespace: bool) -> None:
        """Everything that does not depend on the command, done while the init waits for one (the pages it
        writes are copied from the launcher's now, not on the command's path)."""
        self.namespace = namespace
        self._reply: socket.socket | None = None  # the command's, set by `start`
        self.shell = 0
        self.reported = False
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if not namespace:
            check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "PR_SET_CHILD_SUBREAPER")
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # As pid 1, a signal from inside the namespace is dropped unless handled: SIGINT must not be.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # Only a head start: where it fails (out of descriptors, say) the command's path does the same work.
        with contextlib.suppress(OSError):
            self._rehearse()

    def _rehearse(self) -> None:
        """Go once through the Python of a command's start and end, with harmless arguments, while the init
        waits for one: each page of the launcher's memory that path writes (reference counts, mostly) is
        copied from the launcher now, not between a command's request and its start, where the copies cost
        ~0.1 ms (the request taken in, the reply socket made, the cwd checked, the Landlock call)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            socket.send_fds(theirs, [_SAMPLE_REQUEST], [ours.fileno()])
            message, fds, _, _ = socket.recv_fds(ours, 65536, FDS_PER_REQUEST)
            for fd in fds:
                os.set_inheritable(fd, False)
            request = json.loads(message)
            with socket.socket(fileno=fds[0]) as reply:  # a copy of `ours`, made as `start` makes the reply's
                theirs.send(b"X%d" % os.waitstatus_to_exitcode(0))
                reply.recv(16)
            with contextlib.suppress(OSError):
                restrict_self(-1)  # no ruleset: refused (EBADF) before anything is restricted
            # The command's own path to its spawn (`spawn_command`: the directory entered and checked, every
            # descriptor marked close-on-exec, the spawn), with no layer taken and a spawn of nothing: a child
            # is made, as for a command, and its exec of the root directory fails (EACCES: not a file, always);
            # libc collects it. Most of the pages that path writes (the arguments and environment converted, libc's side of
            # the spawn, the interpreter's caches) are then this init's own before a command comes, which takes
            # ~0.1 ms off its start.
            root = os.stat("/")
            nothing = {**request, "argv": ["/", *request["argv"][1:]], "cwd": "/", "cwd_id": [root.st_dev, root.st_ino]}
            with contextlib.suppress(OSError):
                spawn_command([self.wake_r] * 3, None, nothing)
            with contextlib.suppress(ChildProcessError):  # none left: libc collected the one above
                os.waitpid(-1, os.WNOHANG)
            drain(self.wake_r)
        finally:
            ours.close()
            theirs.close()

    def start(self, reply: int, stdio: list[int], layer: int | None, request: dict[str, Any]) -> None:
        """Start the command in one more Landlock layer of `layer` (None: the init has taken it already)."""
        self._reply = socket.socket(fileno=reply)
        namespace = self.namespace
        if namespace:
            try:
                self.shell = spawn_command(stdio, layer, request)
            except OSError as error:
                os.write(stdio[2], f"mylm: the command could not start: {error}\n".encode())
                self.reported = True
                self.send(b"X127")
            return
        assert layer is not None  # without a namespace the init never shares the command's domain
        self.shell = os.fork()
        if self.shell == 0:
            exec_command(stdio, layer, request)

    def run(self, held: list[int]) -> int:
        for fd in held:  # the command has its copies: its output ends when it and its children close theirs
            os.close(fd)
        self.reap()
        while True:
            ready, _, _ = select.select([self.reply.fileno(), self.wake_r], [], [])
            if self.wake_r in ready:
                drain(self.wake_r)
                self.reap()
            if self.reply.fileno() in ready:
                try:
                    order = self.reply.recv(16)
                except OSError:
                    order = b""
                if order == b"T":
                    self.signal_all(signal.SIGTERM)
                    self.signal_all(signal.SIGCONT)
                elif order in (b"K", b""):
                    self.kill_all()
                    self.send(b"E")
                    return 0

    @property
    def reply(self) -> socket.socket:
        assert self._reply is not None
        return self._reply

    def send(self, data: bytes) -> None:
        try:
            self.reply.send(data)
        except OSError:
            pass

    def reap(self) -> None:
        """Collect every child that ended; report the shell's status, then whether nothing is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                if self.reported:
                    self.send(b"E")
                return
            if pid == 0:
                return
            if pid == self.shell:
                self.reported = True
                self.send(b"X%d" % os.waitstatus_to_exitcode(status))

    def signal_all(self, sig: int) -> None:
        if self.namespace:
            try:
                os.kill(-1, sig)  # from pid 1: every other process of the namespace
            except ProcessLookupError:
                pass
            return
        for pid, _ in descendants(os.getpid()):
            send_signal(pid, sig)

    def kill_all(self) -> None:
        """SIGKILL everything below and collect it until nothing is left. In a namespace one signal does it;
        without, a process forking as fast as the sweep would stay one step ahead of it, so everything is
        stopped first (a stopped process forks nothing), scan after scan until none is running, then killed."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if self.namespace:
            self.signal_all(signal.SIGKILL)
            try:
                while os.waitpid(-1, 0)[0]:
                    pass
            except ChildProcessError:
                return
        while True:
            while True:
                found = descendants(os.getpid())
                running = [pid for pid, state in found if state not in b"TtZX"]
                if not running:
                    break
                for pid in running:
                    send_signal(pid, signal.SIGSTOP)
            for pid, _ in found:
                send_signal(pid, signal.SIGKILL)
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                return


def spawn_command(stdio: list[int], layer: int | None, request: dict[str, Any]) -> int:
    """As pid 1 of the command's namespace: take the command's own Landlock layer here, then start it with
    posix_spawn (vfork: no second copy of this interpreter per command). Sharing the command's domain costs
    nothing there: no signal from inside its namespace reaches its init unless the init handles it (only
    SIGCHLD is handled, and it only wakes the reaping), and without CAP_SYS_PTRACE nothing traces it. `layer`
    None: the init took the command's layer while it waited (see `wait_and_run`)."""
    enter(request)
    if layer is not None:
        restrict_self(layer)
    close_on_exec()
    argv = request["argv"]
    try:
        return spawn(argv[0], argv, request["env"], stdio)
    finally:
        os.chdir("/")  # the init holds no directory of the command's


def spawn(path: str, argv: list[str], env: dict[str, str], stdio: list[int]) -> int:
    """posix_spawn `path` in a session of its own with `stdio` as its 0-2 and default signal dispositions."""
    return os.posix_spawn(
        path, argv, env,
        file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(stdio)],
        setsid=True, setsigmask=(), setsigdef=_DEFAULT_SIGNALS,
    )


def enter(request: dict[str, Any]) -> None:
    """Go to the command's directory and, when mylm holds it open (`cwd_id`: its device and inode), make sure
    it is that object: a path swapped for a link since the task began leads elsewhere, and the command must not
    start there. (Not fchdir to mylm's descriptor: that directory is in mylm's mount namespace, where nothing
    is masked.)"""
    os.chdir(request["cwd"])
    wanted = request.get("cwd_id")
    if wanted is not None:
        here = os.stat(".")
        if [here.st_dev, here.st_ino] != list(wanted):
            raise OSError(f"the workspace {request['cwd']} was replaced since the task began")


def close_on_exec() -> None:
    """Mark every descriptor above 2 close-on-exec (posix_spawn has no closefrom): the command gets its stdin,
    stdout and stderr and nothing else of the init's (its reply socket, whose "X<status>" the command could
    otherwise forge, the ruleset, the wake-up pipe). One close_range call (Linux 5.11) where there is one,
    else each descriptor listed in /proc (~0.2 ms on the command's path)."""
    if libc.syscall(ctypes.c_long(CLOSE_RANGE), ctypes.c_uint(3), ctypes.c_uint(0xFFFFFFFF),
                    ctypes.c_uint(CLOSE_RANGE_CLOEXEC)) == 0:
        return
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed by now


def exec_command(stdio: list[int], layer: int, request: dict[str, Any]) -> NoReturn:
    """In the command's process: its own session, stdio, directory and Landlock layer, then exec."""
    try:
        os.setsid()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        enter(request)
        restrict_self(layer)
        os.closerange(3, 1 << 16)
        argv = request["argv"]
        os.execve(argv[0], argv, request["env"])
    except BaseException as error:  # noqa: BLE001 - the command could not start: say why on its stderr
        try:
            os.write(2, f"mylm: the command could not start: {error}\n".encode())
        finally:
            os._exit(127)


if __name__ == "__main__":
    sys.exit(main())
