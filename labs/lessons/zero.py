"""Chapter 13 lab: ZeRO stage 1 — the optimizer state divided over the ranks, measured.

The same MLP is trained S steps from the same start, on every rank, four ways: one process on the
global batch (no DDP), plain DDP, DDP + :class:`labs.ddp.ShardedOptimizer` (the reference the reader
builds) and DDP + torch's ``ZeroRedundancyOptimizer``, each with SGD (momentum) and AdamW. Each rank
records:

* memory by storage accounting (the distinct storages' ``nbytes``) for parameters, gradients and
  optimizer state after the last step: under DDP every rank holds the whole state, under ZeRO-1
  only the state of the parameters it owns (the assignment is recorded to check the exact sizes);
  and DDP's own flat buckets (with its default ``gradient_as_bucket_view=False`` a second copy of
  every gradient, under ZeRO-1 too, since it runs under DDP);
* the parameters (compared on the rank, recorded as differences) and their fingerprint;
* the collectives each ``optimizer.step()`` issued and the bytes they carried (numel × element size).

``mistake`` swaps the reference for a broken variant that readers write, each caught by named checks
(``MISTAKE_FAILS``): ``step_all_params`` steps every parameter on every rank (results right, state not
divided), ``no_share`` never broadcasts (replicas diverge), ``wrong_owner`` broadcasts every parameter
from rank 0 (the other ranks' updates are overwritten by rank 0's stale copy).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, TypedDict, cast

import torch

from ..context import Described, RankContext
from ..ddp import ShardedOptimizer
from ..ddp.zero_bugs import BUGS
from ..params import Choice, Int
from ..registry import Lab
from ..result import Summary, check_at_most, check_close, check_equal, largest, not_applicable
from ..tools.comms import CollectiveCounter, carried_bytes
from ..tools.models import (
    ddp_bucket_bytes,
    fingerprint,
    flat_parameters,
    layer_stack,
    mse_backward,
    rank_batch,
    storage_bytes,
    synthetic_regression,
    wrap_ddp,
)
from ..tools.optim_state import OPTIMIZERS, state_tensors, train_single, training_params
from ..tools.primitives import ATOL, RTOL, max_abs_diff  # 5장과 같은 기준

WRAPPERS = ("ddp", "sharded", "zero")  # 평범한 DDP, DDP + ShardedOptimizer, DDP + ZeroRedundancyOptimizer
KINDS = ("params", "grads", "state")
NEEDS_TWO_RANKS = ("sharded_replicas_identical", "assignment_same_on_every_rank")  # N=1이면 해당 없음


# mistake= 값마다 쓰는 클래스: 참조 구현과, 갤러리(labs/ddp/zero_bugs.py의 BUGS)에서 이 실습이 재는 실수
SHARDED: dict[str, type[ShardedOptimizer]] = {"none": ShardedOptimizer,
                                        **{bug.mistake: cls for cls, bug in BUGS.items() if bug.mistake}}
# 실수마다 이 실습에서 실패하는 확인(N=2): 테스트가 정확히 이 집합을 확인한다
MISTAKE_FAILS = {
    "step_all_params": {"sharded_state_matches_assignment"},
    "no_share": {"sharded_matches_single", "sharded_equals_ddp", "sharded_replicas_identical",
                 "sharded_step_broadcasts_each_param", "sharded_step_sends_param_bytes"},
    "wrong_owner": {"sharded_matches_single", "sharded_equals_ddp"},
}


# --- rank side -------------------------------------------------------------------------------------

def build(wrapper: str, model: torch.nn.Module, opt: str, lr: float, mistake: str) -> Any:
    """The optimizer of ``wrapper`` (``sharded``, ``zero``; anything else: plain ``opt``) over ``model``: a
    ShardedOptimizer (``owner``), torch's ZeroRedundancyOptimizer (``optim``, ``_param_to_rank``) or a torch optimizer."""
    cls, kwargs = OPTIMIZERS[opt]
    if wrapper == "sharded":
        return SHARDED[mistake](model.parameters(), cls, lr=lr, **kwargs)
    if wrapper == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer  # 여기서만: 불러오는 데 0.6초(TorchScript)

        return ZeroRedundancyOptimizer(model.parameters(), cls, lr=lr, **kwargs)
    return cls(model.parameters(), lr=lr, **kwargs)


