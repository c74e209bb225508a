"""Chapters 4 and 5: the ``allreduce``, ``update`` and ``equivalence`` labs on real gloo ranks,
their figures, and their checks failing when the recorded data is tampered with.

Each lab runs once per world size (module fixtures); the failure tests change copies of the
recorded rank data and call the lab's ``summarize`` again, so a claim that stops holding is caught.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_checks_hold, assert_only_these_fail

import labs
from labs.lessons import allreduce as allreduce_lab
from labs.lessons import equivalence as equivalence_lab
from labs.lessons import update as update_lab
from labs.viz.allreduce import bytes_alt, bytes_figure, cost_calculator, ring_steps_figure
from labs.viz.update import trajectory_figure

pytestmark = pytest.mark.timeout(180)

SMALL = {"numel": 10_007, "repeats": 1}  # 나누어떨어지지 않는 작은 텐서: 빠르고, 조각 크기가 다르다


@pytest.fixture(scope="module")
def allreduce_runs():
    return {n: labs.run("allreduce", nproc=n, **SMALL) for n in (1, 3, 4)}


@pytest.fixture(scope="module")
def update_runs():
    return {n: labs.run("update", nproc=n, steps=4) for n in (1, 3, 4)}


@pytest.fixture(scope="module")
def equivalence_runs():
    return {n: labs.run("equivalence", nproc=n) for n in (1, 2, 3, 4)}


# ----------------------------------------------------------------------------- allreduce (4장)

@pytest.mark.parametrize("n", [1, 3, 4])
def test_allreduce_checks_hold(allreduce_runs, n):
    result = allreduce_runs[n]
    assert_checks_hold(result)
    assert result.world_size == n and len({r["pid"] for r in result.ranks}) == n
    size = SMALL["numel"] * 4
    assert result.data["size_bytes"] == size
    assert sum(result.data["chunk_sizes"]) == SMALL["numel"]
    assert [r["ring"]["sent"] for r in result.ranks] == result.data["ring_exact_bytes"]
    assert result.ranks[0]["naive"]["sent"] == result.ranks[0]["naive"]["received"] == (n - 1) * size
    assert len(result.ranks[0]["demo_states"]) == 2 * (n - 1) + 1
    assert result.ranks[0]["demo_states"][-1]["values"] == result.data["demo"]["expected"]
    assert abs(result.ranks[0]["grad_sum_norm_ratio"] - n) < 1e-4 * n
    if n > 1:  # gloo가 소켓에 쓴 바이트: 링 이론값에 가깝고, 랭크 0에 모으는 방식과는 확연히 다르다
        written = result.ranks[0]["library"]["os_written"]
        assert abs(written - result.data["ring_theory_bytes"]) < 0.5 * size / n
    else:
        assert all(result.ranks[0][impl]["sent"] == 0 for impl in allreduce_lab.IMPLEMENTATIONS)


def test_allreduce_uneven_chunks_exercised(allreduce_runs):
    assert len(set(allreduce_runs[3].data["chunk_sizes"])) == 2  # 10,007 = 3,336 + 3,336 + 3,335


def test_demo_contributors_decode():
    assert allreduce_lab.contributors(4044.0, 3, 4) == [0, 1, 3]  # 4000 + 40 + 4
    assert allreduce_lab.contributors(2222.0, 1, 4) == [0, 1, 2, 3]
    n = 4
    total = sum(allreduce_lab.demo_input(r, n, 2) for r in range(n))
    assert all(allreduce_lab.contributors(float(v), e, n) == list(range(n)) for e, v in enumerate(total))


def test_allreduce_wrong_result_fails(allreduce_runs):
    def tamper(ranks):
        ranks[1]["ring"]["max_diff_vs_library"] = 1.0
        ranks[1]["ring"]["digest"] = "0" * 12
        ranks[1]["ring"]["sample"][0] += 1.0

    assert_only_these_fail(allreduce_lab, allreduce_runs[3], tamper,
                           {"implementations_agree", "identical_on_all_ranks", "mean_of_known_inputs"}, **SMALL)


def test_allreduce_wrong_bytes_fail(allreduce_runs):
    def tamper(ranks):
        ranks[0]["ring"]["sent"] += 4 * 10  # 원소 10개를 더 보냈다면 이론값과 어긋난다
        ranks[0]["naive"]["sent"] //= 2

    failing = {"ring_bytes_exact", "ring_bytes_vs_theory", "naive_root_bytes",
               "os_counter_sees_p2p"}  # 운영체제가 센 바이트와도 어긋난다
    assert_only_these_fail(allreduce_lab, allreduce_runs[3], tamper, failing, **SMALL)


def test_allreduce_library_as_gather_fails(allreduce_runs):
    result = allreduce_runs[4]

    def tamper(ranks):  # gloo가 랭크 0에 모으는 방식이었다면 랭크 0은 (N-1)·S를 썼을 것이다
        ranks[0]["library"]["os_written"] = 3 * result.data["size_bytes"]

    assert_only_these_fail(allreduce_lab, result, tamper, {"library_bytes_match_ring"}, **SMALL)


def test_allreduce_ring_demo_fails(allreduce_runs):
    def tamper(ranks):
        state = ranks[2]["demo_states"][1]  # Reduce-Scatter 첫 단계: 받은 조각에 더하지 않았다면
        chunk = state["received"]
        state["values"][chunk] = ranks[2]["demo_states"][0]["values"][chunk]
        ranks[2]["demo_states"][-1]["values"][0] += 1

    assert_only_these_fail(allreduce_lab, allreduce_runs[3], tamper,
                           {"reduce_scatter_growth", "demo_ring_result"}, **SMALL)


def test_allreduce_sum_instead_of_mean_fails(allreduce_runs):
    def tamper(ranks):  # 합을 N으로 나누지 않았다면: (Σg_i) − ∇L = (N−1)∇L
        n = len(ranks)
        for r in ranks:
            r["grad_mean_vs_global"] = (n - 1) * r["grad_global_max"]

    assert_only_these_fail(allreduce_lab, allreduce_runs[3], tamper, {"mean_equals_global_gradient"}, **SMALL)


def test_allreduce_figures(allreduce_runs):
    result = allreduce_runs[4]
    ring = ring_steps_figure(result.ranks, result.data["demo"]["per_chunk"])
    assert [f.name for f in ring.frames] == ["시작", "RS 1", "RS 2", "RS 3", "AG 1", "AG 2", "AG 3"]
    last = ring.frames[-1].layout.shapes
    assert len(last) == 16 and {s.fillcolor for s in last} == {"#54A24B"}  # 끝나면 모든 조각이 완성
    bars = bytes_figure(result.ranks, result.data["ring_theory_bytes"], result.data["size_bytes"])
    assert len(bars.data) == 3
    assert "랭크 0만 0.12 MB" in bytes_alt(result) and "0.06 MB에" in bytes_alt(result)  # (N−1)·S, 2(N−1)/N·S
    calculator = cost_calculator("calc-test").data
    assert "<script" in calculator and "src=" not in calculator and "http" not in calculator


# ----------------------------------------------------------------------------- update (5장)

@pytest.mark.parametrize("n", [1, 3, 4])
def test_update_checks_hold(update_runs, n):
    result = update_runs[n]
    assert_checks_hold(result)
    assert result.data["distinct_fingerprints"]["sgd"] == [1] * 5
    assert result.data["distinct_fingerprints"]["adam"] == [1] * 5
    assert max(result.data["spread"]["sgd"]) == max(result.data["spread"]["adam"]) == 0.0
    for r in result.ranks:
        assert all(c == {} for run in ("sgd", "adam") for c in r[run]["step_collectives"])
        assert all(c == {} for c in r["no_sync"]["train_collectives"])
        if n > 1:  # DDP의 backward()마다 그래디언트 All-Reduce
            assert all(c.get("all_reduce", 0) >= 1 for run in ("sgd", "adam") for c in r[run]["train_collectives"])
    assert result.data["distinct_fingerprints"]["no_sync"][-1] == n
    if n > 1:
        assert result.data["spread"]["no_sync"][-1] > 1e-4


def test_update_diverging_replica_fails(update_runs):
    def tamper(ranks):
        ranks[2]["sgd"]["fingerprints"][3] = "f" * 12
        ranks[2]["sgd"]["params"][3][0] += 1e-7

    assert_only_these_fail(update_lab, update_runs[3], tamper,
                           {"sgd_fingerprints_every_step", "sgd_max_param_diff"}, steps=4)


def test_update_communicating_optimizer_fails(update_runs):
    def tamper(ranks):
        ranks[0]["adam"]["step_collectives"][1] = {"broadcast": 1}
        ranks[1]["adam"]["optimizer_state"] = "0" * 12

    assert_only_these_fail(update_lab, update_runs[3], tamper,
                           {"optimizer_step_collectives", "adam_state_identical"}, steps=4)


def test_update_missing_allreduce_and_sync_fail(update_runs):
    def tamper(ranks):
        ranks[0]["sgd"]["train_collectives"][2] = {}
        for r in ranks:
            r["no_sync"]["fingerprints"][-1] = "same"

    assert_only_these_fail(update_lab, update_runs[3], tamper,
                           {"backward_allreduce_every_step", "no_sync_replicas_diverge"}, steps=4)


def test_trajectory_figure(update_runs):
    fig = trajectory_figure(update_runs[3].ranks)
    assert len(fig.data) == 2 * 3 * 3
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["DDP(동기화)", "동기화 없음"]
    assert sum(buttons[1].args[0]["visible"]) == 9


# ----------------------------------------------------------------------------- equivalence (5장)

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_equivalence_checks_hold(equivalence_runs, n):
    result = equivalence_runs[n]
    assert_checks_hold(result)
    assert result.data["per_rank_batch"] == 12 // n
    if n == 1:
        assert result.data["max_param_diff"] == 0.0 and "exact_with_one_rank" in result.checks
    else:
        assert "exact_with_one_rank" not in result.checks
        assert result.data["max_param_diff"] < 1e-6  # float32 반올림 수준, 허용 오차(1e-5)보다 훨씬 작다


def test_equivalence_with_summed_gradients_fails():
    result = labs.run("equivalence", nproc=2, grad_reduce="sum")
    assert {c.name for c in result.failed()} == {"matches_single_process", "elementwise_allclose"}
    assert result.data["max_param_diff"] > 100 * result.data["tolerance"]


def test_equivalence_tampered_params_fail(equivalence_runs):
    def tamper(ranks):
        ranks[1]["param_diff"][-1] = 1e-3
        ranks[0]["ddp_params"][5] += 1e-3
        ranks[2]["fingerprint_ddp"] = "x" * 12

    assert_only_these_fail(equivalence_lab, equivalence_runs[3], tamper,
                           {"matches_single_process", "elementwise_allclose", "ddp_replicas_identical"})


def test_equivalence_same_order_fails(equivalence_runs):
    def tamper(ranks):
        for r in ranks:
            r["perms"] = [r["perms"][0]] * len(r["perms"])

    assert_only_these_fail(equivalence_lab, equivalence_runs[3], tamper, {"reshuffled_every_step"})


def test_float_sum_order_changes_bits():
    values = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    sums = equivalence_lab.float_sum_orders(values)
    assert len(set(sums.values())) > 1
    exact = float(values.double().sum())
    assert all(abs(s - exact) < 1e-3 for s in sums.values())
