"""Chapter 4.3: the ``batch_lr`` lab on real gloo ranks, its table and figure, and its checks failing
when the recorded data is tampered with or the gradients are summed instead of averaged."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, assert_only_these_fail, has_hangul

import labs
from labs.errors import LabConfigError
from labs.lessons import batch_lr as batch_lr_lab
from labs.viz.batch_lr import curves_alt, curves_figure, regime_table

pytestmark = pytest.mark.timeout(240)

EPOCHS = batch_lr_lab.LAB.params["epochs"].default  # 책과 같은 길이: 워밍업 한 에폭이 차지하는 몫도 같다


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("batch_lr", nproc=n) for n in (1, 3)}


@pytest.mark.parametrize("n", [1, 3])
def test_batch_lr_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result, {"fixed_per_rank_fewer_steps", "fixed_per_rank_loss_higher", "linear_scaled_loss_close"}
                       if n == 1 else None)
    regimes = result.data["regimes"]
    assert regimes["fixed_global"]["per_rank_batch"] * n == regimes["fixed_global"]["global_batch"] == 48
    assert regimes["fixed_per_rank"]["per_rank_batch"] == 48 and regimes["linear_scaled"]["peak_lr"] == 0.04 * n
    lrs = regimes["linear_scaled"]["lrs"]
    assert lrs[0] == pytest.approx(0.04) and lrs[-1] == pytest.approx(0.04 * n)  # 워밍업: η에서 N·η까지
    if n == 1:
        assert result.data["max_diff_fixed_global"] == 0.0
    else:
        assert sorted(lrs) == lrs and len(set(lrs[:1440 // 144])) == 1440 // 144  # 첫 에폭 10스텝


def test_summed_gradients_are_caught():
    """The broken variant: a comm hook that sums instead of averaging (an N times larger step)."""
    result = labs.run("batch_lr", nproc=2, grad_reduce="sum")
    assert "fixed_global_matches_single" in {c.name for c in result.failed()}
    assert result.data["max_diff_fixed_global"] > 100 * result.data["tolerance"]


def test_forgetting_to_shrink_b_fails(runs):
    def tamper(ranks):  # b를 B/N으로 줄이지 않은 학습: 바로 b 고정 방식이 기록한 것
        for r in ranks:
            r["regimes"]["fixed_global"] = r["regimes"]["fixed_per_rank"]

    assert_only_these_fail(batch_lr_lab, runs[3], tamper, {"fixed_global_matches_single"})


def test_diverged_replica_fails(runs):
    def tamper(ranks):
        ranks[2]["regimes"]["linear_scaled"]["params"][0] += 1e-3

    assert_only_these_fail(batch_lr_lab, runs[3], tamper, {"replicas_identical"})


def test_unscaled_step_count_fails(runs):
    def tamper(ranks):
        ranks[0]["regimes"]["fixed_per_rank"]["steps_per_epoch"] = ranks[0]["single"]["steps_per_epoch"]

    assert_only_these_fail(batch_lr_lab, runs[3], tamper, {"fixed_per_rank_fewer_steps"})


def test_unscaled_loss_like_single_fails(runs):
    def tamper(ranks):
        ranks[0]["regimes"]["fixed_per_rank"]["curve"][-1] = ranks[0]["single"]["curve"][-1]

    assert_only_these_fail(batch_lr_lab, runs[3], tamper, {"fixed_per_rank_loss_higher"})


def test_scaled_loss_far_from_single_fails(runs):
    def tamper(ranks):
        ranks[0]["regimes"]["linear_scaled"]["curve"][-1] *= 2

    assert_only_these_fail(batch_lr_lab, runs[3], tamper, {"linear_scaled_loss_close"})


def test_batch_that_does_not_divide_is_refused():
    with pytest.raises(LabConfigError, match="global_batch"):
        labs.run("batch_lr", nproc=3, global_batch=50)
    with pytest.raises(LabConfigError, match="1440"):
        labs.run("batch_lr", nproc=4, global_batch=52)


def test_table_and_figure(runs):
    html = regime_table([runs[1], runs[3]]).data
    assert html.count("<tr>") == 1 + 4 * 2 and "N·η + 워밍업" in html
    fig = curves_figure(runs[3])
    assert len(fig.data) == 4 and all(len(t.y) == EPOCHS + 1 for t in fig.data)
    assert has_hangul(curves_alt(runs[3]))