def train(ctx: RankContext, wrapper: str, init: torch.nn.Module, batches: list, opt: str, lr: float,
          mistake: str) -> tuple[torch.nn.Module, dict]:
    """S steps of ``wrapper`` from a copy of ``init``; the collectives of each ``optimizer.step()``."""
    model = copy.deepcopy(init)
    ddp = wrap_ddp(model, ctx.device)
    optimizer = build(wrapper, model, opt, lr, mistake)
    steps = []
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        mse_backward(ddp, x, y)  # DDP: 그래디언트 평균은 여기서 끝난다
        with CollectiveCounter() as counter:
            optimizer.step()  # 이 안에서 일어난 집합 통신만 센다
        steps.append({"ops": dict(Counter(item["op"] for item in counter.items)),
                      "bytes": carried_bytes(counter.items)})
    params = list(model.parameters())
    memory = {"params": storage_bytes(params), "grads": storage_bytes(p.grad for p in params if p.grad is not None),
              "state": storage_bytes(state_tensors(optimizer.optim.state if wrapper == "zero" else optimizer.state))}
    record: dict[str, Any] = {"memory": memory, "steps": steps, "fingerprint": fingerprint(model)}
    if wrapper == "sharded":
        record["owners"] = [optimizer.owner[p] for p in params]
    if wrapper == "zero":
        record["owners"] = [optimizer._param_to_rank[p] for p in params]  # torch가 정한 분할
    return model, record


class ZeRORecord(Described):
    """What each rank of the 'zero' lab returns."""

    numels: list[int]
    ddp_buckets: dict[str, int]
    sgd: dict[str, dict[str, Any]]
    adamw: dict[str, dict[str, Any]]


