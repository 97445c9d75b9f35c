"""Measure the tool defences with real processes and files: latency, survivors, flood memory, escapes.

    python scripts/bench_tools.py

Prints the figures published in the README (Benchmarks: Tools): what the command sandbox costs, and what an
approval decision costs. Takes about half a minute on 2 cores.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mylm.core.cancel import CancelToken
from mylm.core.errors import CancelledError, ToolError
from mylm.tools.files import edit_text, read_text, write_text
from mylm.tools.paths import Workspace
from mylm.approval import ApprovalPolicy, decide
from mylm.tools.shell import ShellLimits, run_command, shell_tool
from mylm.core.types import ToolCall

CANARY = "OUTSIDE-CANARY"


def marker() -> str:
    return f"{secrets.randbelow(9 * 10**5) + 10**5}.{secrets.randbelow(9 * 10**5) + 10**5}"


def survivors(mark: str) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                count += mark.encode() in f.read()
        except (OSError, IndexError):
            continue
    return count


def timed(command: str, timeout: float, cwd: str) -> float:
    started = time.monotonic()
    run_command(command, cwd=cwd, timeout=timeout)
    return time.monotonic() - started


def bench_latency(cwd: str) -> None:
    runs = [timed(f"sleep {marker()}", 1.0, cwd) for _ in range(5)]
    print(
        f"timeout-to-return, `sleep` with a 1 s timeout (5 runs): median {statistics.median(runs):.3f} s, "
        f"max {max(runs):.3f} s"
    )
    drain = timed(f"setsid sleep {marker()} & echo started", 10.0, cwd)
    print(f"setsid grandchild holding stdout (exits at once, 2 s drain): returned in {drain:.3f} s")
    stubborn = timed(f"trap '' TERM; sleep {marker()}", 1.0, cwd)
    print(f"SIGTERM ignored, 1 s timeout (2 s grace, then SIGKILL): returned in {stubborn:.3f} s")


def bench_survivors(cwd: str) -> None:
    fast = ShellLimits(drain_seconds=0.5, kill_grace=0.5)
    scenarios = {
        "sleeper": ("sleep {m}", 0.5),
        "background child": ("sleep {m} > /dev/null 2>&1 & echo bg", 5),
        "setsid grandchild holding stdout": ("setsid sleep {m} & echo started", 5),
        "setsid grandchild, output redirected": ("setsid sleep {m} > /dev/null 2>&1 &", 5),
        "double fork": ("(setsid sleep {m} > /dev/null 2>&1 &); echo forked", 5),
        "nohup": ("nohup sleep {m} > /dev/null 2>&1 &", 5),
        "five background jobs": ("for i in 1 2 3 4 5; do sleep {m} & done; wait", 0.5),
        "SIGTERM ignored": ("trap '' TERM; sleep {m}", 0.5),
        "flood (1 GiB)": ("yes {m} | head -c 1073741824", 30),
        "waiting on stdin": ("read x; cat; sleep {m}", 0.5),
    }
    total = 0
    for command, timeout in scenarios.values():
        mark = marker()
        run_command(command.format(m=mark), cwd=cwd, timeout=timeout, limits=fast)
        total += survivors(mark)
    mark = marker()
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    try:
        run_command(f"sleep {mark} & sleep {mark}", cwd=cwd, timeout=30, limits=fast, cancel=token)
    except CancelledError:
        pass
    total += survivors(mark)
    print(f"survivors after {len(scenarios) + 1} scenarios (incl. cancel mid-command): {total}")


_FLOOD_PROBE = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from mylm.tools.shell import ShellLimits, run_command
command, cap = sys.argv[2], int(sys.argv[3])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
result = run_command(command, cwd=".", timeout=120, limits=ShellLimits(stream_cap=cap))
spent = time.monotonic() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps([before, after, result.output_bytes, len(result.stdout), spent, result.stopped]))
"""


def bench_flood(cwd: str) -> None:
    cases = [
        ("1 GiB `yes`, default 64 MiB cap", "yes | head -c 1073741824", 64 * 2**20),
        ("1 GiB `yes`, cap lifted (read to the end)", "yes | head -c 1073741824", 2 * 2**30),
        ("256 MiB single line, default cap", "head -c 268435456 /dev/zero | tr '\\0' x", 64 * 2**20),
    ]
    for label, command, cap in cases:
        out = subprocess.run(
            [sys.executable, "-c", _FLOOD_PROBE, str(ROOT), command, str(cap)],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        before, after, read, kept, spent, stopped = json.loads(out.stdout)
        print(
            f"{label}: peak RSS {after / 1024:.1f} MB (baseline {before / 1024:.1f} MB, "
            f"+{(after - before) / 1024:.1f} MB), read {read / 2**20:.0f} MiB, kept {kept:,} chars, "
            f"{spent:.2f} s{', ' + stopped if stopped else ''}"
        )


def _exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2)


