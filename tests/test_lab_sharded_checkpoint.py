"""Chapter 13: the ``sharded_checkpoint`` lab on real gloo ranks (ZeRO-1 and FSDP2 checkpoints resumed against
an uninterrupted run), the rank-0-only save it catches, and each check failing on tampered records."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, has_hangul, set_in_records, tamper_tests

import labs
from labs.lessons import sharded_checkpoint as ckpt_lab

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("sharded_checkpoint", nproc=n) for n in (1, 2, 3)}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_sharded_checkpoint_checks_hold(runs, n):
    result = runs[n]
    expected = {"rank0_only_resume_differs", *ckpt_lab.NEEDS_TWO_RANKS} if n == 1 else set()
    assert_checks_hold(result, expected | ({"resharded_state_restored"} if n % 2 else set()))
    diffs = result.data["diffs"]
    if n <= 2:  # 비트 단위로 같다
        assert diffs["consolidated"] == diffs["per_rank"] == diffs["zero"] == 0.0
    # 오류 문장은 한국어이고 무엇을 부를지 말한다
    assert has_hangul(result.data["refusal"]) and "consolidate_state_dict(to=0)" in result.data["refusal"]


def test_resuming_on_half_the_ranks_keeps_or_halves_the_global_batch(runs):
    """N=2 → 1: the one rank left owns every saved state; doubling the per-rank batch keeps B and (with the default
    parameters) the run; keeping it halves B and the run differs."""
    reshard, tol = runs[2].data["resharded"], runs[2].data["tolerance"]
    assert reshard["error"] is None and reshard["restored"] and reshard["owned"] == list(range(8))
    assert reshard["same_global_batch"] <= tol < reshard["same_per_rank_batch"]


def test_a_rank0_only_save_is_caught():
    """The broken variant: the consolidated way saved as chapter 6 saves DDP (rank 0 alone, its own shard)."""
    result = labs.run("sharded_checkpoint", nproc=2, mistake="save_rank0_only")
    assert {c.name for c in result.failed()} == ckpt_lab.MISTAKE_FAILS["save_rank0_only"], result.report()
    # N=1에서 다시 불러오면 ShardedOptimizer가 빠진 샤드를 알아차리고 한국어로 거절한다
    assert "consolidate_state_dict" in result.data["resharded"]["error"]


def _diff(way: str, value: float):
    return set_in_records(("diffs", way), lambda _: value, [1])


TAMPERS = {
    "state_dict_refuses_a_shard": set_in_records(("refusals", "state_dict"), lambda _: None, [0]),
    "consolidated_resume_equals_uninterrupted": _diff("consolidated", 1e-7),
    "per_rank_resume_equals_uninterrupted": _diff("per_rank", 1e-7),
    "zero_redundancy_resume_equals_uninterrupted": _diff("zero", 1e-7),
    "fsdp2_dcp_resume_equals_uninterrupted": set_in_records(("fsdp2", "diff"), lambda _: 1e-7, [0]),
    "rank0_only_resume_differs": set_in_records(("diffs", "rank0_only"), lambda _: 0.0),
    "rank0_only_replicas_identical": set_in_records(("fingerprints", "rank0_only"), lambda _: "0" * 12, [1]),
    "other_shard_refused": set_in_records(("refusals", "other_shard"), lambda _: None, [1]),
    "fsdp2_rank0_state_dict_is_a_shard": set_in_records(("fsdp2", "state_dict_numel"), lambda v: 2 * v, [0]),
    "resharded_state_restored": set_in_records(("resharded", "restored"), lambda _: False, [0]),
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(ckpt_lab, TAMPERS, n=2)
