"""The approval policy: `decide` whether each tool call runs, asks or is refused, and say why on the Decision.

One entry point, `decide` (approval.py); `Approver` wraps it for the agent. The rest serves it: commands.py
classifies a shell command; bash.py admits only syntax a real bash parser shows to be plain; programs.py,
readonly.py, options.py and gitread.py hold the per-program option allowlists; gitrepo.py asks git itself
about the repository; reach.py follows paths; danger.py, unwrap.py and shell_syntax.py find the commands that
must always ask; sensitive.py names the files that hold credentials. "Why did this call ask?" is always
`Decision.reason`. It sits beside `mylm.sandbox`, which enforces the grant a Decision carries.
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
