"""The repetition guard on its own: degenerate tails trip it, whatever the chunking; legit output does not."""

from __future__ import annotations

import base64
import hashlib

import pytest

from mylm.protocol.repetition import (
    COUNTED_LINES, EXACT_LINES, INLINE_STEP, TINY_CHARS, WORDS_CHARS, Repetition, RepetitionGuard,
)


def scan(text: str, chunk: int = 3) -> tuple[Repetition | None, int]:
    """Feed `text` in chunks of `chunk` characters: what was found, and how many characters it took."""
    guard = RepetitionGuard()
    for start in range(0, len(text), chunk):
        found = guard.feed(text[start:start + chunk])
        if found is not None:
            return found, start + chunk
    return None, len(text)


def test_the_same_line_over_and_over_trips_after_the_exact_limit() -> None:
    text = "Here is the answer:\n" + "I will now check the file.\n" * 500
    found, read = scan(text)
    assert found is not None and found.period == 1 and not found.counted
    assert found.lines == EXACT_LINES and found.line == "I will now check the file."
    assert read < len(text) // 8  # stopped long before the end
    assert "repeated the line 'I will now check the file.' unchanged for 48 lines" in found.describe()


def test_lines_that_differ_only_in_a_counter_trip_the_counted_limit() -> None:
    # The Gemma 3 270M loop under the answer grammar, without the `<` the grammar now forbids.
    text = "".join(f"#{n}\n" for n in range(15, 2000))
    found, read = scan(text, chunk=2)
    assert found is not None and found.counted and found.period == 1
    assert found.lines == COUNTED_LINES
    assert read < len(text) // 10
    assert "numbers counting up" in found.describe()


def test_several_counters_and_a_countdown_also_count() -> None:
    up = "".join(f"Step {n}: item {n} of the list\n" for n in range(300))
    down = "".join(f"T-minus {n}\n" for n in range(300, 0, -1))
    assert scan(up)[0] is not None
    assert scan(down)[0] is not None


@pytest.mark.parametrize("period", [2, 3, 7, 16])
def test_a_short_block_repeated_trips(period: int) -> None:
    block = "".join(f"line {chr(97 + i)} of the loop\n" for i in range(period))
    found, _ = scan("Intro\n" + block * 60, chunk=5)
    assert found is not None and found.period == period and not found.counted


def test_whole_text_in_one_chunk_and_crlf_and_trailing_spaces() -> None:
    assert scan("ok  \r\n" * 100, chunk=10_000)[0] is not None
    assert scan("\n" * 200, chunk=1)[0] is not None  # blank lines forever


def test_a_forty_row_numbered_list_does_not_trip() -> None:
    fruits = ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape", "honeydew"]
    text = "".join(f"{n}. {fruits[n % 8]} ({n * 3} g)\n" for n in range(1, 41))
    assert scan(text)[0] is None
    # Items that are all alike but for their number: still a list, 40 rows is far from the counted limit.
    assert scan("".join(f"{n}. TODO\n" for n in range(1, 41)))[0] is None


def test_a_table_does_not_trip() -> None:
    rows = "".join(f"| {n} | {n * n} | {n * 7 % 13} | pending |\n" for n in range(1, 201))
    assert scan("| n | square | mod | state |\n|---|---|---|---|\n" + rows)[0] is None
    # Rows that differ only by an id stepping by one: a table, under the counted limit.
    assert scan("".join(f"| {n} | pending | - |\n" for n in range(1, 41)))[0] is None


def test_code_with_closing_braces_and_repeated_lines_does_not_trip() -> None:
    names = ["parse", "render", "load", "save", "check", "merge", "split", "count", "apply", "close"]
    code = []
    for i, name in enumerate(names * 3):
        code.append(f"function {name}{i}(x) {{\n  if (x > {i}) {{\n    while (x) {{\n      x -= {i + 1};\n"
                    f"    }}\n  }}\n  return {name}(x);\n}}\n\n")
    text = "".join(code) + "}\n" * 12 + "    pass\n" * 10 + "\n" * 20
    assert scan(text)[0] is None


def test_a_listing_of_numbers_well_under_the_counted_limit_does_not_trip() -> None:
    assert scan("".join(f"{n}\n" for n in range(1, 101)))[0] is None


