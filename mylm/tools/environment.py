"""The environment a command runs with: an allowlist of mylm's own, and git's settings for a read-only command.

Kept below both the shell tool (which builds the environment) and the approval policy (which asks git about
the repository with the same environment and tells the user what a read-only git runs with), so that neither
imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache

from ..core.environ import environment
from . import procs

__all__ = [
    "ENV_ALLOWLIST", "NEUTRAL_SETTINGS", "SHELL_VARIABLES", "child_environment", "neutral_env", "neutralised",
    "shell_variable",
]

#: Variables a command may see. Everything else (API keys, tokens, cloud credentials) stays in mylm.
ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ")
#: Variables that change what bash itself does with a command line (its options, what a glob expands to, where
#: `cd` goes, a file it runs first, functions standing in for programs) or what the dynamic loader runs: the
#: approval policy reads each command as bash would under the allowlisted environment, so none may be passed
#: through (`[tools] env`), or a glob the policy expanded one way (`*` without dot-files) would expand another
#: (`BASHOPTS=dotglob`) in the command. Names ending in `*` are prefixes.
SHELL_VARIABLES = (
    "BASHOPTS", "SHELLOPTS", "GLOBIGNORE", "GLOBSORT", "BASH_ENV", "ENV", "CDPATH", "POSIXLY_CORRECT",
    "BASH_COMPAT", "EXECIGNORE", "BASH_XTRACEFD", "PS4", "IFS", "BASH_LOADABLES_PATH", "BASH_FUNC_*",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH",
)


def shell_variable(name: str) -> bool:
    """Whether `name` is one of `SHELL_VARIABLES` (never passed to a command)."""
    upper = name.upper()
    return any(upper.startswith(v[:-1]) if v.endswith("*") else upper == v for v in SHELL_VARIABLES)


#: Set for every command: output goes to a model, not a terminal, and nothing may wait for a keyboard.
FIXED_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "NO_COLOR": "1"}
#: Forced on every git a read-only command runs: each setting here runs a program (or opens a transport)
#: and none is needed to read. Left out because forcing them would break reads: diff.external (an empty
#: value makes `git diff` fail) and the per-driver textconv/filter commands (their names are open-ended);
#: the repository check (mylm/approval/gitrepo.py) asks when the repository's config sets any of those.
NEUTRAL_SETTINGS: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", "false"),
    ("credential.helper", ""),  # an empty value clears the list of helpers
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("log.showSignature", "false"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("submodule.recurse", "false"),
)
#: The shell tool's own git settings (no pager, no credential prompt), kept for read-only commands.
_KEPT_GIT_VARIABLES = frozenset({"GIT_PAGER", "GIT_TERMINAL_PROMPT"})


def child_environment(
    passthrough: Sequence[str] = (), *, tag: str = "", environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command sees: an allowlist plus names the user opted in, never mylm's own."""
    env = environment() if environ is None else environ
    wanted = [*ENV_ALLOWLIST,
              *(n for n in passthrough if not n.upper().startswith("MYLM_") and not shell_variable(n))]
    # Names first, values only for the ones kept: a mapping given may be os.environ itself, where decoding
    # every value cost ~0.1 ms a command.
    names = [k for k in env if k.startswith("LC_") and k not in wanted]
    child = {k: env[k] for k in [*wanted, *names] if k in env}
    child.setdefault("PATH", os.defpath)
    child.update(FIXED_ENV)
    if tag:
        child[procs.TAG_VARIABLE] = tag
    return child


def neutral_env() -> dict[str, str]:
    """`GIT_CONFIG_COUNT`, `_KEY_n`, `_VALUE_n` forcing `NEUTRAL_SETTINGS` (command scope, above files)."""
    return dict(_neutral_env())


@lru_cache(maxsize=1)
def _neutral_env() -> dict[str, str]:
    # Made once (every read-only command takes a copy): formatting its 35 names cost ~8 µs a command.
    env = {"GIT_CONFIG_COUNT": str(len(NEUTRAL_SETTINGS))}
    for i, (key, value) in enumerate(NEUTRAL_SETTINGS):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def neutralised(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` for a read-only command: `NEUTRAL_SETTINGS` forced, and no other `GIT_*` variable (one the
    user passes through, `GIT_DIR` say, would make git find another repository than the policy checked)."""
    kept = {k: v for k, v in environ.items() if not k.startswith("GIT_") or k in _KEPT_GIT_VARIABLES}
    return {**kept, **neutral_env()}
