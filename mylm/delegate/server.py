"""The MCP face of the delegate: `run_task`, `ask` and `mylm://sessions/{id}` on the official `mcp` SDK.

Imported only by `mylm mcp` (the SDK is the optional `mcp` extra)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp_types import ListRootsResult, ToolAnnotations

from .. import __version__
from ..core.errors import MylmError, SessionNotFoundError
from .service import DelegateService

INSTRUCTIONS = (
    "mylm runs tasks with a local model, confined to a workspace directory: run_task hands it a task it "
    "can solve with tools (read and search files, run commands in a sandbox) and returns its answer, why the run "
    "ended and a log of its tool calls; ask puts a question to the model without tools. Each run is saved: "
    "read it back as the resource mylm://sessions/{id}."
)
RUN_TASK = (
    "Delegate a task to mylm's agent on a local model. It works in `workspace` (a directory; default: the "
    "server's working directory) with tools to read and search files and run commands, confined by a sandbox. "
    "Changes the approval policy would ask about are refused unless the server was started with --yes. Returns "
    "the answer, the stop reason (final_answer, max_iterations, timeout, cancelled, error), the iterations used, "
    "the tool calls it made and the id of the saved session."
)
ASK = "Ask mylm's model a question directly, without tools; returns its answer."


def client_roots(ctx: Context) -> ListRoots | None:
    """Ask the client for its roots, if it declared the capability (one that did not declared no roots)."""
    capabilities = ctx.client_capabilities
    return ListRoots() if capabilities is not None and capabilities.roots is not None else None


def build_server(service: DelegateService) -> MCPServer:
    """An MCP server whose tools run `service`'s agents."""
    server: MCPServer = MCPServer(
        "mylm", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING",
    )

    @server.tool(name="run_task", description=RUN_TASK,
                 annotations=ToolAnnotations(title="Delegate a task to mylm", destructive_hint=service.yes,
                                             open_world_hint=False))
    async def run_task(
        prompt: str,
        ctx: Context,
        roots: Annotated[ListRootsResult | None, Resolve(client_roots)],
        workspace: str | None = None,
        max_iterations: int | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        declared = None if roots is None else [str(root.uri) for root in roots.roots]
        try:
            request = service.request(prompt, workspace=workspace, client_roots=declared,
                                      max_iterations=max_iterations, timeout=timeout)
            outcome = await service.run(request, "run_task", ctx.report_progress)
        except MylmError as error:
            raise ToolError(service.redactor.redact(str(error))) from None
        return outcome.to_dict()

    @server.tool(name="ask", description=ASK,
                 annotations=ToolAnnotations(title="Ask mylm's model", read_only_hint=True, open_world_hint=False))
    async def ask(question: str, ctx: Context) -> dict[str, Any]:
        try:
            request = service.question(question)
            outcome = await service.run(request, "ask", ctx.report_progress)
        except MylmError as error:
            raise ToolError(service.redactor.redact(str(error))) from None
        return outcome.to_dict()

    @server.resource("mylm://sessions/{id}", name="session", mime_type="application/x-ndjson",
                     description="The saved transcript of a run (JSON lines, secrets redacted).")
    def session(id: str) -> str:
        try:
            return service.transcript(id)
        except SessionNotFoundError as error:
            raise ResourceNotFoundError(str(error)) from None

    return server
