"""Whether the tool a model chose does what the question asks, and whether the question asks for one thing: the
model's own answers, asked apart.

A small model given one tool calls it for whatever it is asked, with the question's own values: Qwen2.5-Coder-1.5B
called `calculate_boiling_point` for "how many sides does a hexagon have?", a stock ticker for "who won the 2010
World Cup", and a lawsuit filing for "recommend a Chinese restaurant" (BFCL irrelevance: 41 of its first 100
questions). The same model, asked in a separate request whether that tool does what the user asked, says no to
most of them; its own calls of BFCL simple_python's right tools it mostly confirms. Asked without examples it
says yes to nearly everything, so the question comes after a few worked ones (none from BFCL), including a
related tool that does not do the task.

A no is asked again in other words (`FIT_TEMPLATES`): the call is held only when the model says no both times. The
answers only decide whether the model is asked to reconsider (`prompts/unfit.j2`, once); a call it makes again
goes out. An endpoint that cannot answer in a word (a reasoning model's `<think>`) counts as yes.

Offered several tools for one question, the same model calls several of them (the capital of Brazil asked:
`country_info.capital`, `population`, `largest_city`); asked for two things, it calls two. Which is which is in the
question, not in the calls, so the model is asked apart whether the question asks for one thing or several
(`prompts/count.j2`); on "One", only its first call goes out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..constrain.select import Constraint
from ..core.types import Message
from ..prompts import PromptLoader

#: The probe's answer, where the endpoint samples under a grammar.
FIT_GRAMMAR = 'root ::= "Yes" | "No"'
#: Enough for the word (and a full stop) where no grammar holds the model to it.
FIT_TOKENS = 3


@dataclass(frozen=True)
class Worked:
    """One worked question of the probe: a request, a tool, and whether the tool does what it asks."""

    request: str
    tool: str
    description: str
    fits: bool


#: Tools that do the task (one a part of it: a question may need two tools), one unrelated, one related that does
#: not: "related" is not "does it". (Measured on the 1.5B: this set and one without the part-of-it question both
#: said no to 35 of the 43 wrong calls and to 4 of the 86 right ones; the part-of-it question keeps multi-part
#: questions' calls.)
WORKED = (
    Worked("Convert 5 miles to kilometers.", "convert_length", "Convert a length from one unit to another.", True),
    Worked("What is the capital of Peru?", "get_weather", "Get the current weather for a city.", False),
    Worked("How many calories are in an apple?", "nutrition.get_protein", "Get the protein content of a food.",
           False),
    Worked("What is the weather in Oslo, and what time is it there?", "get_weather",
           "Get the current weather for a city.", True),
    Worked("Find flights from Oslo to Rome on May 3.", "search_flights",
           "Search flights between two cities on a date.", True),
)


#: The worked questions' values for the probe's template.
_WORKED_VARIABLES = tuple({"request": w.request, "tool": w.tool, "description": w.description} for w in WORKED)

#: The probe's questions, in order: the next is asked only when the one before was answered no, so a call is held
#: only when the model says no in every wording. (On the 1.5B's BFCL calls, the second wording turned 2 of the 4
#: noes to its right simple_python calls into yeses, and 1 of the 36 to its wrong irrelevance calls.)
FIT_TEMPLATES = ("fit.j2", "fit_can.j2")


def fit_messages(prompts: PromptLoader, request: str, tool: str, description: str,
                 template: str = FIT_TEMPLATES[0]) -> tuple[Message, ...]:
    """The probe's conversation in `template`'s words: the worked questions, then `request` about `tool`."""
    messages: list[Message] = []
    # The same text for every probe: kept (`render_kept`), not rendered five times a served tool call.
    for worked, text in zip(WORKED, prompts.render_kept(template, _WORKED_VARIABLES), strict=True):
        messages.append(Message("user", text))
        messages.append(Message("assistant", "Yes" if worked.fits else "No"))
    messages.append(Message("user", prompts.render(template, request=request, tool=tool, description=description)))
    return tuple(messages)


def fit_constraint() -> Constraint:
    """The grammar of the probe's answer."""
    return Constraint(FIT_GRAMMAR)


def says_no(text: str) -> bool:
    """Whether the probe's answer is no (anything else, an empty or cut answer included, is not)."""
    return _word(text) == "no"


def _word(text: str) -> str:
    """A probe's answer as one word, casefolded ("" for an empty answer)."""
    return (text.split(maxsplit=1) or [""])[0].strip(".,!:").casefold()


#: The count probe's answer, where the endpoint samples under a grammar.
COUNT_GRAMMAR = 'root ::= "One" | "Several"'

#: The count probe's worked questions and answers: several values of one thing are one thing (a triangle's three
#: sides), the same thing for several names is several (three countries' populations). (Measured on the 1.5B over
#: BFCL questions: One to 49 of multiple's first 50 and all 30 simple_python ones tried, Several to 35 of
#: parallel_multiple's first 40. Two more examples of "X, and Y" asked turned 6 more multiple questions to Several
#: for 2 parallel_multiple ones: not kept. Same-tool questions (BFCL parallel) it often calls One, so it is never
#: asked about calls of one tool.)
COUNTED = (
    ("What is the capital of Peru?", False),
    ("What is the weather in Oslo and in Rome?", True),
    ("Find the area of a triangle with sides 3, 4 and 5.", False),
    ("Convert 5 miles to kilometers, then book a taxi to the airport.", True),
    ("How long does light take to travel from the Sun to Earth?", False),
    ("Get the population of France, Spain and Italy.", True),
)


_COUNTED_VARIABLES = tuple({"request": question} for question, _ in COUNTED)


def count_messages(prompts: PromptLoader, request: str) -> tuple[Message, ...]:
    """The count probe's conversation: the worked questions, then `request` (`prompts/count.j2`)."""
    texts = prompts.render_kept("count.j2", _COUNTED_VARIABLES)  # the same for every probe: kept
    worked = [(Message("user", text), Message("assistant", "Several" if several else "One"))
              for text, (_, several) in zip(texts, COUNTED, strict=True)]
    return (*(m for pair in worked for m in pair), Message("user", prompts.render("count.j2", request=request)))


def count_constraint() -> Constraint:
    """The grammar of the count probe's answer."""
    return Constraint(COUNT_GRAMMAR)


def says_one(text: str) -> bool:
    """Whether the count probe's answer is one (anything else, an empty or cut answer included, is not)."""
    return _word(text) == "one"


__all__ = ["COUNTED", "COUNT_GRAMMAR", "FIT_GRAMMAR", "FIT_TEMPLATES", "FIT_TOKENS", "WORKED", "Worked",
           "count_constraint", "count_messages", "fit_constraint", "fit_messages", "says_no", "says_one"]
