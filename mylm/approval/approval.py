"""The approval policy's entry point: allow each tool call, ask the user, or refuse it, and say why.

`decide` is pure policy (it only looks at the workspace to expand globs and find secrets a search would read).
`Approver` adds the one piece of state a run has, the tools the user approved "always", and turns a decision
into the `Permission` the agent's hook returns, asking through a prompt function the CLI supplies.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..core.cancel import hook_deadline
from ..core.errors import ConfigError, ToolError
from ..core.types import Grant, Permission, ToolCall
from ..core.words import counted
from ..sandbox.profile import secrets_for
from ..tools.base import Tool
from ..tools.paths import Workspace
from .commands import HIDDEN, INVISIBLE, classify
from .danger import is_protected_path

Action = Literal["allow", "ask", "deny"]
#: The builtin tools whose `path` argument the policy inspects.
PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir", "search_files"})
SHELL_TOOL = "execute_command"
_PREVIEW_LINES = 40


@dataclass(frozen=True)
class ApprovalPolicy:
    """What runs without asking. Built from flags and the user's config, never from the workspace."""

    workspace: Path
    #: `--yes`: approve every call (the user's deny rules and workspace confinement still hold).
    yes: bool = False
    #: Auto-approve writes inside the workspace; protected paths and secrets still ask.
    approve_edits: bool = False
    #: Auto-approve commands; dangerous ones still ask.
    approve_commands: bool = False
    #: Argv prefixes the user trusts (e.g. `"pytest"`, `"npm test"`), allowed like read-only commands.
    allow_commands: tuple[str, ...] = ()
    #: Argv prefixes always refused, even with `--yes` (e.g. `"git push"`).
    deny_commands: tuple[str, ...] = ()
    #: Tools that run without asking (e.g. `"remember"`, an MCP tool known to be read-only).
    allow_tools: frozenset[str] = frozenset()
    #: mylm's config directory: writes to it always ask.
    config_dir: Path | None = None
    #: Commands run confined by the kernel (mylm.sandbox). When False, execute_command always asks.
    command_sandbox: bool = True

    @classmethod
    def from_config(
        cls, section: Mapping[str, Any], *, workspace: Path, yes: bool = False, config_dir: Path | None = None
    ) -> ApprovalPolicy:
        """Build from the `[tools.approval]` table; a malformed one is a `ConfigError`, never "allow all"."""
        known = {"approve_edits", "approve_commands", "allow_commands", "deny_commands", "allow_tools"}
        unknown = sorted(set(section) - known)
        if unknown:
            listed = ", ".join(sorted(known))
            raise ConfigError(f"[tools.approval] has unknown key(s) {', '.join(unknown)}; known: {listed}")
        for key in ("approve_edits", "approve_commands"):
            if not isinstance(section.get(key, False), bool):
                raise ConfigError(f"[tools.approval] {key} must be true or false")
        lists = {}
        for key in ("allow_commands", "deny_commands", "allow_tools"):
            value = section.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ConfigError(f"[tools.approval] {key} must be a list of non-empty strings")
            lists[key] = tuple(value)
        return cls(
            workspace=workspace,
            yes=yes,
            approve_edits=bool(section.get("approve_edits", False)),
            approve_commands=bool(section.get("approve_commands", False)),
            allow_commands=lists["allow_commands"],
            deny_commands=lists["deny_commands"],
            allow_tools=frozenset(lists["allow_tools"]),
            config_dir=config_dir,
        )


@dataclass(frozen=True)
class Decision:
    """The policy's answer for one call, with what to show the user if it asks."""

    action: Action
    #: Why: shown at the prompt, and sent to the model when the call is refused.
    reason: str
    #: One line saying exactly what the call will do, e.g. "run `ls -la` in /home/u/proj".
    summary: str
    #: The full command, the content to write or the edit, with control characters made visible.
    details: str = ""
    #: Whether an "always for this tool" answer may cover this call (not for dangerous or protected ones).
    rememberable: bool = True
    #: What an allowed call may do (the command sandbox enforces it): "read-only" when the policy itself read
    #: the call as a read, "workspace-write" when a person approved it (now, "always" earlier, or --yes).
    grant: Grant = "workspace-write"


