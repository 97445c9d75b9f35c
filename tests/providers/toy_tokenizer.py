"""A toy tokenizer with llama.cpp's rules, for the loopback llama.cpp servers' `/tokenize` and prompt arrays.

Control tokens are single ids below 100 when special tokens are parsed and spelled out one id per character
when they are not, so a test can tell which one a prompt carries. `server_tokens` reads a `/completion`
prompt exactly as llama-server does (strings with special tokens parsed, ids as given, a BOS only when the first
element is a string, and an array without ids being several prompts).
"""

from __future__ import annotations

import re
from typing import Any

#: Control tokens of several families (ChatML, Llama 3, Mistral, Gemma, Qwen), each one id when parsed; the
#: last two (Code Llama's `<EOT>`, `<eod>`) have no shape mylm's defusing knows.
SPECIALS = (
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "[INST]", "[/INST]", "<start_of_turn>", "<end_of_turn>",
    "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|begin_of_text|>", "<s>", "</s>",
    "<EOT>", "<eod>",
)
BOS = 1
_IDS = {token: 10 + i for i, token in enumerate(SPECIALS)}
_TOKENS = {i: token for token, i in _IDS.items()}
_SPECIAL = re.compile("|".join(re.escape(t) for t in sorted(SPECIALS, key=len, reverse=True)))
#: Plain text: one id per character, far above the control ids.
_TEXT = 1000


def tokenize(text: str, *, parse_special: bool = True, add_special: bool = False) -> list[int]:
    """`text` as ids, as llama.cpp's `common_tokenize` would (with this toy vocabulary)."""
    ids = [BOS] if add_special else []
    at = 0
    for match in _SPECIAL.finditer(text) if parse_special else ():
        ids += [_TEXT + ord(c) for c in text[at : match.start()]]
        ids.append(_IDS[match.group()])
        at = match.end()
    return ids + [_TEXT + ord(c) for c in text[at:]]


def detokenize(ids: list[int]) -> str:
    """The text the ids stand for (control tokens spelled as they read)."""
    return "".join(_TOKENS.get(i, "") if i < _TEXT else chr(i - _TEXT) for i in ids)


def control_tokens(ids: list[int]) -> list[str]:
    """The control tokens among `ids`, in order."""
    return [_TOKENS[i] for i in ids if i in _TOKENS]


def server_tokens(prompt: Any) -> list[int]:
    """A `/completion` prompt (string or flat mixed array) as llama-server tokenizes it; ValueError for a shape
    it would read as something else (several prompts) or reject."""
    if isinstance(prompt, str):
        return tokenize(prompt, add_special=True)
    if not isinstance(prompt, list) or not any(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        raise ValueError("not one prompt: a string, or an array of strings and token ids")
    ids: list[int] = []
    for k, piece in enumerate(prompt):
        if isinstance(piece, str):
            ids += tokenize(piece, add_special=k == 0)
        elif isinstance(piece, int) and not isinstance(piece, bool) and 0 <= piece < _TEXT + 0x110000:
            ids.append(piece)
        else:
            raise ValueError(f"invalid token id {piece!r}")
    return ids


def tokenize_answer(body: Any) -> tuple[int, Any]:
    """llama-server's `POST /tokenize`: `content`, `add_special` (default false), `parse_special` (default
    true); the answer is `{"tokens": [...]}`."""
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        return 400, {"error": {"code": 400, "message": "\"content\" must be provided", "type": "invalid_request_error"}}
    ids = tokenize(body["content"], parse_special=bool(body.get("parse_special", True)),
                   add_special=bool(body.get("add_special", False)))
    return 200, {"tokens": ids}
