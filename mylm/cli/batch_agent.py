"""The agent each batch task gets: built from plain settings, so a cluster worker can build it too."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..agent.loop import Agent
    from ..approval import ApprovalPolicy
    from ..batch import Task
    from ..config import Settings
    from ..core.types import Permission, RunResult, ToolCall
    from ..prompts import PromptLoader
    from ..tools.base import Tool

_loaders: dict[tuple[str | None, bool], PromptLoader] = {}
_loaders_lock = threading.Lock()


def _plain(value: Any) -> Any:
    """`value` with every mapping a dict and every sequence a list (mapping proxies do not pickle)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class BatchAgentFactory:
    """Builds one task's agent: the endpoint, the builtin tools confined to the task's workspace, and an
    approval hook that never asks (what would ask is refused, and the model is told why) unless `yes`."""

    endpoint: dict[str, Any]
    max_iterations: int
    timeout: float
    max_tokens: int
    prompts: str | None
    trusted: bool
    yes: bool
    instructions: str
    context_budget: int | None
    tools: dict[str, Any] = field(default_factory=dict)
    #: A MYLM_SCRIPTED_LLM script standing in for the endpoint (a testing aid, as for `ask`).
    scripted: str | None = None
    #: The command sandbox ("auto" or "off") and whether approved commands may use the network and UNIX
    #: sockets: the sandbox itself is found where the task runs (a Ray node has its own kernel).
    sandbox: str = "auto"
    sandbox_network: bool = True
    sandbox_unix_sockets: bool = False
    constrain: str = "auto"
    #: The tool dialect, resolved for the model (`runner.agent_options`).
    tool_dialect: str = "mylm"
    #: The user named no endpoint: a local Ollama's "cannot reach" also offers the in-process model (as `ask`).
    suggest_local: bool = False
    #: The rest of `runner.agent_options` (what `ask` gives its agent), so a task's agent is `ask`'s.
    reasoning_markers: tuple[tuple[str, str], ...] = ()
    tool_choice: str = "auto"
    stop_strings: bool = True
    #: `context_tokens` was set: an in-process model's own context window does not replace `context_budget`.
    explicit_context: bool = False
    #: The timeout was left at its default, so it follows the model's pace (`AgentConfig.pace_timeout`).
    pace_timeout: bool = False

    @classmethod
    def from_settings(
        cls, settings: Settings, *, scripted: str | None = None, tool_choice: str | None = None
    ) -> BatchAgentFactory:
        """The factory for the effective settings: the endpoint and agent options `ask` would use."""
        import dataclasses

        from .runner import agent_options, make_endpoint, nothing_configured

        # The endpoint as `ask` resolves it (with nothing configured, the pulled in-process model), as plain data.
        endpoint = {field.name: getattr(made, field.name)
                    for made in [make_endpoint(settings)] for field in dataclasses.fields(made)}
        endpoint["options"] = _plain(endpoint["options"])
        options = agent_options(settings, tool_choice)
        return cls(
            endpoint=endpoint, max_iterations=options["max_iterations"], timeout=options["timeout"],
            max_tokens=options["max_tokens"], prompts=settings.prompts,
            trusted=settings.project_trust is not None,
            yes=settings.yes, instructions=options["instructions"], context_budget=options["context_budget"],
            tools=_plain(settings.extra.get("tools", {}) or {}), scripted=scripted,
            sandbox=settings.sandbox, sandbox_network=settings.sandbox_network,
            sandbox_unix_sockets=settings.sandbox_unix_sockets, constrain=options["constrain"],
            tool_dialect=options["tool_dialect"],
            suggest_local=nothing_configured(settings), reasoning_markers=options["reasoning_markers"],
            tool_choice=options["tool_choice"], stop_strings=options["stop_strings"],
            explicit_context=settings.context_tokens is not None, pace_timeout=options["pace_timeout"],
        )

    def agent_options(self) -> dict[str, Any]:
        """The options `runner.agent_options` gave, back from this factory's plain fields."""
        return {
            "max_iterations": self.max_iterations, "timeout": self.timeout, "max_tokens": self.max_tokens,
            "constrain": self.constrain, "tool_dialect": self.tool_dialect, "instructions": self.instructions,
            "reasoning_markers": self.reasoning_markers, "context_budget": self.context_budget,
            "tool_choice": self.tool_choice, "stop_strings": self.stop_strings, "pace_timeout": self.pace_timeout,
        }

    def __call__(self, task: Task, workspace: Path) -> Agent:
        from ..agent.loop import Agent
        from ..tools import ToolSettings, builtin_tools
        from .runner import checked_for, sandbox_for

        loader = self._loader()
        configured = ToolSettings.from_config(dict(self.tools))
        sandbox = sandbox_for(self.sandbox, self.sandbox_network, unix_sockets=self.sandbox_unix_sockets)
        # No memory tools: notes saved by one task would leak into the others.
        tools: list[Tool] = builtin_tools(
            workspace=workspace, memory=False, command_timeout=configured.command_timeout,
            env_passthrough=configured.env, sandbox=sandbox,
        )
        permission = unattended(self.tools, workspace=workspace, yes=self.yes, confined=sandbox.confines)
        llm = self._llm(loader)
        options = checked_for(llm, loader, self.agent_options(), explicit_context=self.explicit_context)
        return Agent(llm, tools, prompts=loader, permission=permission, workspace=workspace, **options)

    def _loader(self) -> PromptLoader:
        from ..prompts import PromptLoader

        key = (self.prompts, self.trusted)
        with _loaders_lock:
            if key not in _loaders:
                _loaders[key] = PromptLoader.default(self.prompts, trusted=self.trusted)
            return _loaders[key]

    def _llm(self, loader: PromptLoader) -> Any:
        if self.scripted:
            from .scripted import load_script

            return load_script(Path(self.scripted))
        from ..providers import Endpoint
        from .runner import endpoint_llm

        return endpoint_llm(Endpoint(**self.endpoint), loader, suggest_local=self.suggest_local)


