"""The approval policy: `decide` whether each tool call runs, asks or is refused, and say why on the Decision.

One entry point, `decide` (approval.py); `Approver` wraps it for the agent. Everything else in this package
serves it: commands.py classifies a shell command, bash.py admits only syntax a real bash parser shows to be
plain, programs.py/readonly.py/options.py/gitread.py hold the per-program option allowlists, gitrepo.py asks git
itself about the repository, reach.py follows paths, danger.py/unwrap.py/shell_syntax.py find commands that
must always ask. "Why did this call ask?" is always `Decision.reason`.
"""

from __future__ import annotations

from .approval import (
    NO_TERMINAL,
    PATH_TOOLS,
    SHELL_TOOL,
    Answer,
    ApprovalPolicy,
    Approver,
    Decision,
    Prompt,
    decide,
    describe_call,
    visible,
)

__all__ = [
    "NO_TERMINAL", "PATH_TOOLS", "SHELL_TOOL", "Answer", "ApprovalPolicy", "Approver", "Decision", "Prompt",
    "decide", "describe_call", "visible",
]
