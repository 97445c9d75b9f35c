"""The ways `mylm eval` asks an endpoint for calls, one question (a conversation and its tools) at a time.

- `protocol`: mylm's text protocol, as the agent asks (the grammar where the endpoint can, `constrain auto`);
- `protocol-nogrammar`: the same without a grammar (`constrain off`);
- `native`: the tools in the endpoint's own function-calling API (OpenAI-compatible `tools` in a chat
  completion), its `tool_calls` read as they come, nothing rescued from the text;
- `serve`: an in-process `mylm serve` on loopback in front of the endpoint, asked with the request an OpenAI
  client sends (`model`, `messages`, `tools`; no `parallel_tool_calls`, no `tool_choice`);
- `protocol-hermes`, `protocol-hermes-nogrammar` (and `protocol-mylm…`): the protocol modes in that tool dialect
  (`protocol.dialects`) whatever `--tool-dialect` says; `protocol` and `protocol-nogrammar` speak the
  configured one (`mylm` by default), so `--mode protocol,protocol-hermes` compares two dialects in one table.

Each returns a `Reply`: the calls (names as the question's tools name them), the text a client would see, whether
that text holds a call the mode did not read as one, and the time taken.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..agent.step import Meter, ModelStep, StepConfig, ToolDefinition, drain
from ..core.errors import AuthenticationError, EndpointUnreachableError, LLMError, ModelNotFoundError
from ..core.types import Message, ToolCall
from ..llm import LLM, LLMRequest, NativeTools, TextChunk, supports_native_tools
from ..protocol.dialects import TOOL_DIALECTS
from .recording import RecordingLLM

if TYPE_CHECKING:
    from ..prompts import PromptLoader

#: The protocol modes in a named tool dialect.
DIALECT_MODES = tuple(f"protocol-{d}{g}" for d in TOOL_DIALECTS for g in ("", "-nogrammar"))
MODES = ("protocol", "protocol-nogrammar", "native", "serve", *DIALECT_MODES)
#: Errors that would fail every item the same way: the run stops with them instead.
FATAL = (EndpointUnreachableError, AuthenticationError, ModelNotFoundError)
#: Unusable replies corrected before the last one is taken as it is (as `mylm serve` does by default).
MAX_CORRECTIONS = 2


@dataclass(frozen=True)
class Limits:
    """What one question may cost."""

    max_tokens: int = 1024
    timeout: float = 300.0
    #: Whether the endpoint accepts stop strings (the model registry knows the ones that refuse them).
    stop_strings: bool = True


@dataclass(frozen=True)
class Reply:
    """What a mode got for one question."""

    calls: tuple[ToolCall, ...]
    #: The text a client would see beside (or instead of) the calls.
    text: str
    #: No call was read, but the text holds calls of the question's tools (a call "left in text").
    in_text: bool
    seconds: float
    #: Why no answer came (the endpoint failed, timed out...), else None.
    error: str | None = None
    #: Calls the model still wrote when its corrections ran out (an unknown tool, arguments that never fit):
    #: like `mylm serve`, the protocol modes hand out none of them, only the reply's text.
    refused: tuple[ToolCall, ...] = ()
    #: The model's replies as written (the protocol modes: one per correction).
    replies: tuple[str, ...] = ()
    #: The model's answers to side questions (the fit check's Yes or No), in order.
    probes: tuple[str, ...] = ()


def calls_in_text(text: str, names: set[str]) -> bool:
    """Whether `text` holds calls of `names` written as text: mylm's own blocks, a Hermes/Qwen `<tool_call>`,
    call JSON (maybe fenced, after prose), Mistral's or Llama's markers, pythonic `[f(a=1)]`."""
    from ..protocol.parser import parse_completion
    from ..serve.native import rescued

    if not text.strip() or not names:
        return False
    parsed = parse_completion(text, tools={n: () for n in names})
    if any(c.name in names for c in parsed.tool_calls):
        return True
    return rescued(text, names) is not None


def protocol_mode(mode: str, dialect: str = "mylm") -> tuple[bool, str] | None:
    """For a protocol mode: whether it samples under the grammar, and its tool dialect (`dialect`, the configured
    one, unless the mode names its own); None for the other modes."""
    if mode in ("protocol", "protocol-nogrammar"):
        return mode == "protocol", dialect
    if mode in DIALECT_MODES:
        named = mode.removeprefix("protocol-")
        return not named.endswith("-nogrammar"), named.removesuffix("-nogrammar")
    return None


def protocol_reply(llm: LLM, prompts: PromptLoader, tools: Sequence[ToolDefinition],
                   conversation: Sequence[Mapping[str, Any]], *, constrain: str, limits: Limits,
                   dialect: str = "mylm") -> Reply:
    """Ask in mylm's text protocol, in the tool `dialect` (one step, corrected up to `MAX_CORRECTIONS` times, as a
    server would)."""
    started = time.perf_counter()
    llm = recorder = RecordingLLM(llm)
    step = ModelStep(llm, tools, StepConfig(max_tokens=limits.max_tokens, multiple_calls=True,
                                            constrain=constrain,  # type: ignore[arg-type]
                                            stop_strings=limits.stop_strings, tool_dialect=dialect),
                     prompts=prompts)
    instructions = "\n\n".join(str(m.get("content") or "") for m in conversation if m.get("role") == "system")
    messages = [Message("system", step.system_prompt(instructions=instructions))]
    messages += [Message("assistant" if m["role"] == "assistant" else "user", str(m.get("content") or ""))
                 for m in conversation if m.get("role") in ("user", "assistant")]
    corrections = step.corrections()
    deadline = time.monotonic() + limits.timeout
    question = next((m.content for m in reversed(messages) if m.role == "user"), "")  # as `mylm serve` asks it
    meter = Meter()
    try:
        for attempt in range(MAX_CORRECTIONS + 1):
            _, outcome = drain(step.turn(messages, deadline=deadline, corrections=corrections, check_calls=True,
                                         question=question, meter=meter))
            if outcome.usable or attempt == MAX_CORRECTIONS:
                break
            messages += [outcome.reply, Message("user", outcome.correction or "")]
    except FATAL:
        raise
    except LLMError as error:
        # The time limit or the endpoint ended the question: what the model wrote so far is kept for reading
        # (a runaway reply, say), as the item's last reply.
        replies = (*(t.text for t in recorder.turns), *([meter.partial] if meter.partial else []))
        return Reply((), "", False, time.perf_counter() - started, str(error), replies=replies,
                     probes=tuple(t.text for t in recorder.probes))
    parsed = outcome.turn.parsed
    # Out of corrections, a client of `mylm serve` gets the reply's text and never a call that could not run;
    # what the model tried is kept in `refused` (and in the eval's detail), so the table can say so.
    calls = outcome.calls if outcome.usable else ()
    refused = () if outcome.usable else tuple(parsed.tool_calls)
    text = "" if calls else (parsed.final_answer or (parsed.thought if refused else parsed.text) or "")
    names = {t.name for t in tools}
    return Reply(tuple(calls), text, not calls and not refused and calls_in_text(text, names),
                 time.perf_counter() - started, refused=refused, replies=tuple(t.text for t in recorder.turns),
                 probes=tuple(t.text for t in recorder.probes))


def openai_messages(conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's messages as a chat completion takes them (role and content)."""
    return [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in conversation]


