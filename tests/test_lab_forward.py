"""Chapters 2 and 3: the ``forward`` and ``backward`` labs on real gloo ranks, and their checks failing.

Each lab runs once per world size (module fixtures); the failure tests tamper with copies of the
recorded rank data and call the lab's ``summarize`` again, so a claim that stops holding is caught.
"""

from __future__ import annotations

import copy

import pytest
from conftest import assert_checks_hold, assert_only_these_fail

import labs
from labs.lessons import backward as backward_lab
from labs.lessons import forward as forward_lab
from labs.viz.backward import component_labels, gradient_allreduce_figure
from labs.viz.forward import bn_buffer_figure, collective_timeline_figure, loss_figure

pytestmark = pytest.mark.timeout(120)

PLAIN_FORWARD = [{}, {"broadcast": 2}, {}, {}]  # 반복 1: 버킷 재구성(정수 2개 텐서를 broadcast)


@pytest.fixture(scope="module")
def forward_runs():
    return {n: labs.run("forward", nproc=n) for n in (1, 3)}


@pytest.fixture(scope="module")
def backward_runs():
    return {n: labs.run("backward", nproc=n) for n in (1, 3, 4)}


# ----------------------------------------------------------------------------- forward (2장)

@pytest.mark.parametrize("n", [1, 3])
def test_forward_checks_hold(forward_runs, n):
    result = forward_runs[n]
    assert_checks_hold(result)
    assert result.world_size == n and len({r["pid"] for r in result.ranks}) == n
    counts = result.data["counts"]
    assert counts["plain"]["forward"] == PLAIN_FORWARD
    assert counts["plain"]["rebuilt"] == [False, True, False, False]
    assert all(c == {"all_reduce": 1} for name, v in counts.items() if name != "plain_unused" for c in v["backward"])
    assert counts["plain_unused"]["backward"] == [{"all_reduce": 2}] * 4  # 버킷 1개 + 미사용 파라미터 표시 1개
    assert counts["plain_unused"]["rebuilt"] == [False] * 4  # find_unused_parameters=True이면 재구성하지 않는다
    assert result.data["wide_backward"] == [1, 2, 2, 2]  # 3 MiB: 반복 0은 버킷 1개, 재구성 뒤 1 MiB + 나머지
    assert [sum(c.values()) for c in counts["bn_sync"]["forward"]] == [2, 4, 2, 2]
    assert counts["bn_nosync"]["forward"] == PLAIN_FORWARD
    steady = result.data["items"]["bn_sync"]["forward"][2]
    assert sorted((it["dtype"], it["numel"]) for it in steady) == [("float32", 16), ("int64", 1)]
    rebuild = result.data["items"]["plain"]["forward"][1]
    assert [(it["op"], it["dtype"]) for it in rebuild] == [("broadcast", "int32")] * 2
    assert result.checks["losses_differ"].value == n
    assert result.checks["mean_loss_is_global_loss"].value <= 1e-6
    assert result.checks["bn_nosync_buffers_diverge"].value == n
    assert result.data["legacy_running_mean0"] == [r + 1.0 for r in range(n)]  # 생성자도 버퍼를 안 맞춤
    assert "GPU" in result.data["syncbn_skipped"]  # CPU: DDP refuses SyncBatchNorm, no check
    assert "syncbn_forward_all_gather" not in result.checks


def test_forward_single_rank_does_not_skip_communication(forward_runs):
    assert forward_runs[1].data["counts"] == forward_runs[3].data["counts"]


def _extra_forward_broadcast(ranks):
    ranks[1]["variants"]["plain"]["forward"][2] = {"broadcast": 1}


def _same_losses(ranks):
    for r in ranks:
        r["variants"]["plain"]["losses"] = list(ranks[0]["variants"]["plain"]["losses"])


def _global_loss_off(ranks):
    ranks[0]["variants"]["plain"]["global_losses"][2] += 1e-3


def _buffers_not_synced(ranks):
    ranks[2]["variants"]["bn_sync"]["bn_entry_mean"][3][0] += 0.5


def _buffers_not_diverged(ranks):
    for r in ranks:
        r["variants"]["bn_nosync"]["bn_entry_mean"] = copy.deepcopy(ranks[0]["variants"]["bn_nosync"]["bn_entry_mean"])


def _sync_changed_losses(ranks):
    ranks[1]["variants"]["bn_sync"]["losses"][2] += 1e-4


def _no_buffer_broadcast(ranks):
    for r in ranks:
        r["variants"]["bn_sync"]["forward"][3] = {}
        r["variants"]["bn_sync"]["forward_items"][3] = []


def _legacy_synced_at_init(ranks):
    for r in ranks:
        r["legacy"]["running_mean0"] = 1.0


def _first_backward_as_find_unused(ranks):
    """A real wrong behaviour: the default model's records replaced by the find_unused_parameters run's."""
    for r in ranks:
        r["variants"]["plain"]["backward"] = [dict(c) for c in r["variants"]["plain_unused"]["backward"]]


