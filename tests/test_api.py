"""The public surface: what `import mylm` offers, and that it stays cheap to import."""

from __future__ import annotations

import subprocess
import sys

import mylm


def test_api_all_names_resolve() -> None:
    for name in mylm.__all__:
        assert getattr(mylm, name) is not None, name
    assert {"Agent", "tool", "Tool", "RunResult", "StopReason", "CancelToken"} <= set(mylm.__all__)


def test_api_unknown_name_is_an_attribute_error() -> None:
    try:
        mylm.Nope  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as error:
        assert "Nope" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_api_cli_help_path_imports_no_heavy_module(subprocess_env: dict[str, str]) -> None:
    code = (
        "import sys; from mylm.cli import cli; "
        "heavy = [m for m in ('requests', 'jinja2', 'lxml', 'urllib3', 'mylm.agent.loop') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=subprocess_env).stdout
    assert out.strip() == ""


def test_api_agent_does_not_import_http_or_cli(subprocess_env: dict[str, str]) -> None:
    code = "import sys, mylm.agent.loop; print(','.join(m for m in ('requests', 'click', 'mylm.cli', 'mylm.providers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=subprocess_env).stdout
    assert out.strip() == ""