def unattended(tools_section: Mapping[str, Any], *, workspace: Path, yes: bool, confined: bool) -> NeverAsk:
    """The permission hook of a run nobody watches (a batch task, a delegated MCP run), from the `[tools]`
    section: the approval policy for `workspace`, whose "ask" is a refusal unless `yes`."""
    from ..approval import ApprovalPolicy
    from ..core.paths import config_dir

    policy = ApprovalPolicy.from_config(
        dict(tools_section.get("approval", {}) or {}), workspace=workspace, yes=yes, config_dir=config_dir(),
    )
    # Without a sandbox nothing holds a "read" to reading, so no command is auto-approved.
    return NeverAsk(replace(policy, command_sandbox=confined))


@dataclass(frozen=True)
class NeverAsk:
    """A permission hook for runs nobody watches: the policy's "ask" becomes a refusal whose reason the model
    reads; with `--yes` every call the policy does not forbid runs, with write access to the workspace."""

    policy: ApprovalPolicy

    def __call__(self, call: ToolCall, tool: Tool) -> Permission:
        from ..approval import Approver

        # With nobody to ask, the policy's "ask" is a refusal; under --yes it allows with the grant it decided.
        return Approver(self.policy)(call, tool)


@dataclass(frozen=True)
class SessionWriter:
    """Saves each finished task's conversation as a session (`mylm sessions show ID`)."""

    model: str | None
    base_url: str
    provider: str | None
    api_key: str | None = field(default=None, repr=False)

    def __call__(self, task: Task, result: RunResult, workspace: Path) -> str | None:
        from ..core.redact import Redactor, public_url, url_secrets
        from ..sessions import Transcript, private_sessions_dir

        redactor = Redactor.from_environment(extra=[self.api_key, *url_secrets(self.base_url)])
        header = {"command": "batch", "task": task.id, "cwd": str(workspace), "model": self.model,
                  "base_url": public_url(self.base_url), "provider": self.provider}
        try:
            transcript = Transcript.create(private_sessions_dir(), redactor=redactor, header=header)
        except OSError:
            return None
        with transcript:
            transcript.messages(result.history if result.compacted else result.history_delta)
            transcript.append({
                "type": "run_end", "stop_reason": result.stop_reason.value,
                "iterations_used": result.iterations_used,
                "usage": result.reported_usage(),
                "error": str(result.error) if result.error is not None else None,
            })
        return transcript.id
