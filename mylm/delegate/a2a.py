"""The A2A face of the delegate (`mylm a2a`) on the official `a2a-sdk`: an `AgentExecutor` whose tasks are
delegated runs, the Agent Card, and the app (JSON-RPC for A2A 1.0 and 0.3 clients) behind the Host, Origin and
key rules of `mylm.serve.guard`.

A task is one run. Its status moves WORKING (a status update per iteration and per tool call) to COMPLETED
with the answer as an artifact, FAILED, REJECTED (a request mylm refuses) or CANCELED; a call the approval
policy would ask about parks it in INPUT_REQUIRED with the question, and the client's next message on that task
answers it. A context is one conversation, saved as one session: a new task in it continues from there.

Imported only by `mylm a2a` (the SDK is the optional `a2a` extra)."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import get_message_text, new_task, new_text_artifact, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb

from .. import __version__
from ..approval import Answer
from ..core.errors import MylmError
from ..core.types import (
    Event,
    IterationStartEvent,
    Message,
    StepCompleteEvent,
    StopReason,
    ToolCallEvent,
    ToolResultEvent,
)
from .core import Question, RunSetup
from .service import DelegateService, Finished

logger = logging.getLogger("mylm.a2a")

#: Where the card is served (A2A 1.0 and 0.3 clients both look there).
CARD_PATH = "/.well-known/agent-card.json"
#: How much of a tool's arguments and output a status update shows.
SHOWN = 400
#: Replies that approve a call; "always" approves its tool for the rest of the conversation; anything else
#: refuses it, and is passed to the model as the reason.
YES = frozenset({"y", "yes", "approve", "approved", "allow", "ok", "okay", "run it", "go ahead"})
ALWAYS = frozenset({"a", "always", "allow always", "always allow"})

State = pb.TaskState


def agent_card(url: str, *, keyed: bool) -> pb.AgentCard:
    """mylm's card: what it does, its skills, streaming, and the JSON-RPC interface for 1.0 and 0.3 clients."""
    card = pb.AgentCard(
        name="mylm",
        description=(
            "A local-model agent that works in a directory on this machine: it reads and searches files and runs "
            "commands (in a sandbox) to do a task, then answers. Calls that change things are put to you first "
            "(the task waits in input-required: reply yes, always, or no with a reason)."
        ),
        version=__version__,
        supported_interfaces=[
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(
                id="run_task", name="Run a task",
                description=("Do a task in the server's workspace with tools (read, search and write files, run "
                             "commands), reporting each iteration and tool call, and answer. Message metadata "
                             "`workspace` names a directory inside the server's allowed roots."),
                tags=["agent", "tools", "files", "shell", "local model"],
                examples=["Find the TODO comments in this repository", "Run the tests and tell me what fails"],
            ),
            pb.AgentSkill(
                id="ask", name="Answer a question",
                description="Answer from the model without tools when the message metadata sets `tools: false`.",
                tags=["question", "local model"], examples=["What does HTTP 421 mean?"],
            ),
        ],
    )
    if keyed:
        card.security_schemes["bearer"].http_auth_security_scheme.scheme = "Bearer"
        card.security_requirements.add().schemes["bearer"].SetInParent()
    return card


@dataclass
class Conversation:
    """A context: the saved session its runs go to, the conversation so far, the tools approved "always"."""

    session: str | None = None
    history: tuple[Message, ...] = ()
    always: set[str] = field(default_factory=set)


@dataclass
class TaskRun:
    """One task's run, which outlives the `execute` call that started it (it waits in INPUT_REQUIRED)."""

    task_id: str
    context_id: str
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    runner: asyncio.Task[None] | None = None
    answer: asyncio.Future[Answer] | None = None
    cancelled: bool = False


