"""The engine's contract with a lesson: typed records, a Summary, checks that say what they compare (what every
registered lab must do is tests/test_lab_contract.py)."""

from __future__ import annotations

import importlib
import math
from typing import TypedDict

import pytest
import torch
from conftest import assert_only_these_fail

import labs
from labs.context import Described, RankContext
from labs.errors import LabConfigError
from labs.params import Choice, Int
from labs.registry import Case, Lab
from labs.result import (
    Summary,
    check_at_least,
    check_at_most,
    check_close,
    check_equal,
    check_true,
    largest,
    not_applicable,
)


def test_check_kinds_compare_what_they_say():
    assert check_close("c", 1.05, 1.0, 0.1, "d").ok and not check_close("c", 1.2, 1.0, 0.1, "d").ok
    assert check_equal("e", [1, 2], [1, 2], "d").ok and not check_equal("e", [1], [1, 2], "d").ok
    assert check_at_most("m", 3, 3, "d").ok and not check_at_most("m", 3.01, 3, "d").ok
    assert check_at_least("l", 3, 3, "d").ok and not check_at_least("l", 2.99, 3, "d").ok
    assert check_true("t", True, 5, "d").ok and not check_true("t", False, 5, "d").ok
    assert [c.criterion() for c in (check_close("c", 1, 1, 0.5, "d"), check_close("c", 0, 0, 0, "d"),
                                    check_at_most("m", 1, 2, "d"), check_at_least("l", 3, 2, "d"))] == \
        ["|값 − 1| ≤ 0.5", "= 0 (정확히)", "≤ 2", "≥ 2"]


@pytest.mark.parametrize("missing", [None, math.nan])
def test_a_check_without_its_measurement_fails(missing):
    made = [check_close("c", missing, 0.0, 1.0, "d"), check_at_most("m", missing, 1.0, "d"),
            check_at_least("l", missing, 0.0, "d"), check_equal("e", missing, missing, "d"),
            check_true("t", True, missing, "d"), check_true("t", None, 1, "d")]
    assert not any(c.ok for c in made)


def test_largest_keeps_a_nan_that_max_skips():
    assert max([0.0, math.nan]) == 0.0  # 파이썬의 max는 처음 만난 값을 쥐고 있어 NaN을 건너뛴다
    assert math.isnan(largest([0.0, math.nan])) and math.isnan(largest([math.nan, 0.0]))
    assert largest([1, 3, 2]) == 3 and largest(x for x in (0.5, 0.25)) == 0.5


# Issue 39: a NaN in the last rank's record passed the claims that take the largest value over the ranks.
NAN_ON_LAST_RANK = [("equivalence", 2, "matches_single_process", lambda r: r["param_diff"].__setitem__(-1, math.nan)),
                    ("faults", 2, "all_reduce_sum", lambda r: r.__setitem__("sum", math.nan))]


@pytest.mark.real_ranks
@pytest.mark.parametrize("lab_name, nproc, check, poison", NAN_ON_LAST_RANK, ids=[c[0] for c in NAN_ON_LAST_RANK])
def test_a_nan_on_one_rank_fails_the_claim(lab_name, nproc, check, poison):
    result = labs.run(lab_name, nproc=nproc).assert_ok()
    lab_module = importlib.import_module(f"labs.lessons.{lab_name}")
    assert_only_these_fail(lab_module, result, lambda ranks: poison(ranks[-1]), {check})


def test_not_applicable_is_reported_but_never_fails():
    na = not_applicable("grows_with_size", "크기가 하나뿐이라 비교할 수 없다")
    result = labs.LabResult("x", 2, "gloo", [], {}, {"grows_with_size": na,
                                                     "real": check_at_least("real", 1, 0, "d")})
    assert result.ok and not na.applicable
    text = result.report()
    assert "[해당 없음] grows_with_size" in text and "확인 1개 중 1개 통과, 해당 없음 1개" in text
    assert result.to_dict()["checks"]["grows_with_size"]["applicable"] is False


def test_a_result_without_checks_is_not_ok():
    empty = labs.LabResult("x", 2, "gloo", [], {}, {})
    assert not empty.ok
    with pytest.raises(labs.LabCheckFailed):
        empty.assert_ok()


class ToyRecord(TypedDict):
    v: int


class ToyData(TypedDict):
    total: int


def _lab(summarize, rank_fn=lambda ctx: {"v": 1}, **kw) -> Lab:
    return Lab(name="toy", description="장난감", rank_fn=rank_fn, summarize=summarize, **kw)


def test_the_engine_builds_the_result_and_checks_declared_keys():
    lab = _lab(lambda ranks, backend, params: Summary({"total": sum(r["v"] for r in ranks)},
                                                      [check_equal("sum", sum(r["v"] for r in ranks), 2, "d")]),
               record=ToyRecord, data=ToyData)
    assert (lab.record_keys, lab.data_keys) == ({"v"}, {"total"})
    result = lab.finish([{"v": 1}, {"v": 1}], "gloo", {})
    assert (result.lab, result.world_size, result.backend, result.data, result.ok) == ("toy", 2, "gloo", {"total": 2}, True)

    renamed = _lab(lambda ranks, backend, params: Summary({"totl": 2}, [check_equal("sum", 2, 2, "d")]),
                   data=ToyData)
    with pytest.raises(TypeError, match="missing \\['total'\\], undeclared \\['totl'\\]"):
        renamed.finish([{"v": 1}], "gloo", {})


