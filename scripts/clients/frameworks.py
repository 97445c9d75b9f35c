"""Drivers for the agent frameworks that meet `mylm serve` in docs/serve.md: each runs one task with the
framework's own tool loop, its defaults and three real file tools over a workspace, and returns what it answered.

The same functions run in CI against a scripted model (tests/serve/test_serve_frameworks.py, each skipped where
its framework is not installed) and against a real one (scripts/drive_clients.py). The tools are the user's, as
each framework's documentation defines them; only the client's timeout is raised, since a small model on a CPU
takes minutes.

    python scripts/clients/frameworks.py CLIENT BASE_URL WORKSPACE TASK   # prints the answer
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds a client waits for one reply (a 1.5B model on two cores can take minutes to read a long prompt).
TIMEOUT = 900.0
INSTRUCTIONS = ("You are a helpful assistant with tools to read and write the files of the user's project. "
                "Answer briefly.")


@dataclass
class Workspace:
    """Three file tools over one directory, and a record of what they were called with."""

    root: Path
    calls: list[tuple[str, str]] = field(default_factory=list)

    def list_files(self) -> str:
        """List the files of the project."""
        self.calls.append(("list_files", ""))
        return "\n".join(sorted(p.name for p in self.root.iterdir())) or "(no files)"

    def read_file(self, path: str) -> str:
        """Read a file of the project and return its text."""
        self.calls.append(("read_file", path))
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root.resolve()) or not target.is_file():
            return f"error: no file named {path!r} in the project"
        return target.read_text(encoding="utf-8")

    def write_file(self, path: str, content: str) -> str:
        """Write `content` to a file of the project, replacing it if it exists."""
        self.calls.append(("write_file", path))
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root.resolve()) or target.is_dir():
            return f"error: {path!r} is not a file path in the project"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {path}"

    def tools(self) -> list[Callable[..., str]]:
        """The tools as plain functions: the name, the docstring and the annotations are their definitions."""

        def list_files() -> str:
            """List the files of the project."""
            return self.list_files()

        def read_file(path: str) -> str:
            """Read a file of the project and return its text."""
            return self.read_file(path)

        def write_file(path: str, content: str) -> str:
            """Write content to a file of the project, replacing it if it exists."""
            return self.write_file(path, content)

        return [list_files, read_file, write_file]


def langchain(base_url: str, workspace: Workspace, task: str) -> str:
    """LangChain 1.x `create_agent` on `ChatOpenAI` (Chat Completions)."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(base_url=base_url, api_key="unused", model="local", timeout=TIMEOUT)  # type: ignore[arg-type]
    agent = create_agent(model, tools=[tool(f) for f in workspace.tools()], system_prompt=INSTRUCTIONS)
    result = agent.invoke({"messages": [{"role": "user", "content": task}]})
    return str(result["messages"][-1].content)


def _agents_sdk(base_url: str, workspace: Workspace, task: str, responses: bool) -> str:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # its traces go to OpenAI's platform otherwise

    async def run() -> str:
        client = AsyncOpenAI(base_url=base_url, api_key="unused", timeout=TIMEOUT)
        model_class = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
        agent = Agent(name="files", instructions=INSTRUCTIONS, tools=[function_tool(f) for f in workspace.tools()],
                      model=model_class(model="local", openai_client=client))
        try:
            return str((await Runner.run(agent, task)).final_output)
        finally:
            await client.close()

    return asyncio.run(run())


def agents_chat(base_url: str, workspace: Workspace, task: str) -> str:
    """The OpenAI Agents SDK with `OpenAIChatCompletionsModel`."""
    return _agents_sdk(base_url, workspace, task, responses=False)


def agents_responses(base_url: str, workspace: Workspace, task: str) -> str:
    """The OpenAI Agents SDK with `OpenAIResponsesModel`."""
    return _agents_sdk(base_url, workspace, task, responses=True)


def pydantic_ai(base_url: str, workspace: Workspace, task: str) -> str:
    """pydantic-ai's `Agent` on its OpenAI chat model, streamed (`run_stream`, which ends at the first text)."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run() -> str:
        client = AsyncOpenAI(base_url=base_url, api_key="unused", timeout=TIMEOUT)
        model = OpenAIChatModel("local", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, instructions=INSTRUCTIONS, tools=workspace.tools())
        try:
            async with agent.run_stream(task) as result:
                return str(await result.get_output())
        finally:
            await client.close()

    return asyncio.run(run())


def llamaindex(base_url: str, workspace: Workspace, task: str) -> str:
    """LlamaIndex's `FunctionAgent` on `OpenAILike`."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model="local", api_base=base_url, api_key="unused", is_chat_model=True,
                     is_function_calling_model=True, context_window=32768, timeout=TIMEOUT)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(f) for f in workspace.tools()], llm=llm,
                          system_prompt=INSTRUCTIONS, timeout=None)

    async def run() -> str:
        return str(await agent.run(task))

    return asyncio.run(run())