def decide(
    call: ToolCall,
    tool: Tool,
    policy: ApprovalPolicy,
    *,
    always: frozenset[str] = frozenset(),
    deadline: float | None = None,
) -> Decision:
    """Decide one call: `allow`, `ask` or `deny`, with why in `Decision.reason`. `always` holds the tools
    approved "always" in this run; checks that run other programs (git) stop at `deadline` and then ask."""
    summary, details = describe_call(call, tool, policy.workspace)

    def make(action: Action, reason: str, rememberable: bool = True, grant: Grant | None = None) -> Decision:
        return Decision(action, reason, summary, details, rememberable, grant or "workspace-write")

    trusted = policy.yes or tool.name in always or tool.name in policy.allow_tools
    if tool.name == SHELL_TOOL:
        return _decide_command(call, policy, trusted, make, deadline)
    if tool.name in PATH_TOOLS:
        return _decide_path(call, tool, policy, trusted, make)
    if trusted:
        grant: Grant = "read-only" if tool.risk == "read" else "workspace-write"
        return make("allow", "the user approved this tool", grant=grant)
    if tool.risk == "read":
        return make("allow", "a read-only tool", grant="read-only")
    can = "change files or state" if tool.risk == "write" else "run programs"
    return make("ask", f"{tool.name} can {can}")


def _decide_command(
    call: ToolCall,
    policy: ApprovalPolicy,
    trusted: bool,
    make: Callable[..., Decision],
    deadline: float | None,
) -> Decision:
    verdict = classify(
        str(call.arguments.get("command", "")), workspace=policy.workspace, config_dir=policy.config_dir,
        allow=policy.allow_commands, deny=policy.deny_commands, deadline=deadline,
    )
    if verdict.level == "forbidden":
        return make("deny", verdict.reason)
    if verdict.level == "safe" and (policy.command_sandbox or verdict.by_rule):
        # Read as a read, it runs read-only even under --yes: nobody needed to approve a write. One the user's
        # allow_commands approve was approved by a person, in advance.
        return make("allow", verdict.reason, grant="workspace-write" if verdict.by_rule else "read-only")
    if policy.yes:
        return make("allow", "--yes approves every call")
    if verdict.level == "dangerous":
        return make("ask", verdict.reason, rememberable=False)
    if trusted or policy.approve_commands:
        return make("allow", "commands are approved for this run")
    if verdict.level == "safe":
        # Without a sandbox nothing would hold a "read" to reading: the classifier alone never lets one run.
        return make("ask", f"no sandbox confines commands here, so every command asks ({verdict.reason})")
    return make("ask", verdict.reason)


def _decide_path(
    call: ToolCall, tool: Tool, policy: ApprovalPolicy, trusted: bool, make: Callable[..., Decision]
) -> Decision:
    path = str(call.arguments.get("path", "."))
    workspace = Workspace(policy.workspace)
    try:
        rel = workspace.relative(path)
        # The tools follow symlinks inside the workspace: judge the file the call reaches, not just its name.
        # A write replaces a final link rather than following it, so its resolved parent counts as well.
        parent, name = posixpath.split(rel)
        reached = {rel, workspace.resolve(path), posixpath.join(workspace.resolve(parent or "."), name)}
    except ToolError as error:
        return make("deny", str(error))
    if policy.yes:
        return make("allow", "--yes approves every call")
    secrets = secrets_for(workspace.root)
    secret = next((p for p in sorted(reached) if secrets.reason(str(workspace.root / p))), None)
    shown = rel if secret in (None, rel) else f"{rel} (a link to {secret})"
    if tool.risk == "read":
        if secret:
            why = secrets.reason(str(workspace.root / secret))
            return make("ask", f"{shown}: {why}", rememberable=False)
        return make("allow", "a read inside the workspace", grant="read-only")
    protected = next((p for p in sorted(reached) if _protected(p, policy)), None)
    if protected:
        where = rel if protected in (None, rel) else f"{rel} (which leads to {protected})"
        return make("ask", f"{where} is protected (.git/, shell startup files and mylm's config always ask)",
                    rememberable=False)
    if secret:
        return make("ask", f"{shown}: {secrets.reason(str(workspace.root / secret))}", rememberable=False)
    if trusted or policy.approve_edits:
        return make("allow", "edits are approved for this run")
    return make("ask", f"{tool.name} changes {rel}")


def _protected(rel: str, policy: ApprovalPolicy) -> bool:
    absolute = os.path.join(str(policy.workspace), rel)
    return any(is_protected_path(p, config_dir=policy.config_dir) for p in (rel, absolute))


