"""Chapter 13: the ``mixed`` lab on real gloo ranks (bytes per parameter in bf16 mixed precision with fp32
master weights), each check failing on tampered records."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, tamper_tests

import labs
from labs.lessons import mixed as mixed_lab

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("mixed", nproc=n) for n in (1, 3)}


@pytest.mark.parametrize("n", [1, 3])
def test_mixed_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result, {"masters_identical"} if n == 1 else set())
    # 2 + 2 + 2 + 12 (AdamW), 2 + 2 + 2 + 8 (SGD 모멘텀): 파라미터, 그래디언트, DDP 버킷, 옵티마이저 몫(마스터 + 원소별 상태)
    per_param = result.data["bytes_per_param"]
    assert {opt: sum(v.values()) for opt, v in per_param.items()} == {"sgd": 14.0, "adamw": 18.0}
    # 텐서마다 하나인 step(AdamW)은 원소별 상태에 들지 않는다: 층 4개, 텐서 8개
    assert result.data["memory"]["adamw"]["scalars"] == [8 * 4] and result.data["memory"]["sgd"]["scalars"] == [0]


def _set(opt: str, key: str, value, rank: int):
    def tamper(ranks):
        ranks[rank][opt][key] = value(ranks[rank][opt][key])
    return tamper


def _memory(opt: str, kind: str, value, rank: int):
    def tamper(ranks):
        ranks[rank][opt]["memory"][kind] = value(ranks[rank][opt]["memory"][kind])
    return tamper


TAMPERS = {
    # 파라미터를 fp32로 둔 랭크 하나
    "params_compute_bytes": _memory("adamw", "params", lambda v: 2 * v, 1),
    # 그래디언트를 fp32로 쌓은 랭크 하나
    "grads_compute_bytes": _memory("sgd", "grads", lambda v: 2 * v, 2),
    # fp32로 All-Reduce한 스텝
    "allreduce_in_compute_dtype": _set("sgd", "allreduce_dtypes", lambda v: v + ["float32"], 0),
    # 마스터를 bf16으로 둔 랭크
    "master_bytes": _memory("adamw", "master", lambda v: v // 2, 2),
    # 모멘트 하나를 빠뜨린 AdamW
    "moments_bytes": _memory("adamw", "moments", lambda v: v // 2, 0),
    # 마스터에서 파라미터로 되돌려 쓰지 않은 랭크
    "params_are_rounded_masters": _set("sgd", "rounding_diff", lambda _: 2 ** -8, 1),
    # 다른 마스터를 가진 랭크
    "masters_identical": _set("adamw", "fingerprint", lambda _: "0" * 12, 2),
    # 버킷을 fp32로 둔 랭크(그래디언트를 fp32로 올려 통신하는 방식)
    "ddp_buckets_compute_bytes": lambda ranks: ranks[1]["ddp_buckets"].update(buckets=2 * ranks[1]["ddp_buckets"]["buckets"]),
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(mixed_lab, TAMPERS, n=3)


def test_bad_input_is_refused_in_korean():
    with pytest.raises(labs.LabConfigError, match="width"):
        labs.run("mixed", nproc=2, width=0)
