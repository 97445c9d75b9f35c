"""The builtin tool set for one workspace, and the `[tools]` config table that tunes it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from .base import Tool
from .environment import shell_variable
from .files import file_tools
from .memory import memory_tools
from .paths import Workspace
from .search import search_tools
from .shell import DEFAULT_TIMEOUT, ShellLimits, shell_tool

if TYPE_CHECKING:
    from ..sandbox import Sandbox

_KEYS = {"command_timeout", "env", "memory", "memory_path", "approval"}


@dataclass(frozen=True)
class ToolSettings:
    """The `[tools]` config table (`ApprovalPolicy.from_config` reads its `[tools.approval]` sub-table)."""

    #: Default seconds a command may run when the model gives no timeout (at most 120).
    command_timeout: float = DEFAULT_TIMEOUT
    #: Extra environment variables commands may see (mylm's own `MYLM_*` never pass).
    env: tuple[str, ...] = ()
    #: Whether to offer `remember` and `search_memory`.
    memory: bool = True
    memory_path: Path | None = None

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> ToolSettings:
        """Read the `[tools]` table; a malformed value is a `ConfigError` naming the key."""
        unknown = sorted(set(section) - _KEYS)
        if unknown:
            known = ", ".join(sorted(_KEYS))
            raise ConfigError(f"[tools] has unknown key(s) {', '.join(unknown)}; known: {known}")
        timeout = section.get("command_timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 120:
            raise ConfigError("[tools] command_timeout must be a number of seconds between 0 and 120")
        env = section.get("env", [])
        if not isinstance(env, list) or not all(isinstance(n, str) and n for n in env):
            raise ConfigError("[tools] env must be a list of variable names")
        shell = [n for n in env if shell_variable(n)]
        if shell:
            raise ConfigError(
                f"[tools] env may not pass {', '.join(shell)} to commands: it changes how bash reads a command "
                "(its options, globs, cd, startup files) or what the loader runs, so the approval policy would "
                "judge another command than the one that runs"
            )
        memory = section.get("memory", True)
        if not isinstance(memory, bool):
            raise ConfigError("[tools] memory must be true or false")
        path = section.get("memory_path")
        if path is not None and not isinstance(path, str):
            raise ConfigError("[tools] memory_path must be a string")
        return cls(float(timeout), tuple(env), memory, Path(path).expanduser() if path else None)


def builtin_tools(
    *,
    workspace: Path,
    memory_path: Path | None = None,
    memory: bool = True,
    command_timeout: float = DEFAULT_TIMEOUT,
    env_passthrough: Sequence[str] = (),
    shell_limits: ShellLimits | None = None,
    session: str | None = None,
    sandbox: Sandbox | None = None,
) -> list[Tool]:
    """The builtin tools confined to `workspace`: execute_command, read_file, write_file, edit_file, list_dir,
    search_files, and (unless `memory` is False) remember and search_memory over the store at `memory_path`. Commands are
    confined by `sandbox` (default: the best this system offers)."""
    confined = Workspace(workspace)
    tools = [
        shell_tool(confined.root, default_timeout=command_timeout, limits=shell_limits or ShellLimits(),
                   env_passthrough=env_passthrough, sandbox=sandbox, held=confined),
        *file_tools(confined),
        *search_tools(confined),
    ]
    if memory:
        tools.extend(memory_tools(memory_path, session=session, workspace=confined.root))
    return tools
