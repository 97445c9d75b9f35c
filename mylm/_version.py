"""mylm's version, and how this copy was installed, in a module of its own so that any layer can read them
without importing the package root."""

from __future__ import annotations

__version__ = "0.1.0"


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to *this* installation, for the messages that name a missing one.

    mylm is installed from a checkout (it is not on the package index: `pip install '.[serve]'` in the README),
    and there `pip install 'mylm[serve]'` finds nothing; so a copy installed from a directory is told to install
    from that directory (`pip install -e '/src/mylm[serve]'`), and only a copy from an index gets the index form.
    """
    import json
    import shlex
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlsplit

    try:
        recorded = distribution("mylm").read_text("direct_url.json")  # PEP 610: where pip installed it from
        origin = json.loads(recorded) if recorded else {}
    except (PackageNotFoundError, ValueError, OSError):
        origin = {}
    url = origin.get("url", "") if isinstance(origin, dict) else ""
    if url.startswith("file://"):
        editable = "-e " if (origin.get("dir_info") or {}).get("editable") else ""
        return f"pip install {editable}{shlex.quote(unquote(urlsplit(url).path) + f'[{extra}]')}"
    from pathlib import Path

    # Run from inside a checkout, the checkout's own metadata (mylm.egg-info) is found first, without a record.
    checkout = Path(__file__).resolve().parents[1]
    if not origin and (checkout / "pyproject.toml").is_file() and (checkout / "mylm" / "_version.py").is_file():
        return f"pip install -e {shlex.quote(f'{checkout}[{extra}]')}"
    return f"pip install 'mylm[{extra}]'"