def openai_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tools in OpenAI's `tools` shape."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": dict(t.parameters)}} for t in tools]


def native_reply(llm: LLM, tools: Sequence[ToolDefinition], conversation: Sequence[Mapping[str, Any]], *,
                 limits: Limits) -> Reply:
    """Ask through the endpoint's own tool calling; only its `tool_calls` count as calls."""
    from ..serve.native import Forwarding, arguments_of

    started = time.perf_counter()
    native = NativeTools(messages=tuple(openai_messages(conversation)), tools=tuple(openai_tools(tools)),
                         parallel=None)
    forwarding = Forwarding(llm, native)
    request = LLMRequest(
        messages=tuple(Message("system" if m["role"] == "system" else "assistant" if m["role"] == "assistant"
                               else "user", str(m.get("content") or "")) for m in conversation),
        max_tokens=limits.max_tokens, deadline=time.monotonic() + limits.timeout,
    )
    text = "".join(c.text for c in forwarding.stream(request) if isinstance(c, TextChunk))
    calls = []
    for call in forwarding.calls:
        arguments, _ = arguments_of(call.arguments)
        # Unreadable arguments are kept as they came, so the checker fails the call rather than forgetting it.
        calls.append(ToolCall(call.name, arguments if arguments is not None else {"(unreadable)": call.arguments}))
    names = {t.name for t in tools}
    return Reply(tuple(calls), text, not calls and calls_in_text(text, names), time.perf_counter() - started)


