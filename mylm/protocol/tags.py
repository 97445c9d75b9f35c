"""Every tag string of the protocol and every chat-template special token, in one place.

The parser, the stop list, the canonical form, the corrections and `neutralise` all read these names, so a tag
recognised on input is also one that is defused in tool output (they drifted apart before:
`</function_results>` was read as an observation but not defused).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# ------------------------------------------------------------------------------------------- the protocol

TOOL_OPEN = "<tool_code>"
TOOL_CLOSE = "</tool_code>"
NAME_OPEN = "<name>"
NAME_CLOSE = "</name>"
PARAMS_OPEN = "<parameters>"
PARAMS_CLOSE = "</parameters>"
OBSERVATION_OPEN = "<observation>"
OBSERVATION_CLOSE = "</observation>"
FINAL_OPEN = "<final_answer>"
FINAL_CLOSE = "</final_answer>"

#: Where a model invents a tool result (ours, Hermes', Claude's): the rest of its reply is discarded.
OBSERVATION_TAGS = (OBSERVATION_OPEN, "<tool_response>", "<function_results>")
PARAMS_OPEN_TAGS = (PARAMS_OPEN, "<arguments>")
PARAMS_CLOSE_TAGS = (PARAMS_CLOSE, "</arguments>")


# --------------------------------------------------------------------------------------------- reasoning


@dataclass(frozen=True)
class ReasoningDialect:
    """One way models mark reasoning: the markers that open it, the markers that close it, and the closers that
    still mean "what came before was reasoning" when no opener was seen (the chat template wrote the opener).

    Markers are matched case-insensitively. `lone_closes` defaults to `closes`; harmony's `<|end|>` ends every
    message (Phi-3 writes it after answers), so only its final-channel header counts there.
    """

    name: str
    opens: tuple[str, ...]
    closes: tuple[str, ...]
    lone_closes: tuple[str, ...] | None = None
    #: Where this spelling comes from (documentation only).
    source: str = ""

    @property
    def lone(self) -> tuple[str, ...]:
        return self.closes if self.lone_closes is None else self.lone_closes


#: Every reasoning dialect mylm knows. The parser (reasoning never runs), the stops (a stop is never sent while
#: reasoning may be open), the canonical form (tool calls never contain them), `neutralise` (tool output never
#: holds one intact) and the per-endpoint learning of whether a template opens reasoning all read this table;
#: `reasoning_markers` in the config adds to it (see `with_markers`).
REASONING_DIALECTS: tuple[ReasoningDialect, ...] = (
    ReasoningDialect("think", ("<think>",), ("</think>",), source="DeepSeek-R1, Qwen3, QwQ, GLM, MiniMax-M1"),
    ReasoningDialect("thinking", ("<thinking>",), ("</thinking>",), source="Claude-style prompts, Granite, Hermes"),
    ReasoningDialect("seed", ("<seed:think>",), ("</seed:think>",), source="ByteDance Seed-OSS"),
    ReasoningDialect("minimax", ("<mm:think>",), ("</mm:think>",), source="MiniMax (getkimchi/kimchi#598)"),
    ReasoningDialect("magistral", ("[THINK]",), ("[/THINK]",), source="Mistral Magistral"),
    ReasoningDialect("kimi", ("◁think▷",), ("◁/think▷",), source="Moonshot Kimi-VL-Thinking, Kimi-K1.5"),
    ReasoningDialect("reasoning", ("<reasoning>",), ("</reasoning>",), source="Nemotron, Arcee, prompt-taught"),
    # gpt-oss: `<|channel|>analysis<|message|>…<|end|>` then `<|start|>assistant<|channel|>final<|message|>…`.
    ReasoningDialect("harmony", ("<|channel|>analysis<|message|>",), ("<|end|>", "<|channel|>final<|message|>"),
                     lone_closes=("<|channel|>final<|message|>",), source="OpenAI gpt-oss (harmony)"),
)

#: Harmony's message envelope outside reasoning: markup, never part of the answer (dropped by the parser).
ENVELOPE_MARKERS = ("<|start|>assistant", "<|return|>", "<|end|>")

#: The fields in which servers send reasoning split from the content (read by the providers).
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")


def with_markers(markers: Iterable[Sequence[str]], base: tuple[ReasoningDialect, ...] = REASONING_DIALECTS
                 ) -> tuple[ReasoningDialect, ...]:
    """The table extended by config `reasoning_markers`: pairs `[open, close]` for a model mylm has not met."""
    extra = []
    markers = list(markers)
    if not markers:
        return base  # the same table (so the parser's default path applies)
    for i, pair in enumerate(markers):
        if len(pair) != 2 or not all(isinstance(m, str) and m.strip() and len(m) <= 64 for m in pair):
            raise ValueError("reasoning_markers must be a list of [open, close] string pairs, e.g. "
                             '[["<reflect>", "</reflect>"]]')
        extra.append(ReasoningDialect(f"config-{i + 1}", (pair[0],), (pair[1],), source="config"))
    return (*base, *extra)


def reasoning_opens(dialects: tuple[ReasoningDialect, ...] = REASONING_DIALECTS) -> tuple[str, ...]:
    """Every opening marker (lower case)."""
    return tuple(dict.fromkeys(m.lower() for d in dialects for m in d.opens))


def reasoning_closes(dialects: tuple[ReasoningDialect, ...] = REASONING_DIALECTS) -> tuple[str, ...]:
    """Every closing marker (lower case)."""
    return tuple(dict.fromkeys(m.lower() for d in dialects for m in d.closes))


def lone_closes(dialects: tuple[ReasoningDialect, ...] = REASONING_DIALECTS) -> tuple[str, ...]:
    """The closers that, with no opener before them, make the text before them reasoning (lower case)."""
    return tuple(dict.fromkeys(m.lower() for d in dialects for m in d.lone))


THINK_NAMES = ("think", "thinking")
#: Every opening and closing reasoning marker of the built-in table (lower case).
THINK_OPENS = reasoning_opens()
THINK_CLOSES = reasoning_closes()

# Other formats' call tags, which the parser also reads: Hermes/Qwen, Qwen3-Coder, Claude, GLM.
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
FUNCTION_CALLS_OPEN = "<function_calls>"
FUNCTION_CALLS_CLOSE = "</function_calls>"
INVOKE_OPEN = "<invoke"
INVOKE_CLOSE = "</invoke>"
ARG_KEY_OPEN = "<arg_key>"
ARG_KEY_CLOSE = "</arg_key>"
ARG_VALUE_OPEN = "<arg_value>"
ARG_VALUE_CLOSE = "</arg_value>"

#: Markers only a model writes around a reply that is nothing but calls (`neutralise` breaks them in tool output,
#: so a reply holding them is the model's own): Mistral, Llama 3.1 and 4, Hermes, Phi-4-mini's `functools[…]`.
CALL_MARKERS_BEFORE = ("[TOOL_CALLS]", "<|python_tag|>", "<|python_start|>", TOOL_CALL_OPEN, "functools")
CALL_MARKERS_AFTER = (TOOL_CALL_CLOSE, "<|python_end|>", "<|eom_id|>", "<|eot_id|>")

#: Block openers of the formats a call drifts into, by the block kind they open.
DRIFT_OPENERS = {
    TOOL_CALL_OPEN: "tool_call",
    FUNCTION_OPEN: "function",
    FUNCTION_CALLS_OPEN: "function_calls",
    INVOKE_OPEN: "invoke",
}
#: Each block kind: its opener, the end tags that close it, and whether JSON may follow the opener at once.
BLOCK_KINDS = {
    "tool_code": (TOOL_OPEN, (TOOL_CLOSE,), True),
    "tool_call": (TOOL_CALL_OPEN, (TOOL_CALL_CLOSE,), True),
    "function": (FUNCTION_OPEN, (FUNCTION_CLOSE, TOOL_CALL_CLOSE), False),
    "function_calls": (FUNCTION_CALLS_OPEN, (FUNCTION_CALLS_CLOSE,), False),
    "invoke": (INVOKE_OPEN, (INVOKE_CLOSE, FUNCTION_CALLS_CLOSE), False),
}
#: The opening and closing tags of each block kind, as the corrections name them.
KIND_TAGS = {
    "tool_code": (TOOL_OPEN, TOOL_CLOSE),
    "tool_call": (TOOL_CALL_OPEN, TOOL_CALL_CLOSE),
    "function": (FUNCTION_OPEN + "…>", FUNCTION_CLOSE),
    "function_calls": (FUNCTION_CALLS_OPEN, FUNCTION_CALLS_CLOSE),
    "invoke": (INVOKE_OPEN + " name=…>", INVOKE_CLOSE),
    "tool_tag": ("<TOOL_NAME>", "</TOOL_NAME>"),
    "react": ("Action:", "Action Input:"),
}

#: The stops mylm sends: the end of a call, and the start of an observation the model must not invent.
DEFAULT_STOPS = (TOOL_CLOSE, OBSERVATION_OPEN)

#: Every element name the protocol (or a format it reads) gives meaning to; defused in tool output so that an
#: output can neither close its observation nor open a call, whatever the model reads it as.
PROTOCOL_NAMES = (
    "observation", "tool_code", "tool_calls", "tool_call", "tool_response", "tool_definitions", "tool",
    "function_calls", "function_results", "function", "parameters", "parameter", "arguments", "argument", "name",
    "think", "thinking", "final_answer", "invoke", "arg_key", "arg_value",
)
PROTOCOL_TAG = re.compile(r"<(\s*/?\s*(?:" + "|".join(PROTOCOL_NAMES) + r")\b)", re.IGNORECASE)

# ----------------------------------------------------------------------------------- chat-template tokens

#: Special tokens of chat templates that a tokenizer (or a server parsing specials in content) may read as a
#: real turn boundary. Listed for documentation and tests; `SPECIAL_TOKEN` matches these and their families.
SPECIAL_TOKENS = (
    # ChatML (Qwen, Yi, Hermes, …) and Qwen's own
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_sep|>", "<tool_call>", "</tool_call>",
    # Llama 3
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_0|>",
    # Llama 2 and SentencePiece models
    "<s>", "</s>", "<unk>", "<<SYS>>", "<</SYS>>",
    # Mistral
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[THINK]", "[/THINK]", "[ARGS]", "[CALL_ID]",
    # Gemma
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<start_of_image>", "<end_of_image>",
    # Phi, GLM, Granite, gpt-oss (harmony)
    "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<|observation|>", "[gMASK]", "<sop>", "<eop>",
    "<|start_of_role|>", "<|end_of_role|>", "<|start|>", "<|channel|>", "<|message|>", "<|return|>", "<|call|>",
    # Command-R
    "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    # DeepSeek (fullwidth bars, U+FF5C, and U+2581 for spaces)
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>",
    # StarCoder / fill-in-the-middle
    "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<|fim_prefix|>", "<file_sep>", "<|file_sep|>",
)

# Special tokens are recognised by SHAPE, so a family mylm has never seen is caught too; the shapes are ones
# ordinary prose, code and logs do not take (`[TODO]`, `[INFO]`, `<b>`, `a < b`, `x || y` are left alone):
# - bars inside angle or square brackets, on one side or both, ASCII or fullwidth: `<|im_start|>`,
#   `<｜User｜>`, Gemma 4's `<|turn>`/`<turn|>`, EXAONE's `[|assistant|]`;
# - dunder words in angle brackets: llama.cpp's media marker `<__media__>`;
# - a word ending in a number in angle brackets: Baichuan's `<reserved_106>`, Nemotron's `<extra_id_1>`,
#   `<SPECIAL_12>`, Llama's `<|reserved_special_token_0|>`;
# - namespaced control words with no attributes: Seed-OSS `<seed:bos>`, `<seed:think>`, MiniMax `<mm:think>`,
#   `<minimax:tool_call>` (XML such as `<xs:element name=…>` has attributes or other local names);
# - square-bracketed upper-case control words with a slash or an underscore (`[/INST]`, `[TOOL_CALLS]`,
#   `[SYSTEM_PROMPT]`) and the few bare ones of Mistral, BERT-style and GLM vocabularies (`[INST]`, `[BOS]`);
# - MiniMax-01's `]~!b[`, `]~b]`, `[e~[` and Falcon's `>>ABSTRACT<<`;
# - the angle-bracket words templates reserve (`<s>`, `<unk>`, `<start_of_turn>`, MiniCPM's `<用户>`, `<AI>`).
# Matching is case-sensitive where the tokens are (`[INST]`, not `[inst]`), case-insensitive for angle words.
_BAR = "[|｜]"
_CONTROL_WORDS = ("think|bos|eos|pad|unk|eot|sep|tool_call|tool_calls|tool_response|tool_output|function_call"
                  "|cot_budget_reflect|turn|role|call|response")
SPECIAL_TOKEN = re.compile(
    rf"<\s*{_BAR}[^<>\n]{{0,80}}?{_BAR}\s*>"
    rf"|<{_BAR}[A-Za-z_][\w.▁-]{{0,60}}>|<[A-Za-z_][\w.▁-]{{0,60}}{_BAR}>"
    rf"|\[\s*{_BAR}[^\[\]\n]{{1,60}}?{_BAR}\s*\]"
    r"|</?__[A-Za-z0-9_]{1,40}__>"
    r"|</?[A-Za-z]+(?:_[A-Za-z]+)*_[0-9]{1,6}>"
    rf"|(?i:</?[a-z]{{1,12}}:(?:{_CONTROL_WORDS})>)"
    r"|\[/[A-Za-z][A-Za-z_]{1,30}\]|\[[A-Z]+(?:_[A-Z]+)+\]"
    r"|\[(?:INST|THINK|ARGS|CALL_ID|IMG|BOS|EOS|PAD|UNK|CLS|SEP|MASK|PREFIX|SUFFIX|MIDDLE|gMASK|sMASK)\]"
    r"|\]~!?[a-z]{1,2}[\[\]]|\[[a-z]{1,2}~\["
    r"|>>[A-Z]{3,20}<<"
    r"|<</?SYS>>"
    r"|<(?:用户|AI)>"
    # chat-media markers: SmolVLM's <end_of_utterance>, Gemma 3n's <start_of_audio>, <audio_soft_token>,
    # Idefics3's <fake_token_around_image>, <global-img>, <row_1_col_2>, InternVL's <IMG_CONTEXT>
    r"|(?i:</?(?:start|end|begin|beginning)_of_[a-z]+(?:_[a-z]+)*>)"
    r"|</?[a-z]+(?:_[a-z]+)*_soft_token>|<fake_token_around_image>|<global-img>|<row_[0-9]{1,3}_col_[0-9]{1,3}>"
    r"|</?IMG_CONTEXT>"
    r"|(?i:</?(?:s|unk|bos|eos|pad|sop|eop|tool_call|tool_response|start_of_turn|end_of_turn|start_of_image"
    r"|end_of_image|beginning_of_sentence|end_of_sentence|fim_prefix|fim_middle|fim_suffix|fim_pad|file_sep"
    r"|repo_name|reponame|filename|gh_stars|empty_output|jupyter_start|jupyter_text|jupyter_code|jupyter_output"
    r"|commit_before|commit_msg|commit_after)>)"
)

#: Inserted after a special token's first character: the text reads the same, but no tokenizer sees the token.
DEFUSER = "\u200b"

#: A protocol tag as no parser reads it: with a space (or a zero-width space) after `<`, the only way a grammar
#: that allows `<` in an answer solely before a space lets a model write one, or neutralised (`&lt;`), as a
#: tool's output echoed back carries it.
_DEFUSED_TAG = re.compile(
    r"(?:<[ \t" + DEFUSER + r"]+|&lt;[ \t" + DEFUSER + r"]*)/?[ \t" + DEFUSER + r"]*(?:"
    + "|".join(PROTOCOL_NAMES) + r")\b[^<>\n]{0,80}>", re.IGNORECASE)
#: Where a model began writing a tool's output itself (in any of those spellings): what follows is made up.
_MADE_UP = re.compile(r"(?:<[ \t" + DEFUSER + r"]*|&lt;[ \t" + DEFUSER + r"]*)observation\b", re.IGNORECASE)


def answer_shown(text: str) -> str:
    """`text` (an answer, or the thought before a call) as a user or a client may see it: cut where the model
    began inventing an observation (unless nothing would be left), and no protocol tag left in a spelling only a
    grammar or a defused echo produces. Qwen2.5-Coder-1.5B began its answer with `<observation>`, which the
    grammar let through only as `< observation>`: the CLI printed that line above the answer."""
    made_up = _MADE_UP.search(text)
    if made_up is not None and text[: made_up.start()].strip():
        text = text[: made_up.start()]
    return _DEFUSED_TAG.sub("", text).lstrip("\n").rstrip()
