"""Chapter 7: the ``comm_hooks`` lab on real gloo ranks (PowerSGD, gradient_as_bucket_view) and each
of its comparisons failing on tampered records."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, set_in_records, tamper_tests

import labs
from labs.lessons import comm_hooks as comm_hooks_lab

pytestmark = pytest.mark.timeout(240)

NEEDS_TWO_RANKS = {"powersgd_cuts_bytes", "powersgd_replicas_identical"}


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("comm_hooks", nproc=n) for n in (1, 3)}


@pytest.mark.parametrize("n", [1, 3])
def test_comm_hooks_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result, NEEDS_TWO_RANKS if n == 1 else set())
    views = result.data["views"]
    # 장이 인용하는 값: False면 그래디언트와 버킷이 따로(저장소 4 + 2개), True면 그래디언트가 버킷 두 개의 뷰
    assert (views["copy"]["grad_storages"], views["view"]["grad_storages"]) == (4, views["view"]["buckets"]) == (4, 2)


def _same_as_default_bytes(ranks):
    ranks[0]["powersgd"]["powersgd"]["wrote"] = list(ranks[0]["powersgd"]["default"]["wrote"])


def _ef_as_without(ranks):
    ranks[0]["powersgd"]["powersgd"]["drift"] = ranks[0]["powersgd"]["powersgd_no_ef"]["drift"]


TAMPERS = {
    "plain_allreduce_until_start": set_in_records(("powersgd", "powersgd", "plain_allreduce"), lambda p: [[256], *p[1:]], [1]),
    "powersgd_is_lossy": set_in_records(("powersgd", "default", "moved"), lambda _: 1e9),
    "error_feedback_closer": _ef_as_without,
    "powersgd_cuts_bytes": _same_as_default_bytes,
    "powersgd_replicas_identical": set_in_records(("powersgd", "powersgd", "fingerprint"), lambda _: "0" * 12, [2]),
    "bucket_view_holds_one_copy": set_in_records(("bucket_view", "view", "held_bytes"), lambda b: 2 * b, [2]),
    "grads_are_bucket_views": set_in_records(("bucket_view", "view", "grads_in_buckets"), lambda _: False, [1]),
    "view_skips_copies": set_in_records(("bucket_view", "view", "copies"), lambda _: {"grad_to_bucket": 4}, [0]),
    "copy_mode_copies_both_ways": set_in_records(("bucket_view", "copy", "copies"), lambda _: {"grad_to_bucket": 4}, [1]),
    "set_to_none_view_again": set_in_records(("bucket_view", "view_set_to_none", "grads_in_buckets"), lambda _: False, [2]),
    "set_to_none_copies_again": set_in_records(("bucket_view", "view_set_to_none", "copies"), lambda _: {}, [0]),
    "bucket_view_same_result": set_in_records(("bucket_view", "view", "fingerprint"), lambda _: "0" * 12, [0]),
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(comm_hooks_lab, TAMPERS, n=3)
