"""Chapter 6 lab: the real training script on N ranks equals one process on the full batch.

Every rank runs ``labs.ddp.train_script.train`` — the same function ``torchrun labs/ddp/train_script.py``
runs. Rank 0 then trains a local reference copy in one process on the *global* batch of every
step (the N ranks' mini-batches side by side, as PyTorch's own DDP tests do), so the lab can
compare final parameters, loss curves and test accuracy. Each rank also records the order its
``DistributedSampler`` produced in every epoch, with ``set_epoch`` (the training run) and without.

With ``ckpt_dir`` the run checkpoints every epoch and resumes from the last checkpoint (of the same
configuration: another one is refused before spawning unless ``fresh``, see
:func:`labs.tools.checkpoint_folder.checkpoint_folder`); with
``fail_at_epoch`` the last rank dies midway through that epoch. :func:`compare_runs` checks
that a resumed run ends where an uninterrupted one does: bit for bit with N ≤ 2 ranks, within
the float32 tolerance with more (see :func:`resume_tolerance`).
"""

from __future__ import annotations

import os
from typing import Any, TypedDict, cast

import torch
from torch.utils.data.distributed import DistributedSampler

from ..context import Described, RankContext
from ..ddp.reference import train_reference
from ..ddp.train_phases import phase_collectives
from ..ddp.train_script import (
    TrainConfig,
    load_digits_split,
    make_loader,
    per_rank_batch,
    run_config,
    run_summary,
    train,
)
from ..errors import LabConfigError
from ..params import Bool, Float, Folder, Int, seed
from ..registry import Lab
from ..result import LabResult, Summary, check_close, check_equal, not_applicable
from ..tools.checkpoint_folder import FOLDER_FILES, folder_conflict
from ..tools.comms import CollectiveCounter
from ..tools.models import index_dataset
from ..tools.primitives import max_abs_diff

# PyTorch c10d의 DDP 테스트(test_c10d_common.py 등)가 DDP 모델과 기준 모델을 비교할 때 쓰는 허용 오차
RTOL, ATOL = 1.3e-6, 5e-5
# 에폭 손실(전역 평균)의 허용 오차: 파라미터 허용 오차와 같은 크기
LOSS_ATOL = 5e-5


def epoch_orders(dataset_size: int, world_size: int, rank: int, seed: int, epochs: int,
                 call_set_epoch: bool) -> list[list[int]]:
    """The order one rank's ``DistributedSampler`` yields in each epoch, with or without ``set_epoch``."""
    sampler: DistributedSampler[int] = DistributedSampler(index_dataset(dataset_size), num_replicas=world_size, rank=rank,
                                                          shuffle=True, seed=seed)
    orders = []
    for epoch in range(epochs):
        if call_set_epoch:
            sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


class TrainRecord(Described):
    """What each rank of the 'train' lab returns."""

    resumed_from: int
    fingerprint: str
    checksum: float
    params: list[float]
    history: list[dict[str, float]]
    per_rank_batch: int
    orders: dict[int, list[int]]
    orders_without_set_epoch: list[list[int]]
    run_collectives: dict[str, int]
    steps_per_epoch: int
    phases: dict[str, Any]
    reference: dict[str, Any] | None


def rank_fn(ctx: RankContext, **params) -> TrainRecord:
    torch.set_num_threads(1)  # 작은 행렬에는 스레드 여러 개가 오히려 느리다 (코어를 랭크끼리 나눠 쓴다)
    cfg = TrainConfig(**params)
    train_set, test_set = load_digits_split()
    orders: dict[int, list[int]] = {}  # 실제 학습에서 DistributedSampler가 낸 순서 (set_epoch 호출)

    def record_order(epoch: int, sampler: DistributedSampler) -> None:
        orders[epoch + 1] = list(sampler)

    with CollectiveCounter() as whole_run:  # 학습 전체가 실제로 실행한 집합 통신
        model, history, start = train(cfg, ctx, train_set, test_set, on_epoch_end=record_order)
    steps_per_epoch = len(make_loader(train_set, cfg, ctx.world_size, ctx.rank)[1])
    record: dict[str, Any] = {
        **ctx.describe(),
        **run_summary(model, history, start, ctx),
        "per_rank_batch": per_rank_batch(cfg, ctx.world_size),
        "orders": orders,
        "orders_without_set_epoch": epoch_orders(len(train_set), ctx.world_size, ctx.rank, cfg.seed, cfg.epochs, False),
        "run_collectives": whole_run.as_dict(),
        "steps_per_epoch": steps_per_epoch,
        "phases": phase_collectives(ctx, cfg, train_set, test_set),
    }
    # 한 프로세스 기준 학습은 랭크 0만 (나머지 랭크는 None)
    record["reference"] = train_reference(cfg, ctx.world_size, train_set, test_set, ctx.device) if ctx.rank == 0 else None
    return cast(TrainRecord, record)


