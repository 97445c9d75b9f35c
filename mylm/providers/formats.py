"""Chat formats: the templates in `prompts/chat/` that make a conversation one prompt for raw endpoints."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..core.errors import ConfigError
from ..core.types import Message

if TYPE_CHECKING:
    from ..prompts import PromptLoader


@dataclass(frozen=True)
class ChatFormat:
    """A named chat format: its template, and the text a model writes when its turn is over."""

    name: str
    #: Template name on the prompt search path, e.g. `chat/chatml.j2`.
    template: str
    #: End-of-turn markers. Servers usually stop on the real token, but a model may spell the marker as text
    #: and     #: go on to write the user's next turn, so these are sent as stops and also cut client-side.
    stops: tuple[str, ...] = ()


CHAT_FORMATS: Mapping[str, ChatFormat] = MappingProxyType(
    {
        "chatml": ChatFormat("chatml", "chat/chatml.j2", ("<|im_end|>", "<|im_start|>")),
        "llama3": ChatFormat("llama3", "chat/llama3.j2", ("<|eot_id|>", "<|start_header_id|>")),
        "mistral": ChatFormat("mistral", "chat/mistral.j2", ("</s>", "[INST]")),
        "gemma": ChatFormat("gemma", "chat/gemma.j2", ("<end_of_turn>", "<start_of_turn>")),
        "plain": ChatFormat("plain", "chat/plain.j2", ("\nUser:",)),
    }
)

#: What raw-prompt endpoints use when no format is configured: the most widespread instruct format.
DEFAULT_CHAT_FORMAT = "chatml"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def chat_format(name: str) -> ChatFormat:
    """The format called `name`: a built-in one, or a user template `chat/<name>.j2` (with no extra stops)."""
    known = CHAT_FORMATS.get(name.lower())
    if known is not None:
        return known
    # A user may drop their own `chat/NAME.j2` on the prompt search path; the name must not escape `chat/`.
    if not _NAME.match(name) or ".." in name:
        raise ConfigError(
            f"invalid chat format {name!r}; use one of {', '.join(CHAT_FORMATS)} or the name of a "
            "template chat/NAME.j2 on the prompt search path"
        )
    return ChatFormat(name, f"chat/{name.removesuffix('.j2')}.j2")


def render_prompt(loader: PromptLoader, fmt: ChatFormat, messages: Sequence[Message]) -> str:
    """Render the conversation through the format's template, ending with an open assistant turn.

    Only the template writes turn boundaries: special tokens in the system prompt (tool descriptions, project
    instructions) and in earlier replies are defused. User-role text is the user's own or an observation the
    agent already neutralised, so it is passed as written.
    """
    return loader.render(fmt.template, messages=defused_messages(messages), add_generation_prompt=True)


def defused_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The messages for a raw prompt (rendered here or by a server's template route), with every special token
    defused in text that is not the user's own (system prompt, earlier replies), but the hermes dialect's call
    tags: mylm's own in the system prompt, the model's own in its replies (data placed in either was defused
    when it was placed: tool descriptions, instructions, a client's messages), and Qwen reads `<tool_call>`."""
    from ..protocol.defuse import defuse_special_tokens
    from ..protocol.dialects import CALL_TAGS

    keep = frozenset(CALL_TAGS["hermes"])
    return [
        m.to_dict() if m.role == "user" else {"role": m.role, "content": defuse_special_tokens(m.content, keep=keep)}
        for m in messages
    ]


#: Stand-ins for message contents while a template renders: private-use characters no template writes or alters.
_MARK = "\ue000{}\ue001"
_MARKS = re.compile("\ue000([0-9]+)\ue001")


def data_segments(render: Callable[[list[Message]], str], messages: Sequence[Message]) -> list[tuple[str, bool]]:
    """The rendered prompt as `(text, is_data)` pieces: what the template wrote, and the messages' contents.

    Whoever tokenizes the prompt itself tokenizes the template's pieces with special tokens parsed and the data
    without (llama.cpp's `special=False`), so no text in a message can ever become a control token, whatever
    its spelling. The template renders stand-ins for the contents; if it does not place each exactly once, in
    order (it dropped, repeated or rewrote one), the whole prompt is one template piece, as before.
    """
    contents = [d["content"] for d in defused_messages(messages)]
    marked = [Message(m.role, _MARK.format(i)) for i, m in enumerate(messages)]
    rendered = render(marked)
    parts = _MARKS.split(rendered)
    order = [int(i) for i in parts[1::2]]
    if order != list(range(len(messages))) or "\ue000" in "".join(parts[0::2]):
        # All of it will be read for special tokens: what is not the user's own goes in defused, whatever the
        # render does itself (a GGUF's own template does nothing).
        return [(render([Message(m.role, c) for m, c in zip(messages, contents)]), False)]
    pieces: list[tuple[str, bool]] = []
    for k, part in enumerate(parts):
        pieces.append((part, False) if k % 2 == 0 else (contents[int(part)], True))
    return pieces