def _attack_tree(base: Path) -> tuple[Path, Path]:
    ws, out = base / "ws", base / "outside"
    ws.mkdir()
    out.mkdir()
    for name in ("secret.txt", "victim.txt"):
        (out / name).write_text(CANARY)
    (ws / "inside.txt").write_text("inside\n")
    os.symlink(out, ws / "docs")
    os.symlink("../outside", ws / "rel_out")
    os.symlink(out / "secret.txt", ws / "abs_file")
    os.symlink("../outside/secret.txt", ws / "rel_file")
    os.symlink(out / "new.txt", ws / "dangling")
    os.link(out / "secret.txt", ws / "hard")
    return ws, out


def bench_escapes() -> None:
    reads = [
        "../outside/secret.txt",
        "{out}/secret.txt",
        "docs/secret.txt",
        "rel_out/secret.txt",
        "abs_file",
        "rel_file",
        "hard",
        "x/../../outside/secret.txt",
        "~/../outside/secret.txt",
        "inside.txt\0/../../outside/secret.txt",
        "/proc/self/root{out}/secret.txt",
    ]
    writes = [
        "../outside/victim.txt",
        "{out}/victim.txt",
        "docs/victim.txt",
        "dangling",
        "hard",
        "rel_out/new.txt",
    ]
    for resolver in ("openat2", "walk"):
        with tempfile.TemporaryDirectory() as tmp:
            ws_path, out = _attack_tree(Path(tmp))
            ws = Workspace(ws_path, resolver=resolver)  # type: ignore[arg-type]
            escapes = 0
            for path in reads:
                try:
                    escapes += CANARY in read_text(ws, path.format(out=out))
                except (ToolError, OSError):
                    pass
            for path in writes:
                for action in (write_text, edit_text):
                    try:
                        if action is write_text:
                            write_text(ws, path.format(out=out), "PWNED")
                        else:
                            edit_text(ws, path.format(out=out), CANARY, "PWNED")
                    except (ToolError, OSError):
                        pass
            escapes += sum(p.read_text() != CANARY for p in out.iterdir()) + (len(list(out.iterdir())) != 2)
            race = _race(ws_path, out, partial(read_text, ws))
            benign = read_text(ws, "inside.txt").endswith("inside")
            print(
                f"escapes, resolver {resolver}: {escapes} of {len(reads)} hostile reads and "
                f"{2 * len(writes)} hostile writes; symlink-swap race: {race[0]} leaks in {race[1]} reads; "
                f"benign read works: {benign}"
            )
    with tempfile.TemporaryDirectory() as tmp:
        ws_path, out = _attack_tree(Path(tmp))

        def naive(path: str) -> str:
            real = os.path.realpath(ws_path / path)
            if os.path.commonpath([real, str(ws_path)]) != str(ws_path):
                raise ToolError("outside")
            return (ws_path / path).read_text()

        leaks, total = _race(ws_path, out, naive)
        print(f"for comparison, realpath + commonpath check: {leaks} leaks in {total} reads of the same race")


def _race(ws: Path, out: Path, read: object, iterations: int = 3000) -> tuple[int, int]:
    (ws / "flip").mkdir()
    (ws / "flip" / "file.txt").write_text("inside\n")
    os.symlink(out, ws / "flip.link")
    (out / "file.txt").write_text(CANARY)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            _exchange(ws / "flip", ws / "flip.link")

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    leaks = 0
    try:
        for _ in range(iterations):
            try:
                leaks += CANARY in read("flip/file.txt")  # type: ignore[operator]
            except (ToolError, OSError):
                pass
    finally:
        stop.set()
        thread.join()
    return leaks, iterations