@pytest.mark.parametrize("returned, message", [({}, "missing \\['v'\\], undeclared \\[\\]"),
                                               ({"v": 1, "w": 2}, "missing \\[\\], undeclared \\['w'\\]")])
def test_a_record_must_have_exactly_the_fields_of_its_typeddict(returned, message):
    lab = _lab(lambda ranks, backend, params: Summary({}, []), rank_fn=lambda ctx: returned, record=ToyRecord)
    ctx = RankContext(0, 1, 0, "gloo", torch.device("cpu"))
    with pytest.raises(TypeError, match=f"lab 'toy': 랭크 기록 keys differ from the declared ones: {message}"):
        lab.run_rank(ctx, {})


def test_a_record_type_inherits_the_described_fields():
    class Spread(Described):
        sum: float

    lab = _lab(lambda ranks, backend, params: Summary({}, []), rank_fn=lambda ctx: {**ctx.describe(), "sum": 1.0},
               record=Spread)
    ctx = RankContext(0, 1, 0, "gloo", torch.device("cpu"))
    assert set(lab.run_rank(ctx, {})) == {"sum", *ctx.describe()} == lab.record_keys


def test_record_and_data_must_be_typeddicts():
    with pytest.raises(TypeError, match="record must be a TypedDict"):
        _lab(lambda ranks, backend, params: Summary({}, []), record=dict)
    with pytest.raises(TypeError, match="data must be a TypedDict"):
        _lab(lambda ranks, backend, params: Summary({}, []), data=frozenset({"total"}))


def test_a_summary_must_be_a_summary_with_unique_check_names():
    with pytest.raises(TypeError, match="must return a Summary"):
        _lab(lambda ranks, backend, params: {"not": "a summary"}).finish([{"v": 1}], "gloo", {})
    twice = [check_equal("same", 1, 1, "d"), check_equal("same", 2, 2, "d")]
    with pytest.raises(TypeError, match="duplicate check names"):
        _lab(lambda ranks, backend, params: Summary({}, twice)).finish([{"v": 1}], "gloo", {})


def _cased(**kw) -> Lab:
    """A toy lab made of two cases: ``a`` reads ``k``, ``b`` reads ``m`` (at most 3 when N=2)."""
    def at_most_three(params, world_size):
        if world_size == 2 and params["m"] > 3:
            raise LabConfigError("m은 N=2에서 3 이하여야 합니다")

    cases = {"a": Case({"k": Int(1, min=0, max=9)}), "b": Case({"m": Int(2, min=0, max=9)}, at_most_three)}
    return _lab(lambda ranks, backend, params: Summary({}, []), params={"which": Choice("a", ("a", "b"))},
                case_key="which", cases=cases, **kw)


def test_a_lab_made_of_cases_takes_its_case_parameters_only():
    lab = _cased()
    assert lab.resolve_params({}, 2) == {"which": "a", "k": 1}
    assert lab.resolve_params({"which": "b", "m": 3}, 2) == {"which": "b", "m": 3}
    assert lab.parse_params(["m=4", "which=b"]) == {"m": 4, "which": "b"}
    with pytest.raises(LabConfigError, match="실습 'toy'의 which=a에 없는 인자입니다: m. 쓸 수 있는 인자: k, which"):
        lab.resolve_params({"m": 1}, 2)
    with pytest.raises(LabConfigError, match="which=b에 없는 인자입니다: k"):
        lab.parse_params(["k=1", "which=b"])
    with pytest.raises(LabConfigError, match="3 이하"):  # 그 경우의 규칙
        lab.resolve_params({"which": "b", "m": 4}, 2)
    with pytest.raises(LabConfigError, match="인자 which"):
        lab.resolve_params({"which": "c"}, 2)


def test_cases_must_match_their_choice_and_not_repeat_a_shared_parameter():
    with pytest.raises(TypeError, match="must be a Choice of its cases"):
        _lab(lambda ranks, backend, params: Summary({}, []), params={"which": Choice("a", ("a",))},
             case_key="which", cases={"a": Case({}), "b": Case({})})
    with pytest.raises(TypeError, match="also declared for every case: \\['which'\\]"):
        _lab(lambda ranks, backend, params: Summary({}, []), params={"which": Choice("a", ("a",))},
             case_key="which", cases={"a": Case({"which": Int(1, min=0, max=1)})})


def test_an_outcome_result_is_built_by_the_engine():
    lab = _cased(data=ToyData, summarize_outcome=lambda outcome, backend, params: Summary(
        {"total": 0}, [check_equal("outcome", outcome["kind"], "hang", "d")]))
    result = lab.finish_outcome({"kind": "hang"}, 3, "gloo", {"which": "a", "k": 1})
    assert (result.lab, result.world_size, result.ranks, result.data, result.ok) == ("toy", 3, [], {"total": 0}, True)
    assert result.params == {"which": "a", "k": 1}
    with pytest.raises(TypeError, match="declares no summarize_outcome"):
        _cased().finish_outcome({"kind": "hang"}, 2, "gloo", {})
