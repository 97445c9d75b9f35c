"""What the local-provider tests share: the engine check and the real model from the per-machine test cache.

The real model (SmolLM2-135M-Instruct, from the package index) is cached per machine by
scripts/install_models.sh in `${XDG_CACHE_HOME:-~/.cache}/mylm/test-models`, or wherever MYLM_TEST_MODELS
points. Both are read at import,
before the test fixtures hide the user's cache and clear MYLM_* variables.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import engine_missing

REAL_MODEL_FILE = "smollm2-135m-instruct-q4_1.gguf"
_TEST_MODELS = Path(
    os.environ.get("MYLM_TEST_MODELS")
    or os.environ.get("MYLM_TEST_MODELS_DIR")  # the name scripts/install_models.sh reads
    or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mylm", "test-models")
)
_REQUIRE_MODELS = os.environ.get("MYLM_REQUIRE_MODELS") == "1"
_REQUIRE_ENGINE = os.environ.get("MYLM_REQUIRE_ENGINE") == "1"


def need_engine() -> None:
    """Skip (or fail, under MYLM_REQUIRE_ENGINE=1) unless llama-cpp-python and gguf are installed."""
    reason = engine_missing()
    if reason is not None:
        if _REQUIRE_ENGINE:
            pytest.fail(reason)
        pytest.skip(reason)


def real_model() -> Path:
    """The real SmolLM2 GGUF; skips (or fails, under MYLM_REQUIRE_MODELS=1) when it is not cached."""
    need_engine()
    path = _TEST_MODELS / REAL_MODEL_FILE
    if not path.is_file():
        reason = f"the real test model is not cached at {path}: run `bash scripts/install_models.sh`"
        if _REQUIRE_MODELS:
            pytest.fail(reason)
        pytest.skip(reason)
    return path
