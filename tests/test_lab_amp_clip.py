"""Chapter 7: the ``amp_clip`` lab on real gloo ranks (autocast, GradScaler, clipping, fp16 hook),
the wrong scaler order it catches, and each of its comparisons failing on tampered records."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, set_in_records, tamper_tests

import labs
from labs.lessons import amp_clip as amp_clip_lab

pytestmark = pytest.mark.timeout(240)

NEEDS_TWO_RANKS = {"scaler_replicas_identical", "clip_norm_same_on_every_rank", "local_norms_differ_per_rank",
                   "wrong_clip_replicas_identical", "fp16_hook_halves_bytes"}


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("amp_clip", nproc=n) for n in (1, 3)}


@pytest.mark.parametrize("n", [1, 3])
def test_amp_clip_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result, NEEDS_TWO_RANKS if n == 1 else set())
    inf_step = amp_clip_lab.LAB.params["inf_step"].default
    for trace, finite in zip(result.data["scale_trace"], result.data["grads_finite"]):
        assert trace[inf_step] == amp_clip_lab.INIT_SCALE / 2  # inf 스텝에서 한 번만 줄어든다
        assert [i for i, ok in enumerate(finite) if not ok] == [inf_step]  # 모든 랭크가 inf를 보았다
    # gloo에서는 bf16 훅을 등록하는 순간 TypeError: 장은 이 문장을 실행 결과에서 인용한다
    assert result.data["bf16_hook"].startswith("TypeError: ") and "NCCL" in result.data["bf16_hook"]


def test_scaler_step_inside_no_sync_is_caught():
    """The wrong order: scaler.step/update after every micro-step inside no_sync()."""
    result = labs.run("amp_clip", nproc=2, mistake="scaler_step_in_no_sync")
    assert {c.name for c in result.failed()} == set(amp_clip_lab.SCALER_CHECKS), result.report()
    # 마지막 랭크는 누적된 inf를 마이크로 스텝마다 보고 두 번 줄이고, 다른 랭크는 동기화된 스텝에서 한 번만 줄인다
    assert result.checks["scale_backed_off_on_every_rank"].value == [256.0, 512.0]


def test_clipping_before_unscale_is_caught():
    """The wrong order with a GradScaler: clip_grad_norm_ on the scaled gradients, then scaler.step."""
    result = labs.run("amp_clip", nproc=2, mistake="clip_before_unscale")
    assert {c.name for c in result.failed()} == set(amp_clip_lab.UNSCALE_CHECKS), result.report()
    # 잘린 노름은 배율(65536)배이고, 업데이트는 배율분의 1 크기로 줄어든다
    unscale = result.data["unscale"]
    assert unscale["scaled_norm"] == pytest.approx(unscale["scale"] * unscale["norm"], rel=1e-4)
    assert unscale["update_ratio"] < 10 / unscale["scale"]


def _bump(params: list) -> list:
    return [params[0] + 1e-3, *params[1:]]


INF = amp_clip_lab.LAB.params["inf_step"].default
assert isinstance(INF, int)
TAMPERS = {
    "autocast_output_bf16": set_in_records(("scaler", "output_dtype"), lambda _: "float32", [1]),
    "allreduce_in_param_dtype": set_in_records(("scaler", "allreduce_dtypes"), lambda _: ["bfloat16"], [0]),
    "inf_step_skipped_on_every_rank": set_in_records(("scaler", "steps", INF, "moved"), lambda _: 1e-3, [0]),
    "scale_backed_off_on_every_rank": set_in_records(("scaler", "steps", INF, "scale"), lambda _: 1024.0, [1]),
    "step_after_inf_updates": set_in_records(("scaler", "steps", INF + 1, "moved"), lambda _: 0.0, [2]),
    "scaler_replicas_identical": set_in_records(("scaler", "fingerprint"), lambda _: "0" * 12, [2]),
    "clip_norm_same_on_every_rank": set_in_records(("clip", "ddp", "norm"), lambda v: v * (1 + 1e-7), [1]),
    "clip_norm_matches_single": set_in_records(("clip", "ddp", "norm"), lambda v: v * 1.001),
    "clip_issues_no_collectives": set_in_records(("clip", "ddp", "clip_collectives"), lambda _: 1, [0]),
    "clipped_step_matches_single": set_in_records(("clip", "ddp", "params"), _bump),
    "clip_after_accumulation_matches_single": set_in_records(("accumulated", "right", "params"), _bump),
    "clip_every_micro_step_differs": lambda ranks: [r["accumulated"]["wrong"].update(
        params=list(ranks[0]["accumulated"]["single"]["params"])) for r in ranks],
    "local_norms_differ_per_rank": set_in_records(("accumulated", "wrong", "local_norms"), lambda _: [1.0]),
    "wrong_clip_replicas_identical": set_in_records(("accumulated", "wrong", "params"), _bump, [1]),
    "unscaled_clip_norm_matches_single": set_in_records(("unscale", "right", "norm"), lambda v: v * 1.001, [1]),
    "unscaled_clip_step_matches_single": set_in_records(("unscale", "right", "params"), _bump, [0]),
    "clip_before_unscale_differs": lambda ranks: [r["unscale"]["wrong"].update(
        params=list(ranks[0]["clip"]["single"]["params"])) for r in ranks],
    "fp16_hook_overflows": set_in_records(("hooks", "overflow_finite", "fp16"), lambda _: True, [2]),
    "fp16_hook_halves_bytes": lambda ranks: ranks[0]["hooks"]["fp16"].update(wrote=ranks[0]["hooks"]["default"]["wrote"]),
    "fp16_hook_drift_small": lambda ranks: ranks[0]["hooks"].update(drift=0.05 * ranks[0]["hooks"]["default"]["moved"]),
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(amp_clip_lab, TAMPERS, n=3)
