"""Chapter 11 lab: three common misconceptions about DDP, each refuted on real ranks.

One lab, three parts (``parts`` picks which ones run; the chapter reuses the ``forward`` and
``update`` labs for the other two misconceptions):

``sharding``
    "DDP splits the model over the GPUs." Every rank trains one Adam step with DDP and
    counts the elements and bytes it holds for parameters, gradients and optimizer state.
    The same model is then sharded for real with ``torch.distributed.fsdp.fully_shard``
    (which does split them), measured the same way.
``drift``
    "The gradients need not be combined." The same model is trained twice from the same
    start: under DDP, and as a bare module per rank (no gradient synchronization at all).
    Every step records the parameters and each replica's loss on the full data set.
``dataparallel``
    "DDP and DataParallel are the same." DDP runs one process per rank; every forward is
    recorded with its PID and thread. Then rank 0 alone runs ``torch.nn.DataParallel``
    over every GPU it sees (on a CPU machine: none), counting its per-step scatter,
    replicate, parallel_apply and gather calls and the threads its replicas run in.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, TypedDict

import torch

from ..context import Described, RankContext
from ..ddp.update import train_replica
from ..params import Choice, Float, Int, ListOf, seed
from ..registry import Lab
from ..result import Check, RankRecords, Summary, check_at_most, check_close, check_equal, check_true
from ..tools.dataparallel import DP_STEPS, dataparallel_part, sharding_model
from ..tools.models import (
    adam_step_memory,
    count_parameters,
    fingerprint,
    rank_batch,
    shard_with_fsdp,
    synthetic_regression,
    wrap_ddp,
)

PARTS = ("sharding", "drift", "dataparallel")
MEMORY_KINDS = ("params", "grads", "optimizer_state")
# 동기화하지 않은 복제본 사이의 L2 거리가 넘어야 하는 값: float32 반올림이 만드는 거리(파라미터 노름의 1e-7 배 정도)보다
# 뚜렷이 크다. 인자 범위의 가장 느린 구석(η 0.01, B/N 1024, 2스텝)에서도 갈라짐이 이보다 크다(잰 값은 이 파일의 테스트)
DRIFT_THRESHOLD = 1e-5


def wanted_parts(parts: tuple[str, ...]) -> list[str]:
    """The parts named in ``parts``, once each, in the lab's order."""
    return [p for p in PARTS if p in parts]


# --- 1) sharding: DDP holds everything on every rank, FSDP holds ~1/N --------------------------

def sharding_part(ctx: RankContext, hidden: int, per_rank_batch: int, lr: float, seed: int) -> dict:
    torch.manual_seed(seed)
    model = sharding_model(hidden).to(ctx.device)
    data = synthetic_regression(ctx.world_size * per_rank_batch, in_features=16, out_features=8, seed=seed)
    x, y = (t.to(ctx.device) for t in rank_batch(*data, ctx.rank, ctx.world_size, per_rank_batch))
    ddp = wrap_ddp(copy.deepcopy(model), ctx.device)
    fsdp = shard_with_fsdp(copy.deepcopy(model), ctx.device, ctx.world_size)
    return {"n_params": count_parameters(model), "element_size": 4,
            "ddp": adam_step_memory(ddp, x, y, lr), "fsdp": adam_step_memory(fsdp, x, y, lr),
            "ddp_fingerprint": fingerprint(ddp.module)}


# --- 2) drift: without gradient synchronization the replicas drift apart -------------------------

def drift_part(ctx: RankContext, steps: int, per_rank_batch: int, batches_per_epoch: int, lr: float,
               seed: int) -> dict:
    data = synthetic_regression(ctx.world_size * per_rank_batch * batches_per_epoch, seed=seed)
    args = (data, steps, per_rank_batch, batches_per_epoch, lr, seed)
    return {"ddp": train_replica(ctx, True, *args), "unsynced": train_replica(ctx, False, *args),
            "dataset_size": len(data[0])}


# --- 3) DataParallel: one process with threads vs one process per rank ------------------------

class MythsRecord(Described):
    """What each rank of the 'myths' lab returns."""

    sharding: dict[str, Any] | None  # None: 실행하지 않은 부분
    drift: dict[str, Any] | None
    dataparallel: dict[str, Any] | None


