"""The repetition guard on its own: degenerate tails trip it, whatever the chunking; legit output does not."""

from __future__ import annotations

import pytest

from mylm.protocol.repetition import COUNTED_LINES, EXACT_LINES, Repetition, RepetitionGuard


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