def _wide_never_split(ranks):
    for r in ranks:
        r["wide_backward"] = [1] * len(r["wide_backward"])


def _backward_without_all_reduce(ranks):
    ranks[0]["variants"]["bn_nosync"]["backward"][0] = {}


@pytest.mark.parametrize("tamper, failing", [
    (_extra_forward_broadcast, {"plain_forward_steady_zero", "plain_forward_comm_only_at_rebuild",
                                "counts_same_on_all_ranks"}),
    (_same_losses, {"losses_differ", "mean_loss_is_global_loss"}),
    (_global_loss_off, {"mean_loss_is_global_loss"}),
    (_buffers_not_synced, {"bn_sync_buffers_identical"}),
    (_buffers_not_diverged, {"bn_nosync_buffers_diverge"}),
    (_sync_changed_losses, {"bn_sync_keeps_training_losses"}),
    (_no_buffer_broadcast, {"bn_sync_forward_broadcasts", "bn_broadcast_is_buffers"}),
    (_legacy_synced_at_init, {"legacy_broadcast_buffers_skips_init"}),
    (_backward_without_all_reduce, {"every_backward_all_reduces", "counts_same_on_all_ranks",
                                    "first_backward_one_bucket"}),
    (_first_backward_as_find_unused, {"first_backward_one_bucket", "find_unused_adds_all_reduce"}),
    (_wide_never_split, {"wide_split_after_rebuild"}),
])
def test_forward_checks_can_fail(forward_runs, tamper, failing):
    assert_only_these_fail(forward_lab, forward_runs[3], tamper, failing)


def test_forward_figures(forward_runs):
    result = forward_runs[3]
    timeline = collective_timeline_figure(result.data["counts"], result.data["items"])
    assert len(timeline.layout.updatemenus[0].buttons) == 4
    assert [list(row) for row in timeline.data[0].z] == [[0, 2, 0, 0], [1, 1, 1, 1]]
    assert len(loss_figure(result.data["losses"], result.data["mean_losses"]).data) == 3 + 1
    assert len(bn_buffer_figure(result.ranks).data) == 2 * 3


# ----------------------------------------------------------------------------- backward (3장)

@pytest.mark.parametrize("n", [1, 3, 4])
def test_backward_checks_hold(backward_runs, n):
    result = backward_runs[n]
    assert_checks_hold(result)
    assert result.checks["local_grads_differ"].value == n
    assert result.checks["ddp_grads_identical"].value == 0.0
    assert result.checks["ddp_grad_is_mean"].value <= 1e-6
    assert result.data["sum_norm_ratio"] == pytest.approx(n, rel=1e-4)  # 합이었다면 N배
    assert result.data["comm"] == {"no_sync_backward": {}, "backward": {"all_reduce": 1}, "step": {}}
    assert result.data["backward_items"] == [{"op": "all_reduce", "numel": 58, "dtype": "float32"}]
    if n > 1:  # 로컬 그래디언트는 달랐고, backward 직후에는 같다
        assert len({round(x, 9) for x in result.data["local_norms"]}) == n
        assert len(set(result.data["ddp_norms"])) == 1


def _ddp_is_sum(ranks):
    total = [sum(col) for col in zip(*(r["local_grad"] for r in ranks))]
    for r in ranks:
        r["ddp_grad"] = list(total)


def _local_all_equal(ranks):
    for r in ranks:
        r["local_grad"] = list(ranks[0]["local_grad"])


def _one_rank_off(ranks):
    ranks[-1]["ddp_grad"][5] += 1e-7


def _hook_saw_mean(ranks):
    for r in ranks:
        r["hook_grad"] = r["ddp_grad"][:len(r["hook_grad"])]


def _step_communicates(ranks):
    ranks[0]["comm"]["step"] = {"all_reduce": 1}


@pytest.mark.parametrize("tamper, failing", [
    (_ddp_is_sum, {"ddp_grad_is_mean"}),
    (_local_all_equal, {"local_grads_differ", "ddp_grad_is_mean", "hook_sees_local_grad"}),
    (_one_rank_off, {"ddp_grads_identical"}),
    (_hook_saw_mean, {"hook_sees_local_grad"}),
    (_step_communicates, {"step_no_comm"}),
])
def test_backward_checks_can_fail(backward_runs, tamper, failing):
    assert_only_these_fail(backward_lab, backward_runs[4], tamper, failing)


def test_backward_figure(backward_runs):
    result = backward_runs[4]
    fig = gradient_allreduce_figure(result.ranks, result.data["mean"])
    assert [f.name for f in fig.frames] == ["로컬 g_i", "평균 계산", "All-Reduce 후"]
    after = fig.frames[-1].data[:4]
    assert len({bar.y for bar in after}) == 1  # ③: 모든 랭크의 막대가 같다
    labels = component_labels(result.ranks[0]["param_shapes"])
    assert len(labels) == 58 and labels[0] == "0.weight[0,0]" and labels[-1] == "2.bias[1]"