def rank_fn(ctx: RankContext, parts: tuple[str, ...], hidden: int, per_rank_batch: int, steps: int,
            batches_per_epoch: int, lr: float, lr_adam: float, seed: int) -> MythsRecord:
    ran = wanted_parts(parts)  # 실행하지 않은 부분은 None (이 순서대로 실행한다)
    return {**ctx.describe(),
            "sharding": sharding_part(ctx, hidden, per_rank_batch, lr_adam, seed) if "sharding" in ran else None,
            "drift": drift_part(ctx, steps, per_rank_batch, batches_per_epoch, lr, seed) if "drift" in ran else None,
            "dataparallel": (dataparallel_part(ctx, hidden, per_rank_batch, DP_STEPS, lr, seed)
                             if "dataparallel" in ran else None)}


# --- summarize ----------------------------------------------------------------------------------

def memory_table(ranks: RankRecords) -> dict:
    """Per wrapper and kind: the numel and bytes every rank holds, in rank order."""
    return {wrapper: {kind: [r["sharding"][wrapper][kind] for r in ranks] for kind in MEMORY_KINDS}
            for wrapper in ("ddp", "fsdp")}


def _ops(items: list[dict]) -> list[str]:
    return sorted({it["op"] for it in items})


def sharding_checks(ranks: RankRecords) -> tuple[list[Check], dict]:
    n, total = len(ranks), ranks[0]["sharding"]["n_params"]
    mem = memory_table(ranks)
    ddp_params = sorted({m["numel"] for m in mem["ddp"]["params"]})
    ddp_grads = sorted({m["numel"] for m in mem["ddp"]["grads"]})
    ddp_adam = sorted({m["numel"] for m in mem["ddp"]["optimizer_state"]})
    fsdp_params = [m["numel"] for m in mem["fsdp"]["params"]]
    fsdp_grads = [m["numel"] for m in mem["fsdp"]["grads"]]
    # FSDP는 각 파라미터를 0번 차원으로 N등분하며 나누어떨어지지 않으면 뒤쪽을 패딩한다: 랭크당 한 행씩 더 가질 수 있다
    slack = sum(shape[1] if len(shape) > 1 else 1 for shape in ranks[0]["sharding"]["ddp"]["shapes"])
    largest = max(fsdp_params)
    n_tensors = len(ranks[0]["sharding"]["ddp"]["shapes"])
    # Adam 상태 = exp_avg, exp_avg_sq (파라미터와 같은 모양) + 텐서마다 step 스칼라 1개(FSDP에서도 랭크마다 하나씩)
    fsdp_moments = sum(m["numel"] - n_tensors for m in mem["fsdp"]["optimizer_state"])
    ddp_phase_ops = [_ops(r["sharding"]["ddp"]["forward"]) for r in ranks]
    fsdp_forward = [_ops(r["sharding"]["fsdp"]["forward"]) for r in ranks]
    checks = [
        check_equal("ddp_full_params_every_rank", ddp_params, [total],
                    f"DDP: 모든 랭크가 파라미터 {total}개 전부를 가진다(랭크별 원소 수의 종류)"),
        check_equal("ddp_full_grads_every_rank", ddp_grads, [total],
                    "DDP: 모든 랭크가 그래디언트도 전부 가진다(랭크별 원소 수의 종류)"),
        check_equal("ddp_full_adam_state_every_rank", ddp_adam, [2 * total + n_tensors],
                    "DDP: 모든 랭크가 Adam 상태(exp_avg, exp_avg_sq = 파라미터 수의 2배, 텐서마다 step 1개)를 전부 가진다"),
        check_equal("ddp_replicas_identical", len({r["sharding"]["ddp_fingerprint"] for r in ranks}), 1,
                    "DDP: 한 스텝 뒤 모든 랭크의 파라미터가 같다(지문 종류 수): 나눈 것이 아니라 같은 것을 N벌 가진다"),
        check_equal("fsdp_shards_cover_model", sum(fsdp_params), total,
                    f"FSDP: 랭크들이 가진 파라미터 샤드를 모두 더하면 정확히 {total}개다(겹침도 빠짐도 없다)"),
        check_equal("fsdp_grads_sharded_like_params", fsdp_grads, fsdp_params,
                    "FSDP: 각 랭크는 자기 파라미터 샤드의 그래디언트만 가진다(랭크별 원소 수가 파라미터 샤드와 같다)"),
        check_close("fsdp_per_rank_fraction", largest / total, 1 / n, slack / total,
                    f"FSDP: 가장 많이 가진 랭크의 파라미터 비율 ≈ 1/N = {1 / n:.3f} "
                    "(허용 오차 = 텐서마다 0번 차원 한 행씩의 패딩 여유)"),
        check_equal("fsdp_adam_moments_sum_to_ddp", fsdp_moments, 2 * total,
                    f"FSDP: 모든 랭크의 exp_avg·exp_avg_sq 샤드를 더하면 DDP 한 랭크가 혼자 가진 양(2 × {total})과 같다"),
        check_equal("ddp_forward_no_collective", sum(len(o) for o in ddp_phase_ops), 0,
                    "DDP: 이 첫 순전파에는 집합 통신이 없다(랭크 합계)"),
        check_equal("fsdp_forward_all_gathers", sorted({op for ops in fsdp_forward for op in ops}),
                    ["all_gather"] if n > 1 else [],
                    "FSDP: 순전파마다 파라미터 샤드를 all_gather로 모은다(순전파의 집합 통신 종류; N=1이면 모을 조각이 없어 없음)"),
    ]
    data = {"n_params": total, "memory": mem, "slack": slack,
            "collectives": {w: {p: ranks[0]["sharding"][w][p] for p in ("forward", "backward")}
                            for w in ("ddp", "fsdp")}}
    return checks, data