def rank_fn(ctx: RankContext, width: int, depth: int, per_rank_batch: int, steps: int, lr: float, mistake: str,
            seed: int) -> ZeRORecord:
    n = ctx.world_size
    x, y = synthetic_regression(steps * n * per_rank_batch, width, width, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    mine = [rank_batch(x, y, ctx.rank, n, per_rank_batch, s) for s in range(steps)]
    everyone = [rank_batch(x, y, 0, 1, n * per_rank_batch, s) for s in range(steps)]  # 한 프로세스: 전역 배치
    torch.manual_seed(seed)
    init = layer_stack(width, depth).to(ctx.device)
    record: dict[str, Any] = {**ctx.describe(), "numels": [p.numel() for p in init.parameters()],
                              "ddp_buckets": ddp_bucket_bytes(init, ctx.device, *mine[0])}
    for opt in OPTIMIZERS:
        single, ref = train_single(init, everyone, opt, lr)
        models, runs = {}, {}
        for wrapper in WRAPPERS:
            models[wrapper], runs[wrapper] = train(ctx, wrapper, init, mine, opt, lr, mistake)
        # 파라미터 비교는 랭크 안에서: 기록에는 차이(최대 절대 차이)와 지문만 남긴다
        flat = {name: flat_parameters(m) for name, m in {**models, "single": single}.items()}
        ref["diff"] = {f"{a}_vs_{b}": max_abs_diff(flat[a], flat[b])
                       for a, b in (("sharded", "single"), ("ddp", "single"), ("sharded", "ddp"), ("zero", "ddp"))}
        ref["max_abs_w"] = float(flat["single"].abs().max())
        record[opt] = {"single": ref, **runs}
    return cast(ZeRORecord, record)


# --- summary -------------------------------------------------------------------------------------

def shard_state(per_param: list[int], owners: list[int], n: int) -> list[int]:
    """Per rank: the state bytes one process holds for the parameters the rank owns."""
    return [sum(b for b, o in zip(per_param, owners) if o == r) for r in range(n)]


class ZeROData(TypedDict):
    """The summary data of the 'zero' lab."""

    n_params: int
    n_tensors: int
    memory: dict[str, dict[str, dict]]
    single_state_bytes: int
    expected_state: dict[str, list[int]]
    state_fraction: dict[str, float]
    shard_elements: list[int]
    diffs: dict[str, dict[str, float]]
    step_bytes: dict[str, list[int]]
    step_ops: dict[str, list[dict]]
    tolerance: float
    bytes_per_param: dict[str, dict[str, float]]
    ddp_bucket_bytes: int


def summarize(ranks: list[ZeRORecord], backend: str, params: dict[str, Any]) -> Summary[ZeROData]:
    n, numels = len(ranks), ranks[0]["numels"]
    total, n_tensors = sum(numels), len(numels)
    adamw = [r["adamw"] for r in ranks]
    single = adamw[0]["single"]
    single_state = sum(single["state_per_param"])
    memory = {opt: {w: {k: [r[opt][w]["memory"][k] for r in ranks] for k in KINDS} for w in WRAPPERS}
              for opt in OPTIMIZERS}
    expected = {w: [shard_state(single["state_per_param"], a[w]["owners"], n)[r] for r, a in enumerate(adamw)]
                for w in ("sharded", "zero")}
    owners = ranks[0]["adamw"]["sharded"]["owners"]
    shard_elements = [sum(e for e, o in zip(numels, owners) if o == r) for r in range(n)]
    fraction = max(shard_elements) / total
    diffs = {opt: {k: largest(r[opt]["single"]["diff"][k] for r in ranks) for k in ranks[0][opt]["single"]["diff"]}
             for opt in OPTIMIZERS}
    bitwise = {k: max(diffs[opt][k] for opt in OPTIMIZERS) for k in ("sharded_vs_ddp", "zero_vs_ddp")}
    step_ops = {w: sorted({tuple(sorted(s["ops"].items())) for r in ranks for opt in OPTIMIZERS
                           for s in r[opt][w]["steps"]}) for w in WRAPPERS}
    step_bytes = {w: sorted({s["bytes"] for r in ranks for opt in OPTIMIZERS for s in r[opt][w]["steps"]})
                  for w in WRAPPERS}
    moments = single["state_by_key"].get("exp_avg", 0) + single["state_by_key"].get("exp_avg_sq", 0)
    whole = sorted({memory[opt][w][k][r] for opt in OPTIMIZERS for w in WRAPPERS for k in ("params", "grads")
                    for r in range(n)})
    # 한 프로세스와는 float32 합 순서만 다르다(전역 배치의 평균 한 번 대 랭크별 평균의 All-Reduce 평균). 허용 오차
    # 안에서 같은 것은 SGD(모멘텀)다. AdamW는 업데이트를 그래디언트 크기(√v)로 나누므로 작은 그래디언트 원소의 반올림
    # 차이가 lr 크기의 차이로 남고 층을 지나며 커진다: width 512에서 6e-5, lr 0.1·20스텝에서 9e-4(N=2로 잰 DDP와
    # 한 프로세스의 차이이고 ZeRO와는 무관하다). 그래서 AdamW의 같음은 평범한 DDP와의 비트 단위 비교로 보이고 차이는 data에
    tol = ATOL + RTOL * largest(r["sgd"]["single"]["max_abs_w"] for r in ranks)
    checks = [
        check_equal("adamw_state_8_bytes_per_param", moments / total, 8.0,
                    "한 프로세스의 AdamW 상태: exp_avg와 exp_avg_sq가 float32 파라미터 하나에 8바이트"
                    "(두 모멘트의 바이트 / 파라미터 수; 텐서마다 step 4바이트는 따로)"),
        check_equal("params_grads_whole_every_rank", whole, [4 * total],
                    f"세 방식 모두 모든 랭크가 파라미터와 그래디언트를 통째로 가진다: ZeRO-1은 이것을 나누지 않는다"
                    f"(랭크·방식별 바이트의 종류, 4 × {total})"),
        check_equal("ddp_buckets_copy_the_gradients", sorted({b for r in ranks for b in r["ddp_buckets"].values()}),
                    [4 * total], "기본 DDP(gradient_as_bucket_view=False)는 그래디언트와 따로 그래디언트 전체 크기의 평평한 "
                    f"버킷을 가진다: 버킷 바이트 = 그래디언트 바이트 = 4 × {total}(랭크마다, 통신 훅이 받은 버킷 텐서의 저장소)"),
        check_equal("ddp_state_equals_single", sorted(set(memory["adamw"]["ddp"]["state"])), [single_state],
                    "평범한 DDP: 모든 랭크의 AdamW 상태 바이트가 한 프로세스와 같다. N이 늘어도 줄지 않는다"),
        check_equal("sharded_state_matches_assignment", memory["adamw"]["sharded"]["state"], expected["sharded"],
                    "ShardedOptimizer: 랭크마다 상태 바이트가 정확히 자기가 맡은 파라미터의 상태만큼이다"
                    "(랭크별 바이트 = 배정에서 계산한 샤드 크기)"),
        check_at_most("shard_fraction_near_one_over_n", fraction, 1 / n + max(numels) / total,
                      f"가장 많이 맡은 랭크의 파라미터 비율 ≈ 1/N = {1 / n:.3f}: 큰 것부터 가장 적게 가진 랭크에 주면 "
                      "1/N보다 많아야 가장 큰 텐서 하나만큼이다(기준 = 1/N + 가장 큰 텐서 / 전체)"),
        check_equal("assignment_same_as_zero_redundancy", [r["adamw"]["sharded"]["owners"] for r in ranks],
                    [r["adamw"]["zero"]["owners"] for r in ranks],
                    "ShardedOptimizer의 배정(크기순 탐욕)이 torch ZeroRedundancyOptimizer의 분할과 같다(파라미터마다 주인 랭크)"),
        check_equal("zero_redundancy_state_matches_partition", memory["adamw"]["zero"]["state"], expected["zero"],
                    "ZeroRedundancyOptimizer도 랭크마다 자기 분할의 상태만 가진다(랭크별 바이트 = 분할에서 계산한 샤드 크기)"),
        check_close("sharded_matches_single", diffs["sgd"]["sharded_vs_single"], 0.0, tol,
                    f"SGD(모멘텀) {params['steps']}스텝 뒤 DDP + ShardedOptimizer의 파라미터가 전역 배치 한 "
                    f"프로세스와 atol {ATOL:g} + rtol {RTOL:g}·max|w| 안에서 같다: float32 합 순서만 다르다(최대 절대 차이)"),
        check_close("sharded_equals_ddp", bitwise["sharded_vs_ddp"], 0.0, 0.0,
                    "SGD와 AdamW 모두 평범한 DDP와 비트 단위로 같다: 같은 평균 그래디언트로 같은 계산을 하고, "
                    "하는 랭크만 다르다(최대 절대 차이)"),
        check_close("zero_redundancy_equals_ddp", bitwise["zero_vs_ddp"], 0.0, 0.0,
                    "ZeroRedundancyOptimizer도 SGD와 AdamW 모두 평범한 DDP와 비트 단위로 같다(최대 절대 차이)"),
        check_equal("ddp_step_no_collectives", step_ops["ddp"], [()],
                    "평범한 DDP의 optimizer.step()은 집합 통신을 하지 않는다(스텝마다 센 집합 통신의 종류)"),
        check_equal("sharded_step_broadcasts_each_param", step_ops["sharded"], [(("broadcast", n_tensors),)],
                    f"ShardedOptimizer.step()은 파라미터 텐서마다 broadcast를 한 번 한다({n_tensors}개, 모든 랭크·스텝)"),
        check_equal("sharded_step_sends_param_bytes", step_bytes["sharded"], [4 * total],
                    "그 broadcast가 나른 바이트(원소 수 × 원소 크기의 합)가 파라미터 바이트와 같다: "
                    "파라미터마다 주인이 한 번 보낸다"),
        check_equal("zero_redundancy_step_sends_param_bytes", step_bytes["zero"], [4 * total],
                    "ZeroRedundancyOptimizer.step()의 broadcast도 파라미터 바이트만큼 나른다"),
    ]
    if n == 1:
        reason = "N=1이면 비교할 다른 랭크가 없다"
        checks += [not_applicable(name, reason) for name in NEEDS_TWO_RANKS]
    else:
        distinct = max(len({r[opt]["sharded"]["fingerprint"] for r in ranks}) for opt in OPTIMIZERS)
        checks += [
            check_equal("sharded_replicas_identical", distinct, 1,
                        "스텝 뒤 모든 랭크의 파라미터가 비트 단위로 같다(옵티마이저마다 서로 다른 지문 수의 최댓값)"),
            check_equal("assignment_same_on_every_rank",
                        len({tuple(r["adamw"]["sharded"]["owners"]) for r in ranks}), 1,
                        "모든 랭크가 통신 없이 같은 배정을 계산한다(서로 다른 배정의 수)"),
        ]
    # 파라미터 하나의 바이트(13.2절 메모리 계산기가 쓰는 값): DDP 랭크 0의 파라미터·그래디언트·버킷과 한 프로세스의
    # 원소별 옵티마이저 상태(텐서마다 스칼라 하나인 step은 파라미터 수와 무관하므로 뺀다)
    bytes_per_param = {opt: {"params": memory[opt]["ddp"]["params"][0] / total,
                             "grads": memory[opt]["ddp"]["grads"][0] / total,
                             "buckets": ranks[0]["ddp_buckets"]["buckets"] / total,
                             "state": ranks[0][opt]["single"]["elementwise_state"] / total} for opt in OPTIMIZERS}
    data: ZeROData = {"n_params": total, "n_tensors": n_tensors, "memory": memory, "single_state_bytes": single_state,
            "expected_state": expected, "state_fraction": {w: max(memory["adamw"][w]["state"]) / single_state
                                                           for w in WRAPPERS},
            "shard_elements": shard_elements, "diffs": diffs, "step_bytes": step_bytes,
            "step_ops": {w: [dict(o) for o in ops] for w, ops in step_ops.items()}, "tolerance": tol,
            "bytes_per_param": bytes_per_param, "ddp_bucket_bytes": ranks[0]["ddp_buckets"]["buckets"]}
    return Summary(data, checks)


LAB = Lab(
    name="zero",
    description=("ZeRO-1: 옵티마이저 상태를 랭크마다 1/N씩 나눠 가져도(ShardedOptimizer, ZeroRedundancyOptimizer) "
                 "결과는 DDP와 같고, 스텝마다 파라미터 바이트만큼 broadcast하는지 측정"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=13,
    params=training_params(Int(8, min=1, max=32, help="Linear 층 수(텐서가 많을수록 고르게 나뉜다)"),
                           Choice("none", tuple(SHARDED), help="일부러 넣는 실수")),
    record=ZeRORecord,
    data=ZeROData,
)