def _add(total: dict[str, int], counts: dict[str, int], times: int = 1) -> dict[str, int]:
    out = dict(total)
    for op, k in counts.items():
        out[op] = out.get(op, 0) + k * times
    return {op: k for op, k in sorted(out.items()) if k}


def expected_run_collectives(phases: dict, epochs_trained: int, steps_per_epoch: int, checkpoints: bool) -> dict:
    """What a whole run must issue if the phase counts tell everything: construction once (and taking the
    checkpoint folder), the counted first steps, every later step like the last counted one, and per epoch
    evaluation, log (and checkpoint). A run resumed from a finished checkpoint trains no step."""
    total = _add({}, phases["construct"])
    if checkpoints:
        total = _add(total, phases["prepare"])
    if not epochs_trained:
        return total
    steps = phases["steps"]
    for counts in steps:
        total = _add(total, counts)
    total = _add(total, steps[-1], epochs_trained * steps_per_epoch - len(steps))
    for phase in ("evaluate", "log") + (("checkpoint",) if checkpoints else ()):
        total = _add(total, phases[phase], epochs_trained)
    return total


def _history_diff(a: list[dict], b: list[dict]) -> float:
    """Largest per-epoch loss difference (inf when the epochs do not line up)."""
    if [h["epoch"] for h in a] != [h["epoch"] for h in b]:
        return float("inf")
    return max((abs(x["loss"] - y["loss"]) for x, y in zip(a, b)), default=0.0)


class TrainData(TypedDict):
    """The summary data of the 'train' lab."""

    summary: dict[str, Any]
    reference_history: list[dict[str, float]]
    per_rank_batch: int
    global_batch: int
    param_tolerance: float
    phases: dict[str, Any]
    run_collectives: dict[str, int]
    steps_per_epoch: int
    epochs_trained: int