def pairwise_drift(ranks: RankRecords, run: str) -> list[float]:
    """Per step: the largest L2 distance ‖w_a − w_b‖ between any two ranks' parameters."""
    params = [torch.tensor(r["drift"][run]["params"], dtype=torch.float64) for r in ranks]
    steps = len(params[0])
    pairs = list(itertools.combinations(range(len(params)), 2))
    return [max((float((params[a][s] - params[b][s]).norm()) for a, b in pairs), default=0.0) for s in range(steps)]


def drift_checks(ranks: RankRecords, threshold: float) -> tuple[list[Check], dict]:
    n = len(ranks)
    drift = {run: pairwise_drift(ranks, run) for run in ("ddp", "unsynced")}
    losses = {run: [r["drift"][run]["full_loss"] for r in ranks] for run in ("ddp", "unsynced")}
    ddp_final = losses["ddp"][0][-1]
    unsynced_final = [row[-1] for row in losses["unsynced"]]
    unsynced_mean = sum(unsynced_final) / n
    grows = drift["unsynced"][-1] > threshold if n > 1 else drift["unsynced"][-1] == 0.0
    checks = [
        check_close("ddp_drift_zero", max(drift["ddp"]), 0.0, 0.0,
                    "DDP: 모든 스텝에서 두 랭크 사이 파라미터 거리(최대 L2)가 정확히 0이다"),
        check_true("unsynced_drift_grows", grows, drift["unsynced"][-1],
              f"동기화 없음: 마지막 스텝의 최대 L2 거리가 {threshold:g}보다 크다(같은 점에서 출발했는데도; N=1이면 0)"),
        check_equal("unsynced_replicas_differ", len({r["drift"]["unsynced"]["fingerprint"] for r in ranks}), n,
                    "동기화 없음: 마지막에 랭크마다 파라미터가 모두 다르다(지문 종류 수 = N)"),
        check_equal("ddp_same_full_loss_on_all_ranks", len({row[-1] for row in losses["ddp"]}), 1,
                    "DDP: 전체 데이터에 대한 마지막 손실이 모든 랭크에서 같다(값의 종류 수)"),
        check_at_most("ddp_not_worse_than_replicas", ddp_final, unsynced_mean * (1 + 1e-6),
              "전체 데이터에 대한 마지막 손실: DDP ≤ 동기화 없이 학습한 복제본들의 평균 손실(기준 = 그 평균; N=1이면 같다)"),
    ]
    data = {"drift": drift, "full_loss": losses, "ddp_final_loss": ddp_final,
            "unsynced_final_losses": unsynced_final, "dataset_size": ranks[0]["drift"]["dataset_size"],
            "threshold": threshold}
    return checks, data


