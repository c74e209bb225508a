"""Chapter 7: the ``compile_ddp`` lab on real gloo ranks (torch.compile of a DDP model, DDPOptimizer's
pieces) and each of its comparisons failing on tampered records."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, tamper_tests

import labs
from labs.lessons import compile_ddp as compile_lab

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("compile_ddp", nproc=n) for n in (1, 3)}


@pytest.mark.parametrize("n", [1, 3])
def test_compile_ddp_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result, set())
    # 장이 인용하는 차이: cap 2에서 DDP의 eager 버킷은 2개인데 DDPOptimizer의 조각은 3개(첫 조각은 언제나 1 MiB)
    assert result.data["ddp_buckets"]["eager"][1] == 2 and result.data["pieces"][1] == 3


def _swap_weights_across_pieces(ranks):
    """Swap a weight of the first piece with one of the second in the cap-1 arrival order: the bucket
    rule sees the same sizes in the same order, the pieces no longer arrive together."""
    arrival = ranks[1]["runs"]["1"]["compiled"]["arrival"]
    first = next(i for i in range(8) if arrival[i] % 2 == 0)
    second = next(i for i in range(8, 16) if arrival[i] % 2 == 0)
    arrival[first], arrival[second] = arrival[second], arrival[first]


def _merge_two_buckets(ranks):
    reduced = ranks[1]["runs"]["2"]["compiled"]["allreduce"]
    reduced[:2] = [reduced[0] + reduced[1]]


def _one_element_more(ranks):
    ranks[0]["runs"]["1"]["eager"]["allreduce"][-1] += 1


def _bump(params: list) -> list:
    return [params[0] + 1e-3, *params[1:]]


TAMPERS = {
    "pieces_follow_rule": lambda ranks: ranks[0]["runs"]["1"]["compiled"]["graphs"].append(9),
    "pieces_finish_in_order": _swap_weights_across_pieces,
    "no_split_without_optimizer": lambda ranks: ranks[2].update(no_split=[9, 9]),
    "buckets_follow_arrival": _merge_two_buckets,
    "every_gradient_reduced_once": _one_element_more,
    "compiled_matches_eager": lambda ranks: ranks[2]["runs"]["2"]["compiled"].update(
        params=_bump(ranks[2]["runs"]["2"]["compiled"]["params"])),
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(compile_lab, TAMPERS, n=3)