def summarize(ranks: list[TrainRecord], backend: str, params: dict[str, Any]) -> Summary[TrainData]:
    n = len(ranks)
    main, ref = ranks[0], ranks[0]["reference"]
    assert ref is not None, "rank 0 trains the one-process reference"
    observed = sorted(main["orders"])
    param_tol = ATOL + RTOL * max(abs(v) for v in ref["params"])
    final, ref_final = main["history"][-1], ref["history"][-1]
    mismatched = sum(ref["orders"][e - 1] != [r["orders"][e] for r in ranks] for e in observed)
    trained = params["epochs"] - main["resumed_from"]
    expected = [expected_run_collectives(r["phases"], trained, r["steps_per_epoch"], bool(params["ckpt_dir"]))
                for r in ranks]
    rebuild = [[min(1, s.get("broadcast", 0)) for s in r["phases"]["steps"]] for r in ranks]
    checks = [
        check_close("ddp_equals_single_process", max_abs_diff(main["params"], ref["params"]), 0.0, param_tol,
                    f"N={n}개 랭크의 DDP 학습과 한 프로세스의 전역 배치 학습이 끝낸 파라미터의 최대 절대 차이 "
                    f"(허용 오차 = atol {ATOL:g} + rtol {RTOL:g} × 최대 |w|)"),
        check_close("loss_curves_agree", _history_diff(main["history"], ref["history"]), 0.0, LOSS_ATOL,
                    "에폭마다 기록한 전역 평균 손실이 두 학습에서 같다(최대 차이)"),
        check_close("test_accuracy_equal", abs(final["correct"] - ref_final["correct"]), 0, 1,
                    f"마지막 테스트 정확도가 같다: 맞힌 샘플 수 차이 (테스트 샘플 {final['total']}개)"),
        check_close("model_learned", final["correct"] / final["total"], 1.0, 0.1,
                    "학습이 실제로 됐다: 마지막 테스트 정확도가 90% 이상"),
        check_equal("replicas_identical_at_end", len({r["fingerprint"] for r in ranks}), 1,
                    "학습이 끝났을 때 모든 랭크의 파라미터 바이트 해시가 하나뿐이다(비트 단위로 같다)"),
        check_equal("logged_loss_is_global", len({str(r["history"]) for r in ranks}), 1,
                    "손실의 합과 개수를 All-Reduce했으므로 모든 랭크가 같은 전역 손실과 정확도를 기록했다"),
        check_equal("same_resume_epoch", len({r["resumed_from"] for r in ranks}), 1,
                    "모든 랭크가 같은 에폭에서 시작(또는 재개)했다"),
        check_equal("set_epoch_reshuffles", min(len({tuple(r["orders"][e]) for e in observed}) for r in ranks),
                    len(observed), f"set_epoch(epoch)을 부르면 학습한 에폭 {len(observed)}개의 순서가 랭크마다 모두 다르다")
        if len(observed) >= 2 else
        not_applicable("set_epoch_reshuffles", f"이번 실행이 학습한 에폭이 {len(observed)}개라 에폭끼리 순서를 비교할 수 없다"),
        check_equal("no_set_epoch_repeats", max(len({tuple(o) for o in r["orders_without_set_epoch"]}) for r in ranks),
                    1, "set_epoch을 부르지 않으면 모든 에폭이 같은 순서를 쓴다(에폭별 순서의 종류 수)"),
        check_equal("reference_same_samples", mismatched, 0,
                    "한 프로세스 기준 학습의 전역 배치가 랭크들이 실제로 받은 샘플 그대로다(어긋난 에폭 수)")
        if observed else
        not_applicable("reference_same_samples", "체크포인트가 이미 모든 에폭을 끝내 이번 실행이 학습한 에폭이 없다"),
        check_equal("phases_explain_whole_run", [r["run_collectives"] for r in ranks], expected,
                    "학습 전체에서 센 집합 통신이 단계별로 센 통신(생성, 폴더 준비, 스텝, 평가, 로그, 체크포인트)의 합과 같다"
                    "(랭크마다 종류별 횟수)"),
        check_equal("rebuild_broadcast_in_second_step", rebuild, [[int(i == 1) for i in range(len(r))] for r in rebuild],
                    "학습 스텝 중 broadcast는 2번째 스텝에만 있다: 버킷 재구성(랭크마다 스텝별 유무)"),
    ]
    data: TrainData = {
        "summary": {k: main[k] for k in ("world_size", "resumed_from", "fingerprint", "checksum", "params", "history")},
        "reference_history": ref["history"],
        "per_rank_batch": main["per_rank_batch"],
        "global_batch": n * main["per_rank_batch"],
        "param_tolerance": param_tol,
        "phases": main["phases"],
        "run_collectives": main["run_collectives"],
        "steps_per_epoch": main["steps_per_epoch"],
        "epochs_trained": trained,
    }
    return Summary(data, checks)


def resume_tolerance(world_size: int, params: list[float]) -> tuple[float, float]:
    """(parameter, loss) tolerance for a resumed run against an uninterrupted one.

    With N ≤ 2 the two runs must be bit-identical: an All-Reduce of two values is one addition,
    and a + b = b + a exactly. With N ≥ 3 the first step after a restart runs in the bucket layout
    of a *fresh* DDP (parameter order) instead of the rebuilt one (gradient-ready order), which
    changes the order in which the All-Reduce adds the ranks' values, so the last bits may differ.
    """
    if world_size <= 2:
        return 0.0, 0.0
    return ATOL + RTOL * max(abs(v) for v in params), LOSS_ATOL