def smolagents(base_url: str, workspace: Workspace, task: str) -> str:
    """smolagents' `ToolCallingAgent` on `OpenAIServerModel`: every request says `tool_choice: "required"`, and the
    agent answers by calling its own `final_answer` tool."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    # smolagents builds a tool's schema from its docstring and refuses one without an `Args:` line per parameter.
    @tool
    def list_files() -> str:
        """List the files of the project."""
        return workspace.list_files()

    @tool
    def read_file(path: str) -> str:
        """Read a file of the project and return its text.

        Args:
            path: The file's path in the project.
        """
        return workspace.read_file(path)

    @tool
    def write_file(path: str, content: str) -> str:
        """Write content to a file of the project, replacing it if it exists.

        Args:
            path: The file's path in the project.
            content: The text to write.
        """
        return workspace.write_file(path, content)

    model = OpenAIServerModel(model_id="local", api_base=base_url, api_key="unused",
                              client_kwargs={"timeout": TIMEOUT})
    # verbosity 0: its step log goes to stdout, where the driver prints only the answer.
    agent = ToolCallingAgent(tools=[list_files, read_file, write_file], model=model, instructions=INSTRUCTIONS,
                             verbosity_level=0)
    return str(agent.run(task))


def autogen(base_url: str, workspace: Workspace, task: str) -> str:
    """AutoGen AgentChat's `AssistantAgent` on `OpenAIChatCompletionClient`, streamed: a model it does not know
    needs its `model_info`, one tool round a run by default (raised, for a task of two calls), and the tool's
    result is answered by the model (`reflect_on_tool_use`), not returned as the answer."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    async def run() -> str:
        client = OpenAIChatCompletionClient(
            model="local", base_url=base_url, api_key="unused", timeout=TIMEOUT,
            model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                        "structured_output": False})
        agent = AssistantAgent("files", model_client=client, tools=workspace.tools(), system_message=INSTRUCTIONS,
                               reflect_on_tool_use=True, max_tool_iterations=5, model_client_stream=True)
        try:
            return str((await agent.run(task=task)).messages[-1].content)
        finally:
            await client.close()

    return asyncio.run(run())


def strands(base_url: str, workspace: Workspace, task: str) -> str:
    """Strands Agents' `Agent` on its `OpenAIModel` (Chat Completions, streamed)."""
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(client_args={"api_key": "unused", "base_url": base_url, "timeout": TIMEOUT}, model_id="local")
    # callback_handler None: its default prints the reply as it streams, where the driver prints only the answer.
    agent = Agent(model=model, tools=[tool(f) for f in workspace.tools()], system_prompt=INSTRUCTIONS,
                  callback_handler=None)
    return str(agent(task)).strip()


def agno(base_url: str, workspace: Workspace, task: str) -> str:
    """Agno's `Agent` on `OpenAILike` (Chat Completions)."""
    from agno.agent import Agent
    from agno.models.openai.like import OpenAILike

    model = OpenAILike(id="local", api_key="unused", base_url=base_url, timeout=TIMEOUT)
    agent = Agent(model=model, tools=workspace.tools(), instructions=INSTRUCTIONS, telemetry=False)
    return str(agent.run(task).content)


def _quiet_litellm() -> None:
    """LiteLLM reads its model price list from the network when imported unless told to use its own copy."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def crewai(base_url: str, workspace: Workspace, task: str) -> str:
    """CrewAI: one `Agent` with the tools, one `Task`, a `Crew` kicked off; its `LLM` goes through LiteLLM
    (`openai/` names an OpenAI-compatible server)."""
    _quiet_litellm()
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # its telemetry goes to CrewAI's service otherwise
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    llm = LLM(model="openai/local", base_url=base_url, api_key="unused", timeout=TIMEOUT)
    agent = Agent(role="assistant", goal="Do what the user asks with the project's files", backstory=INSTRUCTIONS,
                  tools=[tool(f) for f in workspace.tools()], llm=llm, verbose=False)
    job = Task(description=task, expected_output="a brief answer", agent=agent)
    return str(Crew(agents=[agent], tasks=[job], verbose=False).kickoff())


def google_adk(base_url: str, workspace: Workspace, task: str) -> str:
    """Google's Agent Development Kit: an `LlmAgent` on `LiteLlm` (an OpenAI-compatible server), run by an
    `InMemoryRunner`; the answer is the last text it yields."""
    _quiet_litellm()
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    agent = LlmAgent(name="files", model=LiteLlm(model="openai/local", api_base=base_url, api_key="unused",
                                                 timeout=TIMEOUT),
                     instruction=INSTRUCTIONS, tools=workspace.tools())

    async def run() -> str:
        runner = InMemoryRunner(agent=agent, app_name="drive")
        session = await runner.session_service.create_session(app_name="drive", user_id="user")
        answer = ""
        async for event in runner.run_async(user_id="user", session_id=session.id, new_message=types.Content(
                role="user", parts=[types.Part(text=task)])):
            if event.content and event.content.parts:
                answer = "".join(part.text or "" for part in event.content.parts) or answer
        return answer

    return asyncio.run(run())


#: The drivers by the name docs/serve.md and scripts/drive_clients.py use.
DRIVERS: dict[str, Callable[[str, Workspace, str], str]] = {
    "langchain": langchain,
    "agents-chat": agents_chat,
    "agents-responses": agents_responses,
    "pydantic-ai": pydantic_ai,
    "llamaindex": llamaindex,
    "smolagents": smolagents,
    "autogen": autogen,
    "strands": strands,
    "agno": agno,
    "crewai": crewai,
    "google-adk": google_adk,
}


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in DRIVERS:
        print(f"usage: frameworks.py {{{','.join(DRIVERS)}}} BASE_URL WORKSPACE TASK", file=sys.stderr)
        return 2
    name, base_url, root, task = argv
    workspace = Workspace(Path(root))
    answer = DRIVERS[name](base_url, workspace, task)
    for tool_name, argument in workspace.calls:
        print(f"tool: {tool_name}({argument})", file=sys.stderr)
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
