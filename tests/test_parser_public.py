"""Issue 22 §8: the parser is public: `mylm.protocol` exports it, docs/api.md documents exactly what it exports,
and the documented example runs as written (no agent involved)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import mylm.protocol

API = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _section() -> str:
    text = API.read_text(encoding="utf-8")
    start = text.index("## `mylm.protocol`")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_public_parser_all_is_what_docs_api_documents() -> None:
    documented = set(re.findall(r"^\| `([A-Za-z_]+)", _section(), re.MULTILINE))
    assert documented == set(mylm.protocol.__all__)
    for name in mylm.protocol.__all__:
        assert getattr(mylm.protocol, name) is not None


def test_public_parser_docs_example_runs() -> None:
    example = re.search(r"```python\n(.*?)```", _section(), re.DOTALL)
    assert example is not None
    namespace: dict[str, object] = {}
    exec(compile(example.group(1), str(API), "exec"), namespace)  # noqa: S102 - our own documentation


def test_public_parser_import_is_lazy() -> None:
    """Importing one protocol module does not import the parser (the CLI's start-up stays cheap)."""
    code = ("import sys, mylm.protocol.tags; print('mylm.protocol.parser' in sys.modules); "
            "from mylm.protocol import StreamParser; print('mylm.protocol.parser' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
