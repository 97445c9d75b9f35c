"""Local JSON-Schema `$ref` resolution: one resolver for the argument validator (tools) and the grammar
compiler (constrain), so the two never disagree on what a reference means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def resolve_ref(root: Any, ref: str) -> Any | None:
    """The node a local `$ref` (`#`, `#/$defs/Name`, `#/definitions/Name`, JSON-pointer escapes) points to in
    `root`; None when it points nowhere or elsewhere (remote references are not fetched)."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for token in [t for t in ref[1:].split("/") if t]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