def bench_policy() -> None:
    """What one approval decision costs: the policy parses the line with tree-sitter-bash, resolves paths,
    asks git about the repository (two git processes) and walks the tree for a recursive read; a command over
    the size limit asks after one linear pass, whatever it holds."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
        for d in range(40):
            (ws / f"pkg{d}").mkdir()
            for f in range(50):
                (ws / f"pkg{d}" / f"m{f}.py").write_text("x = 1\n")
        policy = ApprovalPolicy(workspace=ws)
        shell = shell_tool(ws)
        figures = []
        huge = {"60,000-character `echo a a …`": "echo " + "a " * 30_000,
                "60,000-character `f(){ f|f|…& }`": "f(){ " + "f|" * 20_000 + "f& };"}
        plain = ("ls -la pkg1", "git status", "cd pkg1 && grep -n x m1.py", "grep -rn TODO .")
        commands = {c: c for c in plain}
        for label, command in {**commands, **huge}.items():
            call = ToolCall("execute_command", {"command": command})
            runs = []
            for _ in range(20):
                started = time.perf_counter()
                decision = decide(call, shell, policy)
                runs.append(time.perf_counter() - started)
            shown = f"`{label}`" if label == command else label
            figures.append(f"{shown} {statistics.median(runs) * 1000:.2f} ms ({decision.action})")
        print("approval decision, median of 20, 2,000-file workspace: " + "; ".join(figures))
    code = "import time; t = time.perf_counter(); import tree_sitter, tree_sitter_bash; "
    code += "print(time.perf_counter() - t)"
    imports = []
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        imports.append(float(done.stdout))
    print(f"bash parser import on first command (tree-sitter + tree-sitter-bash), median of 5: "
          f"{statistics.median(imports) * 1000:.1f} ms")


def _median_ms(action: object, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def bench_sandbox(cwd: str) -> None:
    """What confining a command costs: preparing its sandbox (the kept launcher, and for workspace-write its
    TMPDIR and own Landlock layer), and starting `bash -c true` confined (through the launcher: a fork into a
    fresh PID and IPC namespace, the command's own layer, exec) versus unconfined (vfork from mylm),
    interleaved so that a busy machine weighs on both. (A whole `run_command` adds the clean-up: a report
    from the launcher's init when confined, a process sweep when not.) The process is made non-dumpable
    first, as the CLI does."""
    import subprocess

    from mylm.sandbox import detect, protect_process
    from mylm.sandbox.rulesets import landlock_rules
    from mylm.sandbox.profile import build_profile
    from mylm.tools.shell import child_environment

    protect_process()
    sandbox = detect()
    if not sandbox.confines:
        print(f"sandbox: {sandbox.describe()}; nothing to measure")
        return
    env = child_environment()
    rules = len(landlock_rules(build_profile("read-only", cwd, network=False, environ=env)))
    print(f"sandbox: {sandbox.describe()}; read-only ruleset of {rules} rules (uid {os.geteuid()})")

    def setup(grant: str) -> None:
        with sandbox.launch(grant, cwd, env):  # type: ignore[arg-type]
            pass

    null = os.open(os.devnull, os.O_RDWR)

    def start(launch: object) -> None:
        if launch is None or launch.start is None:  # type: ignore[attr-defined]
            prefix = () if launch is None else launch.prefix  # type: ignore[attr-defined]
            subprocess.Popen([*prefix, "/bin/bash", "-c", "true"], env=env, cwd=cwd, stdin=null, stdout=null,
                             stderr=null).wait()
            return
        child = launch.start(["/bin/bash", "-c", "true"], env, cwd, (null, null, null))  # type: ignore[attr-defined]
        child.wait()
        child.close()

    setup("read-only")  # start the launchers (once per grant and workspace), as a run's first command does
    setup("workspace-write")
    for grant in ("read-only", "workspace-write"):
        cost = _median_ms(partial(setup, grant), 200)
        plain, confined = [], []
        with sandbox.launch(grant, cwd, env) as launch:  # type: ignore[arg-type]
            for _ in range(60):
                plain.append(_median_ms(partial(start, None), 1))
                confined.append(_median_ms(partial(start, launch), 1))
        a, b = statistics.median(plain), statistics.median(confined)
        print(f"  {grant}: set-up {cost:.2f} ms (median of 200); start `bash -c true` {a:.2f} ms unconfined, "
              f"{b:.2f} ms confined ({b / a:.2f}x; median of 60); per-command cost {cost + b - a:.2f} ms")
    os.close(null)


def main() -> None:
    with tempfile.TemporaryDirectory() as cwd:
        bench_sandbox(cwd)
        bench_latency(cwd)
        bench_survivors(cwd)
        bench_flood(cwd)
    bench_escapes()
    bench_policy()


if __name__ == "__main__":
    main()