class DelegateExecutor(AgentExecutor):
    """Runs each A2A task as a delegated run of `service`."""

    def __init__(self, service: DelegateService) -> None:
        self.service = service
        self.runs: dict[str, TaskRun] = {}
        self.contexts: dict[str, Conversation] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        run = self.runs.get(task_id)
        if run is not None and run.answer is not None and not run.answer.done():
            answer = read_answer(context)
            run.answer.set_result(answer)
            said = {"yes": "approved", "always": "approved for the rest of this conversation"}.get(
                answer.choice, "refused")
            await updater.start_work(self._message(updater, f"The call was {said}; continuing."))
            await self._relay(run, updater)
            return
        if context.current_task is None:
            await event_queue.enqueue_event(new_task(task_id, context_id, State.TASK_STATE_SUBMITTED,
                                                     history=[context.message] if context.message else None))
        elif run is None:
            # Only a task waiting for an answer takes another message; its run is gone (the server restarted).
            await updater.failed(self._message(updater, "this task is no longer running on this server; send "
                                                        "the request again as a new task"))
            return
        try:
            request = self._request(context)
        except MylmError as error:
            await updater.reject(self._message(updater, self.service.redactor.redact(str(error))))
            return
        run = TaskRun(task_id, context_id)
        self.runs[task_id] = run
        run.runner = asyncio.create_task(self._run(run, request), name=f"mylm-a2a-{task_id}")
        await updater.start_work(self._message(updater, "mylm is working on it."))
        await self._relay(run, updater)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        run = self.runs.pop(task_id, None)
        text = "Cancelled."
        if run is not None and run.runner is not None:
            run.cancelled = True
            run.runner.cancel()
            # The run stops its command and reaps its process group before the cancel is answered.
            await asyncio.wait([run.runner])
            conversation = self.contexts.get(context_id)
            if conversation is not None and conversation.session:
                text = f"Cancelled; the partial run is saved in session {conversation.session}."
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.cancel(self._message(updater, text))

    def _request(self, context: RequestContext) -> Any:
        metadata = context.metadata or {}
        if context.message is not None and context.message.metadata:
            from google.protobuf import json_format

            metadata = {**metadata, **json_format.MessageToDict(context.message.metadata)}
        text = context.get_user_input()
        if metadata.get("tools") is False:
            return self.service.question(text)
        workspace = metadata.get("workspace")
        return self.service.request(text, workspace=str(workspace) if workspace else None, client_roots=None)

    async def _run(self, run: TaskRun, request: Any) -> None:
        """The run itself: its events go to the outbox (for whichever `execute` call relays them)."""
        conversation = self.contexts.setdefault(run.context_id, Conversation())
        if conversation.session is None and self.service.sessions is not None:
            conversation.session = await asyncio.to_thread(
                self.service.sessions.start, request.workspace, request.prompt, context=run.context_id)

        async def ask(question: Question) -> Answer:
            run.answer = asyncio.get_running_loop().create_future()
            await run.outbox.put(question)
            return await run.answer

        async def relay(event: Event) -> None:
            if isinstance(event, (IterationStartEvent, ToolCallEvent, ToolResultEvent, StepCompleteEvent)):
                await run.outbox.put(event)

        setup = RunSetup(ask=ask, always=conversation.always, history=conversation.history)
        try:
            finished = await self.service.execute(request, "a2a", setup, relay, session=conversation.session)
        except MylmError as error:
            await run.outbox.put(error)
            return
        except Exception as error:  # the task fails with one line; the server goes on
            logger.exception("a2a run failed")
            await run.outbox.put(error)
            return
        conversation.history = finished.result.history
        await run.outbox.put(finished)

    async def _relay(self, run: TaskRun, updater: TaskUpdater) -> None:
        """Turn the run's events into status updates until it asks a question (INPUT_REQUIRED) or ends."""
        while True:
            item = await run.outbox.get()
            if run.cancelled:
                return
            if isinstance(item, Question):
                await updater.requires_input(self._message(updater, question_text(item), question_data(item)))
                return
            if isinstance(item, Finished):
                self.runs.pop(run.task_id, None)
                await self._finish(item, updater)
                return
            if isinstance(item, BaseException):
                self.runs.pop(run.task_id, None)
                text = str(item) if isinstance(item, MylmError) else f"internal error: {type(item).__name__}"
                await updater.failed(self._message(updater, self.service.redactor.redact(text)))
                return
            text = self.describe(item)
            if text:
                await updater.start_work(self._message(updater, text, {"event": item.to_dict()}
                                                       if isinstance(item, IterationStartEvent) else None))

    async def _finish(self, finished: Finished, updater: TaskUpdater) -> None:
        report = finished.report
        data = report.to_dict()
        if report.stop_reason == StopReason.CANCELLED.value:
            return  # cancel() writes the terminal state
        if report.answer:
            artifact = new_text_artifact("answer", report.answer, description="mylm's answer")
            await updater.add_artifact(list(artifact.parts), name="answer", metadata={"mylm": data},
                                       last_chunk=True)
        if report.stop_reason in (StopReason.TIMEOUT.value, StopReason.ERROR.value):
            await updater.failed(self._message(updater, f"The run ended ({report.stop_reason}): "
                                                        f"{report.error or 'no answer'}", data))
        else:
            await updater.complete(self._message(updater, report.answer or "(no answer)", data))

    def describe(self, event: Event) -> str:
        """A status line for an event (the seeds' "Agentic iteration n/max" wording), redacted and short."""
        redact = self.service.redactor.redact
        if isinstance(event, IterationStartEvent):
            return f"Agentic iteration {event.iteration}/{event.max_iterations}"
        if isinstance(event, ToolCallEvent):
            arguments = json.dumps(dict(event.call.arguments), ensure_ascii=False, default=str)
            return f"Calling {event.call.name} {_short(redact(arguments))}"
        if isinstance(event, ToolResultEvent):
            state = "failed" if event.is_error else "returned"
            return f"{event.name} {state} after {event.duration:.2f} s: {_short(redact(event.output))}"
        if isinstance(event, StepCompleteEvent) and event.status in ("denied", "interrupted"):
            return f"The call {event.step_id} was {event.status}."
        return ""

    @staticmethod
    def _message(updater: TaskUpdater, text: str, data: dict[str, Any] | None = None) -> pb.Message:
        message = updater.new_agent_message([new_text_part(text)])
        if data:
            message.metadata.update({"mylm": data})
        return message


