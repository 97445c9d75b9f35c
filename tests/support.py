"""Plain helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_sigint() -> None:
    """`preexec_fn` for a child a test will send SIGINT (Ctrl-C): a CI runner may start the tests with SIGINT
    ignored (a bash background job, nohup), and an ignored signal stays ignored across exec, so the child would
    never see the Ctrl-C the test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: The command that installs the real inference engine (and what its tests need) into the current Python.
INSTALL_ENGINE = "bash scripts/install_engine.sh"


def engine_missing(needs: tuple[str, ...] = ("gguf", "numpy")) -> str | None:
    """Why the engine tests cannot run here, with the exact command that fixes it; None when they can.

    The engine (llama_cpp) and what only the tests need (`needs`: gguf to write tiny models, the server's
    modules) are told apart: after `pip install 'mylm[local]'` the engine is there and gguf is not.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        return f"the local inference engine (llama-cpp-python) is not installed: run `{INSTALL_ENGINE}`"
    missing = [module for module in needs if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    verb = "is" if len(missing) == 1 else "are"
    return (
        f"the engine is installed, but {' and '.join(missing)}, which the engine tests need, {verb} not: "
        f"run `pip install -e '.[test]'` (or `{INSTALL_ENGINE}`)"
    )


def running(*argv: str) -> list[int]:
    """Host pids of the processes whose command line is exactly `argv`.

    Commands run in the sandbox's own PID namespace, where `$$` is no host pid: tests that must see a command
    die give it an argument no other process has (`sleep 600.<unique>`) and look for it here."""
    wanted = "".join(f"{arg}\0" for arg in argv).encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == wanted:
                found.append(int(entry.name))
        except OSError:
            continue
    return found