def dataparallel_checks(ranks: RankRecords, steps: int) -> tuple[list[Check], dict]:
    n = len(ranks)
    dp = ranks[0]["dataparallel"]["dataparallel"]
    ddp_where = [r["dataparallel"] for r in ranks]
    on_main = all(w == [r["pid"], r["main_thread"]] for r in ddp_where for w in r["forward_where"])
    measured = len(dp["device_ids"]) >= 2
    checks = [
        check_equal("ddp_one_process_per_rank", len({r["pid"] for r in ddp_where}), n,
                    "DDP: 랭크마다 서로 다른 OS 프로세스(PID 종류 수 = N)"),
        check_equal("ddp_forward_in_own_main_thread", on_main, True,
                    "DDP: 모든 순전파가 그 랭크 프로세스의 메인 스레드에서 실행됐다(스레드를 만들지 않는다)"),
        check_equal("dataparallel_single_process", sorted({w[0] for w in dp["forward_where"]}), [dp["pid"]],
                    "DataParallel: 모든 순전파가 프로세스 하나(랭크 0의 PID) 안에서 실행됐다"),
    ]
    if not dp["device_ids"]:
        checks.append(check_equal("dataparallel_cpu_calls_module", [sum(dp["calls"].values()), dp["output_equals_module"]],
                                  [0, True], "GPU가 없으면 DataParallel은 감싼 모듈을 그대로 부른다"
                                  "(scatter·replicate·parallel_apply·gather 호출 수 0, 출력이 모듈과 비트 단위로 같음)"))
    if measured:
        threads = {w[1] for w in dp["forward_where"]}
        checks += [
            check_equal("dataparallel_replicates_every_step", [dp["calls"][k] for k in ("scatter", "replicate", "gather")],
                        [steps] * 3, "DataParallel: 스텝마다 입력 scatter, 모델 replicate, 출력 gather를 한 번씩 한다"),
            check_true("dataparallel_threads", len(threads) >= len(dp["device_ids"]) and dp["main_thread"] not in threads,
                  len(threads), "DataParallel: 복제본의 순전파가 GPU마다 따로 만든 스레드에서 실행됐다(스레드 종류 수)"),
        ]
    data = {"dataparallel_measured": measured, "gpus": dp["gpus"], "device_ids": dp["device_ids"],
            "calls": dp["calls"], "dp_step_seconds": dp["step_seconds"],
            "ddp_step_seconds": [max(col) for col in zip(*(r["ddp_step_seconds"] for r in ddp_where))],
            "processes": [{"rank": r["rank"], "pid": w["pid"], "ppid": w["ppid"], "threads": w["threads_alive"],
                           "forward_calls": len(w["forward_where"])} for r, w in zip(ranks, ddp_where)],
            "dp_pid": dp["pid"], "dp_forward_calls": len(dp["forward_where"]),
            "dp_forward_threads": len({w[1] for w in dp["forward_where"]})}
    return checks, data


class MythsData(TypedDict):
    """The summary data of the 'myths' lab."""

    parts: list[str]
    sharding: dict[str, Any] | None  # None: 실행하지 않은 부분
    drift: dict[str, Any] | None
    dataparallel: dict[str, Any] | None


def summarize(ranks: list[MythsRecord], backend: str, params: dict[str, Any]) -> Summary[MythsData]:
    checks: list[Check] = []
    data: MythsData = {"parts": wanted_parts(params["parts"]), "sharding": None, "drift": None, "dataparallel": None}
    if "sharding" in data["parts"]:
        part_checks, data["sharding"] = sharding_checks(ranks)
        checks += part_checks
    if "drift" in data["parts"]:
        part_checks, data["drift"] = drift_checks(ranks, DRIFT_THRESHOLD)
        checks += part_checks
    if "dataparallel" in data["parts"]:
        part_checks, data["dataparallel"] = dataparallel_checks(ranks, DP_STEPS)
        checks += part_checks
    return Summary(data, checks)


LAB = Lab(
    name="myths",
    description=("자주 하는 오해 셋을 실제 랭크로 반박: DDP는 모델을 나누지 않고(FSDP와 비교), 그래디언트를 합치지 않으면 "
                 "복제본이 갈라지며, DataParallel은 한 프로세스의 스레드로 돈다"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=11,
    params={"parts": ListOf(Choice(PARTS[0], PARTS), PARTS, max_len=len(PARTS), help="실행할 부분"),
            "hidden": Int(64, min=1, max=4096, help="은닉층 너비"),
            "per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N"),
            "steps": Int(60, min=2, max=1000, help="drift 부분의 학습 스텝 수"),
            "batches_per_epoch": Int(2, min=1, max=100, help="에폭당 배치 수"),
            "lr": Float(0.1, min=0.01, max=0.1, help="SGD 학습률 (0.2면 B/N=1, 1000스텝에서 동기화 없는 복제본이 발산한다)"),
            "lr_adam": Float(0.01, min=0.0, max=10.0, min_open=True, help="Adam 학습률"),
            "seed": seed()},
    record=MythsRecord,
    data=MythsData,
)