def question_text(question: Question) -> str:
    """What the client is asked: exactly what the call will do, why the policy asks, and how to answer."""
    decision = question.decision
    details = f"\n{decision.details}" if decision.details else ""
    always = (f" 'always' to allow {question.call.name} for the rest of this conversation,"
              if decision.rememberable else "")
    return (f"mylm asks before it does this: {decision.summary}{details}\nWhy it asks: {decision.reason}\n"
            f"Reply 'yes' to allow it,{always} or 'no' (with a reason, if you like) to refuse it.")


def question_data(question: Question) -> dict[str, Any]:
    """The question as data, for clients that answer programmatically."""
    decision = question.decision
    options = ["yes", "always", "no"] if decision.rememberable else ["yes", "no"]
    return {"question": {"tool": question.call.name, "arguments": dict(question.call.arguments),
                         "summary": decision.summary, "reason": decision.reason, "options": options}}


def read_answer(context: RequestContext) -> Answer:
    """The client's answer: 'yes', 'always', or anything else as a refusal (its text the reason)."""
    text = get_message_text(context.message).strip() if context.message is not None else ""
    word = text.lower().strip(" .!")
    if word in YES:
        return Answer("yes")
    if word in ALWAYS:
        return Answer("always")
    reason = text
    for prefix in ("no", "n", "deny", "refuse", "reject"):
        if word == prefix or word.startswith((prefix + " ", prefix + ",")):
            reason = text[len(prefix):].lstrip(" ,:;-")
            break
    return Answer("no", reason)


def build_app(service: DelegateService, *, url: str, key: str | None, hosts: tuple[str, ...]) -> Any:
    """The ASGI app: the card, JSON-RPC (1.0, and 0.3 on the same route), behind the Host/Origin/key rules."""
    from starlette.applications import Starlette

    from ..serve.guard import KeyedGuard

    card = agent_card(url, keyed=key is not None)
    handler = DefaultRequestHandler(agent_executor=DelegateExecutor(service), task_store=InMemoryTaskStore(),
                                    agent_card=card)
    routes = [*create_agent_card_routes(card, card_url=CARD_PATH),
              *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)]
    return KeyedGuard(Starlette(routes=routes), hosts=hosts, key=key, public=(CARD_PATH,))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