# ------------------------------------------------------------------------------------------ the display


def visible(text: str) -> str:
    """Make control, bidi and invisible characters visible (`\\x0d`, `<U+202E>`) so a prompt cannot lie."""
    return HIDDEN.sub(_shown, text)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"<U+{code:04X}>" if code in INVISIBLE else f"\\x{code:02x}"


def describe_call(call: ToolCall, tool: Tool, workspace: Path) -> tuple[str, str]:
    """A one-line summary and the full details of exactly what `call` will do."""
    args = call.arguments
    if tool.name == SHELL_TOOL:
        command = visible(str(args.get("command", "")))
        first = command.splitlines()[0] if command else ""
        more = " …" if "\n" in command else ""
        timeout = args.get("timeout")
        limit = f" (timeout {timeout} s)" if timeout is not None else ""
        return f"run `{first}{more}` in {workspace}{limit}", command
    if tool.name in PATH_TOOLS:
        path = visible(str(args.get("path", ".")))
        if tool.name == "write_file":
            content = str(args.get("content", ""))
            exists = os.path.lexists(os.path.join(workspace, str(args.get("path", ""))))
            size = len(content.encode("utf-8", "surrogatepass"))
            what = "replace" if exists else "create"
            lines = content.count("\n") + 1
            return f"{what} {path} with {counted(size, 'byte')} ({counted(lines, 'line')})", _preview(content)
        if tool.name == "edit_file":
            old, new = str(args.get("old", "")), str(args.get("new", ""))
            diff = "\n".join([*("- " + s for s in old.splitlines()), *("+ " + s for s in new.splitlines())])
            counts = old.count("\n") + 1, new.count("\n") + 1
            return f"edit {path}: replace {counted(counts[0], 'line')} with {counts[1]}", visible(diff)
        if tool.name == "search_files":
            return f"search {path} for {visible(str(args.get('pattern', '')))!r}", ""
        return (f"read {path}" if tool.name == "read_file" else f"list {path}"), ""
    text = json.dumps(dict(args), ensure_ascii=False, default=str)
    return visible(f"{tool.name} {text if len(text) <= 200 else text[:197] + '...'}"), visible(
        json.dumps(dict(args), ensure_ascii=False, indent=2, default=str)
    )


def _preview(content: str) -> str:
    lines = content.splitlines()
    shown = "\n".join(lines[:_PREVIEW_LINES])
    if len(lines) > _PREVIEW_LINES:
        shown += f"\n… ({counted(len(lines) - _PREVIEW_LINES, 'more line')})"
    return visible(shown)


# ------------------------------------------------------------------------------------------ the approver


@dataclass(frozen=True)
class Answer:
    """What the user said at the prompt: yes, no (with an optional reason for the model), or always."""

    choice: Literal["yes", "no", "always"]
    reason: str = ""


#: Shows a decision to the user and returns their answer; the CLI's version reads from the terminal.
Prompt = Callable[[ToolCall, Decision], Answer]

NO_TERMINAL = (
    "this call needs the user's approval ({reason}), and no one can be asked in this session (no terminal; "
    "the user can rerun with --yes). Do not retry it; use a read-only approach or answer with what you have."
)


@dataclass
class Approver:
    """The agent's permission hook: `decide`, then ask through `prompt` (None: nobody to ask, so refuse)."""

    policy: ApprovalPolicy
    prompt: Prompt | None = None
    #: Tools the user approved "always" during this run.
    always: set[str] = field(default_factory=set)

    def __call__(self, call: ToolCall, tool: Tool) -> Permission:
        always = frozenset(self.always)
        decision = decide(call, tool, self.policy, always=always, deadline=hook_deadline.get())
        if decision.action == "allow":
            # Read-only when the policy read it as a read; workspace-write when --yes or "always" approved it.
            return Permission.allow(decision.grant)
        if decision.action == "deny":
            return Permission.deny(f"refused by the approval policy: {decision.reason}")
        if self.prompt is None:
            return Permission.deny(NO_TERMINAL.format(reason=decision.reason))
        answer = self.prompt(call, decision)
        if answer.choice == "always":
            if decision.rememberable:
                self.always.add(tool.name)
            return Permission.allow()
        if answer.choice == "yes":
            return Permission.allow()
        reason = answer.reason.strip()
        return Permission.deny("the user declined this call" + (f": {reason}" if reason else ""))