def check_native(llm: LLM) -> str | None:
    """Why `native` cannot run against this endpoint, or None."""
    if supports_native_tools(llm):
        return None
    return (f"the {getattr(llm, 'name', None) or type(llm).__name__} provider has no native tool calling "
            "(an OpenAI-compatible chat endpoint has)")


class ServedEndpoint:
    """`mylm serve` in this process, on a loopback port, in front of `llm`; `reply` asks it as a client does."""

    def __init__(self, url: str, model: str) -> None:
        import requests

        self.url = url
        self.model = model
        self.session = requests.Session()

    def reply(self, tools: Sequence[ToolDefinition], conversation: Sequence[Mapping[str, Any]], *,
              limits: Limits) -> Reply:
        """One chat completion with the request an OpenAI client sends (`model`, `messages`, `tools`)."""
        import requests

        started = time.perf_counter()
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(conversation),
                                "tools": openai_tools(tools)}
        try:
            response = self.session.post(f"{self.url}/v1/chat/completions", json=body, timeout=limits.timeout + 30)
            document = response.json()
        except (requests.RequestException, ValueError) as error:
            return Reply((), "", False, time.perf_counter() - started, f"mylm serve: {error}")
        if response.status_code != 200:
            message = ((document.get("error") or {}) if isinstance(document, dict) else {}).get("message")
            return Reply((), "", False, time.perf_counter() - started,
                         f"mylm serve answered {response.status_code}: {message or response.text[:200]}")
        message = document["choices"][0]["message"]
        calls = []
        for entry in message.get("tool_calls") or ():
            function = entry.get("function") or {}
            raw = function.get("arguments") or "{}"
            try:
                arguments = json.loads(raw)
            except ValueError:
                arguments = {"(unreadable)": raw}
            calls.append(ToolCall(str(function.get("name", "")), arguments if isinstance(arguments, dict) else {}))
        text = str(message.get("content") or "")
        names = {t.name for t in tools}
        return Reply(tuple(calls), text, not calls and calls_in_text(text, names), time.perf_counter() - started)


@contextmanager
def served(llm: LLM, prompts: PromptLoader, *, constrain: str, limits: Limits,
           model: str | None, tool_dialect: str = "mylm") -> Iterator[ServedEndpoint]:
    """Start `mylm serve` (its defaults: corrections, the grammar per `constrain`) on a free loopback port."""
    from ..core.errors import ConfigError

    try:
        from ..serve.app import ServeConfig, create_app
        from ..serve.core import Core, CoreSettings
        from ..serve.server import Background
    except ImportError as error:
        raise ConfigError(f"the serve mode needs the serve extra (pip install 'mylm[serve]'): {error}") from None
    core = Core(llm, prompts, CoreSettings(constrain=constrain,  # type: ignore[arg-type]
                                           max_corrections=MAX_CORRECTIONS, max_tokens=limits.max_tokens,
                                           timeout=limits.timeout, stop_strings=limits.stop_strings,
                                           tool_dialect=tool_dialect))
    app = create_app(core, ServeConfig(model=model or "mylm"))
    with Background(app) as url:
        yield ServedEndpoint(url, model or "mylm")

