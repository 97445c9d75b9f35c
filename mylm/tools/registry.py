"""An ordered set of tools addressed by name, with the lookup errors written for the model."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator

from .base import Tool


class ToolRegistry:
    """The tools one agent may call, in the order they are shown to the model."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool_ in tools:
            self.add(tool_)

    def add(self, tool_: Tool) -> None:
        """Register a tool; a second tool with the same name is a programming error."""
        if not isinstance(tool_, Tool):
            raise TypeError(f"expected a mylm Tool (use @tool), got {type(tool_).__name__}")
        if tool_.name in self._tools:
            raise ValueError(f"two tools are named {tool_.name!r}")
        self._tools[tool_.name] = tool_

    def get(self, name: str) -> Tool | None:
        """Return the tool called `name`, or None."""
        return self._tools.get(name)

    def unknown_tool_message(self, name: str) -> str:
        """Explain to the model that `name` is not a tool, naming the real ones and the likeliest intended."""
        return unknown_tool_message(name, list(self._tools))

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools


def unknown_tool_message(name: str, names: list[str]) -> str:
    """Explain to the model that `name` is none of the tools `names`, naming the likeliest intended."""
    if not names:
        return f"There is no tool named '{name}': no tools are available, so answer without calling one."
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"There is no tool named '{name}'.{hint} The available tools are: {', '.join(names)}."