def compare_runs(resumed: dict, uninterrupted: dict, fail_at_epoch: int, backend: str) -> LabResult:
    """Checks that a run resumed from a checkpoint ends where an uninterrupted one does.

    Both arguments are :func:`labs.ddp.train_script.run_summary` dicts (``result.data["summary"]`` of
    the lab, or the ``RESULT`` line the script prints under torchrun).
    """
    n = resumed["world_size"]
    param_tol, loss_tol = resume_tolerance(n, uninterrupted["params"])
    how = "비트 단위로 같아야 한다" if param_tol == 0 else "float32 허용 오차 안에서 같아야 한다"
    final, ref_final = resumed["history"][-1], uninterrupted["history"][-1]
    checks = [
        check_equal("resumed_from_checkpoint", resumed["resumed_from"], fail_at_epoch - 1,
                    f"재개한 실행은 에폭 {fail_at_epoch} 중간의 고장 직전 체크포인트(끝난 에폭 수)에서 시작했다"),
        check_equal("same_world_size", n, uninterrupted["world_size"],
                    "두 실행의 랭크 수 N이 같다(다르면 데이터 순서가 달라진다)"),
        check_close("same_final_parameters", max_abs_diff(resumed["params"], uninterrupted["params"]), 0.0, param_tol,
                    f"재개한 실행과 끊기지 않은 실행의 최종 파라미터 최대 절대 차이: N={n}이면 {how}"),
        check_close("same_loss_history", _history_diff(resumed["history"], uninterrupted["history"]), 0.0, loss_tol,
                    "에폭별 손실 기록(체크포인트에 담겨 이어진 앞 에폭 포함)의 최대 차이"),
        check_equal("same_test_accuracy", final["correct"], ref_final["correct"],
                    f"마지막 테스트 정확도가 같다(맞힌 샘플 수, 테스트 샘플 {final['total']}개)"),
    ]
    return LabResult("train", n, backend, [], {"resumed": resumed, "uninterrupted": uninterrupted,
                                               "bitwise": resumed["fingerprint"] == uninterrupted["fingerprint"]},
                     {c.name: c for c in checks})


def validate(params: dict, world_size: int) -> None:
    # torchrun 아래에서는 랭크마다 검사한다: 폴더는 랭크 0만 본다(다른 랭크가 보면 랭크 0이 잡은 폴더를 "쓰는 중"으로 본다)
    if params["ckpt_dir"] and os.environ.get("RANK", "0") == "0":
        cfg = TrainConfig(**params)
        conflict = folder_conflict(cfg.ckpt_dir, run_config(cfg, world_size), cfg.fresh)
        if conflict:
            raise LabConfigError(conflict)
    if params["global_batch"] % world_size:
        raise LabConfigError(
            f"인자 global_batch: 랭크 수 N={world_size}로 나누어떨어져야 합니다(랭크마다 B/N개). "
            f"받은 값: {params['global_batch']}. 예: global_batch={world_size * max(1, params['global_batch'] // world_size)}")
    if params["fail_at_epoch"] > params["epochs"]:
        raise LabConfigError(f"fail_at_epoch({params['fail_at_epoch']})는 epochs({params['epochs']}) 이하여야 합니다. "
                             "고장은 학습하는 에폭 안에서만 일으킬 수 있습니다.")


LAB = Lab(
    name="train",
    description="실제 학습 스크립트를 N개 랭크에서 돌린 DDP 학습이 한 프로세스의 전역 배치 학습과 같은 파라미터·손실·정확도에 "
                "도달하는지, set_epoch이 에폭마다 순서를 바꾸는지, 체크포인트에서 재개하는지 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=6,
    # 범위는 잰 만큼: 이 안에서는 한 프로세스 학습이 테스트 정확도 90% 이상에 닿는다(에폭 2·20, B 48·128,
    # η 0.1·0.2의 모든 조합에서 92.4% 이상). 밖에서는 작은 모델이 90%에 못 닿거나(η가 작고 B가 크고 에폭이 적을 때)
    # 발산한다(η가 크고 B가 작을 때).
    params={"epochs": Int(6, min=2, max=20, help="에폭 수"),
            "global_batch": Int(96, min=48, max=128, help="전역 배치 B (N으로 나누어떨어져야 함)"),
            "lr": Float(0.1, min=0.1, max=0.2, help="학습률 η"),
            "seed": seed(),
            "ckpt_dir": Folder("", writes=FOLDER_FILES, help="체크포인트 폴더 (비우면 저장하지 않음)"),
            "fail_at_epoch": Int(0, min=0, max=20, help="이 에폭 중간에 랭크 하나를 죽인다 (0이면 고장 없음)"),
            "fresh": Bool(False, help="체크포인트 폴더의 옛 체크포인트를 지우고 처음부터 학습")},
    validate=validate,
    record=TrainRecord,
    data=TrainData,
)