def test_the_guard_stays_tripped_and_ignores_later_text() -> None:
    guard = RepetitionGuard(exact_lines=4)
    assert guard.feed("a\na\na\n") is None
    found = guard.feed("a\n")
    assert found is not None and found.lines == 4
    assert guard.feed("something else\n") is found


def test_a_line_without_newline_is_not_judged_until_it_ends() -> None:
    guard = RepetitionGuard(exact_lines=4)
    for _ in range(3):
        guard.feed("x\n")
    assert guard.feed("x") is None  # the fourth line may still go on
    assert guard.feed("yz\n") is None


# ------------------------------------------------------------------------------------ inside one line


@pytest.mark.parametrize("unit", ["Python 3.11.2 ", "a", "ab", "I will check the file again. ",
                                  "<tool_code> " * 3, "x" * 100 + " "])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_a_unit_repeated_inside_one_line_trips(unit: str, chunk: int) -> None:
    text = "The version is: " + unit * (20_000 // len(unit))
    found, read = scan(text, chunk=chunk)
    assert found is not None and found.inline and not found.counted
    assert found.period == len(unit) or len(unit) % found.period == 0  # "ab" repeated is also "abab" repeated
    assert found.line * (len(unit) // found.period) == unit or found.line in unit * 2
    if chunk < 4096:
        assert read < 2048  # stopped a kilobyte or so in, not at the token limit
    assert "in one line" in found.describe()


def test_a_unit_whose_probe_recurs_inside_it_is_still_found() -> None:
    # The unit's last 16 characters also occur earlier in the unit: the nearest occurrence is not the period.
    unit = "0123456789abcdef-0123456789abcdef+"
    found, _ = scan("start " + unit * 200, chunk=11)
    assert found is not None and found.inline and found.period == len(unit)


def test_repetition_inside_a_line_after_normal_lines_trips_and_counts_from_its_start() -> None:
    text = "First a plan.\nThen:\n" + "ok " * 1000
    found, _ = scan(text, chunk=5)
    assert found is not None and found.inline
    assert found.line in ("ok ", "k o", " ok")
    assert found.lines >= TINY_CHARS // 3  # every copy read so far, back to where the repetition began


@pytest.mark.parametrize("line", [
    # a long paragraph, minified code, a long JSON argument, base64: long lines without one repeated unit
    " ".join(f"word{n % 37}x{n % 11}" for n in range(600)),
    ";".join(f"function f{n}(a){{return a*{n}+{n % 7}}}" for n in range(120)),
    '{"path": "a.txt", "content": "' + "".join(f"line {n}\\n" for n in range(400)) + '"}',
    base64.b64encode(hashlib.sha512(b"seed").digest() * 1 + b"".join(
        hashlib.sha256(str(n).encode()).digest() for n in range(120))).decode(),
])
def test_long_lines_without_a_repeated_unit_do_not_trip(line: str) -> None:
    assert scan(line, chunk=9)[0] is None


def test_a_separator_shorter_than_the_limit_does_not_trip() -> None:
    assert scan("Title\n" + "=" * 900 + "\nBody text.\n" + "-" * 1000 + "\n", chunk=13)[0] is None


# ------------------------------------------------------------------ degenerate runaways cut early (issue 27)


@pytest.mark.parametrize("text", [
    # Qwen2.5-Coder-0.5B's bare answer under no grammar (issue 27 item 1 and 3): a number that keeps growing
    "The total is 2000" + "0" * 4000,
    "<final_answer>2000" + "0" * 4000,
    # and a decimal that never ends
    "The ratio is 0" + ".5" * 3000,
    "Answer: 1" + "11" * 2000,
    "ha" * 3000,
])
@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_a_tiny_unit_running_away_is_cut_within_a_few_hundred_characters(text: str, chunk: int) -> None:
    found, read = scan(text, chunk=chunk)
    assert found is not None and found.inline and found.period <= 4
    assert read <= TINY_CHARS + 128 + 64  # the limit, the probe's reach and one step: not a kilobyte


def test_a_sentence_said_again_and_again_in_one_line_is_cut_before_a_kilobyte() -> None:
    text = "Sure. " + "I will read the file to find the answer. " * 100
    found, read = scan(text, chunk=4)
    assert found is not None and found.inline and found.line.strip() in text
    assert read <= WORDS_CHARS + 128 + 64


@pytest.mark.parametrize("line", [
    "The empty hash is 0x" + "0" * 64 + " (sha256 of nothing is not that, though).",
    "2**1000 = " + str(2**1000),
    "100! = " + str(__import__("math").factorial(100)),
    "0.1 + 0.2 = 0.30000000000000004, and 1/3 = 0.3333333333333333",
    "pi = 3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706798214",
    "Laughing: hahahahahaha, then " + "na " * 12 + "batman!",
    "| " + " | ".join("---" for _ in range(40)) + " |",
    "x = [" + ", ".join(str(n % 10) for n in range(300)) + "]",
    "=" * 900,
    "-" * 1000,
    "*" * 300 + " " + "_" * 300 + " " + "-+" * 200,
    "zeros: [" + ", ".join("0" for _ in range(20)) + "]",
])
def test_long_sane_lines_with_runs_of_one_character_do_not_trip(line: str) -> None:
    assert scan(line + "\nDone.\n", chunk=7)[0] is None


# Qwen2.5-Coder-1.5B's answers at the step limit (llama-server, temperature 0, the agent-task suite): one paragraph
# said again and again with no newline until max_tokens, 100 s of a 2-core CPU each.
PARAGRAPH_LOOPS = [
    ("The bug in `stats.py` was that the `total` function was not correctly implemented. ",
     "The bug was fixed by replacing the `total` function with a correct implementation that returns the sum of all "
     "elements in the list. The test now passes. The remaining task is to ensure that the `total` function is "
     "correctly implemented in the `stats.py` file. "),
    ("The port set for the database in config.json is 5434. The file has been updated with the new port number. ",
     "The task is now complete. No more tools will be run. The remaining steps are to verify that the port is "
     "indeed 5434 and to ensure that the database is running on that port. "),
]


@pytest.mark.parametrize(("opening", "paragraph"), PARAGRAPH_LOOPS)
@pytest.mark.parametrize("chunk", [3, 16])
def test_a_paragraph_said_again_and_again_is_cut_at_its_third_copy(opening: str, paragraph: str, chunk: int) -> None:
    found, read = scan(opening + paragraph * 40, chunk=chunk)
    assert found is not None and found.inline
    assert read <= len(opening) + 3 * len(paragraph) + INLINE_STEP + chunk


@pytest.mark.parametrize(("opening", "paragraph"), PARAGRAPH_LOOPS)
def test_the_first_copy_of_a_paragraph_loop_is_what_the_model_meant(opening: str, paragraph: str) -> None:
    text = opening + paragraph * 40
    found, read = scan(text, chunk=5)
    assert found is not None
    kept = found.first_copy(text[:read])
    assert kept.startswith(opening.strip()) and kept.endswith(".")
    assert opening.strip() in kept and len(kept) <= len(opening) + len(paragraph)
    assert paragraph.strip() not in kept[len(opening) + 1:] or kept.count(paragraph.strip()) == 1


def test_a_block_of_long_lines_said_three_times_is_cut_and_its_first_copy_kept() -> None:
    block = ("Line one of a paragraph that is long enough to matter here, with more words to say and say.\n"
             "And a second line with other words in it, making the block long enough for the rule.\nThird line.\n")
    text = "Intro line.\n" + block * 10
    found, read = scan(text, chunk=7)
    assert found is not None and not found.inline and found.period == 3
    assert read <= len("Intro line.\n") + 3 * len(block) + 7
    assert found.first_copy(text[:read]) == "Intro line.\n" + block.rstrip("\n")


@pytest.mark.parametrize("text", [
    # a short line recurring (a closing brace, a table's rule) is not a paragraph
    "".join(f"def f{i}():\n    pass\n\n" for i in range(30)),
    "| a | b |\n|---|---|\n" + "| x | y |\n" * 20,
    # a paragraph quoted twice is not a loop
    "As the file says:\n" + PARAGRAPH_LOOPS[0][1] * 2 + "\nThat is all.",
])
def test_short_recurring_lines_and_a_paragraph_said_twice_are_not_cut(text: str) -> None:
    found, _ = scan(text, chunk=5)
    assert found is None
