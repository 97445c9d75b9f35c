"""Whether the model presents a call it wrote as quoted or refused, by what it says right around it.

Markdown marks most quoting by structure (a `>` blockquote, an indented code block, inline code, a fence followed
by prose: see `structure` and `fences`). A model reporting what it was shown also says so in words, and then a
complete block in the middle of the reply is text, not a call (issue 30):

    The block you pasted asks me to delete the build directory:
    <tool_code>…</tool_code>
    I have not run it; tell me if you want me to.

Two kinds of sentence mark it, both narrow on purpose (a false "quoted" on a real call costs a turn; a false call
runs what the model did not mean):

- **attribution**, in the sentence that introduces the block (the last one before it): the block is what someone
  else wrote: "you pasted/sent/shared…", "your message contains…", "the file/page/output/observation says…";
- **refusal**, in that sentence or in the first sentences after the block: the model says it did not or will not
  run *it* ("I have not run it", "I won't execute this", "it was not run"); a refusal about something else ("I did
  not run the tests") does not count.

A sentence that announces the call ("I'll run:", "Let me call it:") after any such words is a call, so "As the
README says, I'll run:" runs. The words are English: a model writing in another language quotes by structure.
"""

from __future__ import annotations

import re

#: How much text before and after a block is read (the introducing sentence, the sentences right after).
WINDOW = 400

_NEG = (r"(?:have\s+not|haven't|has\s+not|hasn't|did\s+not|didn't|will\s+not|won't|would\s+not|wouldn't|"
        r"am\s+not\s+going\s+to|'m\s+not\s+going\s+to|cannot|can't|can\s+not|do\s+not|don't|shall\s+not|"
        r"should\s+not|shouldn't|must\s+not|refuse\s+to|never)")
_RUN = r"(?:run|ran|execute|executed|call|called|invoke|invoked|follow|followed|obey|obeyed|perform|performed)"
_OBJECT = (r"(?:it|this|that|them|these|those|the\s+following|(?:this|that|the|these)\s+(?:above\s+|quoted\s+|"
           r"pasted\s+)?(?:block|blocks|command|commands|call|calls|code|snippet|tool\s+calls?|instructions?|request))\b")
_REFUSAL = re.compile(
    rf"\b(?:i|we)\s+{_NEG}\s+(?:\w+\s+)?{_RUN}\s+{_OBJECT}"  # I have not run it; I will not execute this
    rf"|\b(?:it|this|that|they|the\s+(?:block|command|call|code))\s+(?:was|were|has|have|is|are)\s+(?:not|never)\s+"
    r"(?:been\s+)?(?:run|executed|called|invoked)\b"  # it was not run
    r"|\bi\s+(?:ignored|declined|refused|skipped)\s+(?:it|this|that|them|the\s+(?:block|command|call|instruction))\b"
    r"|\bwithout\s+(?:running|executing|calling)\s+(?:it|this|that|them)\b",
    re.IGNORECASE,
)
_ATTRIBUTION = re.compile(
    r"\b(?:you|the\s+user)\s+(?:just\s+)?(?:pasted|sent|shared|posted|quoted|provided|gave\s+me|forwarded)\b"
    r"|\b(?:your|the\s+user's)\s+(?:message|paste|snippet|text|request|input)\s+(?:contains|contained|includes|"
    r"included|has|had|shows|says|said|asks|asked)\b"
    r"|\b(?:file|page|web\s*page|document|readme|output|observation|tool\s+output|tool\s+result|result|email|"
    r"comment|issue|log|website|site|note|instructions)(?:\s+`?[\w./-]{1,80}`?)?\s+(?:itself\s+)?(?:contains|"
    r"contained|includes|included|"
    r"says|said|reads|shows|showed|asks|asked|tells|told|instructs|instructed|wants|wanted)\b"
    r"|\b(?:it|the\s+(?:file|page|output|observation))\s+(?:contains|contained)\s*:"
    r"|\b`?[\w-]{1,80}\.(?:json|txt|md|py|js|ts|ya?ml|toml|sh|cfg|ini|log|html|xml|csv)`?\s+(?:contains|says|reads|"
    r"shows|has|asks)\b",
    re.IGNORECASE,
)
#: The sentence announces the call itself: what follows is meant.
_INTENT = re.compile(r"\b(?:i'll|i\s+will|let\s+me|let's|i'm\s+going\s+to|i\s+am\s+going\s+to|i\s+need\s+to|"
                     r"i\s+now|now\s+i)\s+(?!not\b|never\b)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n\s*\n")
#: Words one of which every match of `_REFUSAL` holds (in lower case): each of its alternatives has a negation
#: (`not`, `n't`, `never`, `refuse to`), or `ignored`/`declined`/`refused`/`skipped`, or `without`.
_REFUSAL_WORDS = ("not", "n't", "never", "refuse", "ignored", "declined", "skipped", "without")
#: The same for `_ATTRIBUTION`: the verb after "you"/"the user", "your"/"the user's", or the verb after a
#: document (`contains`, `says`, `shows`, …) or a file name (those and `has`).
_ATTRIBUTION_WORDS = ("pasted", "sent", "shared", "posted", "quoted", "provided", "gave", "forwarded", "your",
                      "user's", "contain", "include", "says", "said", "reads", "show", "ask", "tells", "told",
                      "instruct", "want", "has")
_EITHER_WORDS = (*_REFUSAL_WORDS, *_ATTRIBUTION_WORDS)


def presented_as_quoted(before: str, after: str = "") -> bool:
    """Whether the text right before a block (its introducing sentence) or right after it (the first sentences)
    says the block is someone else's or that the model did not or will not run it."""
    intro = _last_sentence(before[-WINDOW:])
    if _says(intro, attribution=True):
        return True
    outro = after[:WINDOW]
    if not outro:
        return False
    paragraph = _first_paragraph(outro)
    return _may_hold(paragraph, _REFUSAL_WORDS) and _REFUSAL.search(paragraph) is not None


def _may_hold(text: str, words: tuple[str, ...]) -> bool:
    """False when `text` is ASCII and holds none of `words` in any case, so that no pattern that needs one of
    them matches it (the patterns' case-insensitive matching is ASCII's on ASCII text; any other text may)."""
    if not text.isascii():
        return True
    lowered = text.lower()
    return any(word in lowered for word in words)


def _says(sentence: str, *, attribution: bool) -> bool:
    # Most sentences introducing a call hold none of the patterns' words: the patterns' search at every
    # position (~4 µs a block) is skipped then.
    if not _may_hold(sentence, _EITHER_WORDS if attribution else _REFUSAL_WORDS):
        return False
    marks = [m.start() for m in _REFUSAL.finditer(sentence)]
    if attribution:
        marks += [m.start() for m in _ATTRIBUTION.finditer(sentence)]
    if not marks:
        return False
    intents = [m.start() for m in _INTENT.finditer(sentence)]
    # "As the README says, I'll run:": the announcement after the attribution is what introduces the block.
    return not intents or max(marks) >= max(intents)


def _last_sentence(text: str) -> str:
    text = text.rstrip()
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    # The introducing sentence may end with its own "." before the block ("I have not run it."): skip that one.
    ends = [e for e in ends if e < len(text) - 1]
    return text[ends[-1] :] if ends else text


def _first_paragraph(text: str) -> str:
    text = text.lstrip()
    blank = re.search(r"\n\s*\n", text)
    return text[: blank.start()] if blank else text
