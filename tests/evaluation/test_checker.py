"""The BFCL checker against BFCL's own questions and possible answers: known-good calls pass, known-bad ones
fail for the reason BFCL's rules give (types, strings, dicts, optional parameters, parallel order)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mylm.evaluation import bfcl
from mylm.evaluation.checker import Call, check, check_call

DATA = Path(__file__).resolve().parent.parent / "data" / "bfcl"


def _first(options: list[Any]) -> Any:
    return next(o for o in options if o != "")


def _pick(value: Any) -> Any:
    """A concrete value from possible answers (nested dict answers hold possible values per key)."""
    if isinstance(value, dict) and all(isinstance(o, list) for o in value.values()):
        return {k: _pick(_first(o)) for k, o in value.items() if any(x != "" for x in o)}
    if isinstance(value, list) and value and all(isinstance(d, dict) for d in value):
        return [_pick(d) for d in value]
    return value


def known_good(question: bfcl.Question) -> list[Call]:
    """The calls a perfect model makes: each expected call with the first possible value of every parameter
    the answer does not mark optional-only (and the doc knows)."""
    calls = []
    for answer in question.answers or ():
        name = next(iter(answer))
        doc = next(f for f in question.functions if f["name"] == name)
        known = doc["parameters"].get("properties", {})
        calls.append(Call(name, {k: _pick(_first(v)) for k, v in answer[name].items()
                                 if any(x != "" for x in v) and k in known}))
    return calls


def _questions(source: bfcl.Source) -> list[bfcl.Question]:
    return [q for c in bfcl.CATEGORIES for q in bfcl.load(source, c)]


def test_every_known_good_call_passes_in_any_order() -> None:
    questions = _questions(bfcl.source_at(DATA))
    assert {q.category for q in questions} == set(bfcl.CATEGORIES)
    for question in questions:
        calls = known_good(question)
        assert check(question.category, question.functions, calls, question.answers).valid, question.id
        if "parallel" in question.category:
            assert check(question.category, question.functions, calls[::-1], question.answers).valid, question.id


def _question(source: bfcl.Source, category: str, qid: str) -> bfcl.Question:
    return next(q for q in bfcl.load(source, category) if q.id == qid)


@pytest.fixture
def data() -> bfcl.Source:
    return bfcl.source_at(DATA)


def test_simple_call_rules(data: bfcl.Source) -> None:
    q = _question(data, "simple_python", "simple_python_0")  # base, height: integer; unit optional ("units", "")
    doc, answer = q.functions[0], q.answers[0]  # type: ignore[index]
    good = {"base": 10, "height": 5}
    assert check_call(doc, Call("calculate_triangle_area", good), answer).valid
    assert check_call(doc, Call("calculate_triangle_area", {**good, "unit": " Units"}), answer).valid
    bad: list[tuple[Mapping[str, Any], str]] = [
        ({"base": 10}, "missing_required"),
        ({**good, "colour": "red"}, "unexpected_param"),
        ({**good, "base": 10.0}, "type"),  # a float where an integer is declared
        ({**good, "base": "10"}, "type"),
        ({**good, "base": True}, "type"),  # bool is not int here
        ({**good, "base": 11}, "value"),
        ({**good, "unit": "cm"}, "value"),
    ]
    for arguments, kind in bad:
        verdict = check_call(doc, Call("calculate_triangle_area", arguments), answer)
        assert (verdict.valid, verdict.kind) == (False, kind), arguments
    assert check_call(doc, Call("triangle_area", good), answer).kind == "wrong_name"
    assert check("simple_python", q.functions, [], q.answers).kind == "wrong_count"
    two = [Call("calculate_triangle_area", good)] * 2
    assert check("simple_python", q.functions, two, q.answers).kind == "wrong_count"


def _find(data: bfcl.Source, category: str, declared: str) -> bfcl.Question:
    for q in bfcl.load(data, category):
        for answer in q.answers or ():
            name = next(iter(answer))
            doc = next(f for f in q.functions if f["name"] == name)
            if any(p.get("type") == declared for p in doc["parameters"]["properties"].values()):
                return q
    raise AssertionError(f"no {declared} parameter in the {category} excerpt")


def _param_of(q: bfcl.Question, declared: str) -> tuple[dict[str, Any], str]:
    answer = q.answers[0]  # type: ignore[index]
    name = next(iter(answer))
    doc = next(f for f in q.functions if f["name"] == name)
    param = next(p for p, s in doc["parameters"]["properties"].items() if s.get("type") == declared and p in answer[name]
                 and any(x != "" for x in answer[name][p]))
    return doc, param


def test_an_int_is_a_float_but_not_the_reverse(data: bfcl.Source) -> None:
    q = _find(data, "simple_python", "float")
    doc, param = _param_of(q, "float")
    good = known_good(q)[0]
    value = good.arguments[param]
    if float(value).is_integer():  # the answer's float written as an int is accepted, as Python would
        as_int = Call(good.name, {**good.arguments, param: int(value)})
        assert check_call(doc, as_int, q.answers[0]).valid  # type: ignore[index]
    as_text = Call(good.name, {**good.arguments, param: str(value)})
    assert check_call(doc, as_text, q.answers[0]).kind == "type"  # type: ignore[index]


def test_strings_are_compared_without_case_spaces_or_punctuation(data: bfcl.Source) -> None:
    q = _question(data, "parallel", "parallel_0")  # spotify.play: artist "Taylor Swift"/"Maroon 5"
    calls = [Call("spotify.play", {"artist": "taylor-swift.", "duration": 20}),
             Call("spotify.play", {"artist": "MAROON_5", "duration": 15})]
    assert check("parallel", q.functions, calls, q.answers).valid
    swapped = [Call("spotify.play", {"artist": "Taylor Swift", "duration": 15}),
               Call("spotify.play", {"artist": "Maroon 5", "duration": 20})]
    verdict = check("parallel", q.functions, swapped, q.answers)
    assert (verdict.valid, verdict.kind) == (False, "no_match")
    assert check("parallel", q.functions, calls[:1], q.answers).kind == "wrong_count"


def test_dicts_and_lists_of_dicts(data: bfcl.Source) -> None:
    q = _question(data, "simple_python", "simple_python_96")  # conditions: a list of dicts
    good = known_good(q)[0]
    doc = q.functions[0]
    assert check_call(doc, good, q.answers[0]).valid  # type: ignore[index]
    conditions = copy.deepcopy(good.arguments["conditions"])
    conditions[0]["field"] = "height"
    assert not check_call(doc, Call(good.name, {**good.arguments, "conditions": conditions}), q.answers[0]).valid  # type: ignore[index]
    assert not check_call(doc, Call(good.name, {**good.arguments, "conditions": conditions[:1]}),
                          q.answers[0]).valid  # type: ignore[index]
    dict_q = _find(data, "simple_python", "dict")
    doc, param = _param_of(dict_q, "dict")
    good = known_good(dict_q)[0]
    extra_key = {**good.arguments[param], "unexpected": 1}
    assert check_call(doc, good, dict_q.answers[0]).valid  # type: ignore[index]
    assert check_call(doc, Call(good.name, {**good.arguments, param: extra_key}), dict_q.answers[0]).kind == "value"  # type: ignore[index]


def test_tuples_arrive_as_lists_and_items_are_type_checked(data: bfcl.Source) -> None:
    q = _find(data, "simple_python", "tuple")
    doc, param = _param_of(q, "tuple")
    good = known_good(q)[0]
    assert isinstance(good.arguments[param], list)
    assert check_call(doc, good, q.answers[0]).valid  # type: ignore[index]
    wrong_items = [str(v) if not isinstance(v, str) else 0 for v in good.arguments[param]]
    assert not check_call(doc, Call(good.name, {**good.arguments, param: wrong_items}), q.answers[0]).valid  # type: ignore[index]


def test_parallel_calls_match_in_any_order_and_each_call_counts_once(data: bfcl.Source) -> None:
    q = _question(data, "parallel", "parallel_178")
    calls = known_good(q)
    assert len(calls) == 4
    for order in (calls, calls[::-1], calls[1:] + calls[:1]):
        assert check("parallel", q.functions, order, q.answers).valid
    # The same call twice cannot stand for two expected calls.
    assert not check("parallel", q.functions, [calls[0], calls[0], calls[2], calls[3]], q.answers).valid


def test_irrelevance_passes_only_without_a_call(data: bfcl.Source) -> None:
    for category in ("irrelevance", "live_irrelevance"):
        q = bfcl.load(data, category, limit=1)[0]
        assert q.answers is None
        assert check(category, q.functions, [], None).valid
        called = check(category, q.functions, [Call(q.functions[0]["name"], {})], None)
        assert (called.valid, called.kind) == (False, "called")


def test_multiple_expects_one_call_of_the_right_function(data: bfcl.Source) -> None:
    q = bfcl.load(data, "multiple", limit=1)[0]
    good = known_good(q)
    assert check("multiple", q.functions, good, q.answers).valid
    other = next(f["name"] for f in q.functions if f["name"] != good[0].name)
    assert check("multiple", q.functions, [Call(other, good[0].arguments)], q.answers).kind == "wrong_name"
    assert check("multiple", q.functions, good * 2, q.answers).kind == "wrong_count"


def test_the_whole_bfcl_data_where_it_is_installed_or_fetched() -> None:
    """Every possible answer of every category, where the full data can be found (the excerpt above runs
    everywhere). Five questions of BFCL v4 cannot be answered under BFCL's own rules (an answer that leaves out
    a required parameter, or expects one the doc lacks); they fail here too."""
    try:
        source = bfcl.locate(None)
    except Exception:  # noqa: BLE001 - not installed and not fetched on this machine
        wheel = sorted(Path("/tmp/modeldl/bfcl").glob("bfcl_eval-*.whl"))
        if not wheel:
            pytest.skip("no BFCL data on this machine (mylm eval --fetch-bfcl)")
        source = bfcl.source_at(wheel[-1])
    failed = []
    count = 0
    for question in _questions(source):
        if question.answers is None:
            continue
        count += 1
        if not check(question.category, question.functions, known_good(question), question.answers).valid:
            failed.append(question.id)
    assert count > 2000
    assert len(failed) <= 5, failed
