"""Chapter 7 lab: cutting DDP's communication and its gradient copy, on real ranks.

Two things DDP offers beyond the default All-Reduce, each measured:

* ``powersgd``: a Linear(256, 256) layer trained with the default hook and with ``powerSGD_hook``
  (rank r approximation P·Qᵀ of each weight gradient, bias sent as is), once with error feedback
  and once without (warm start on in both). The first ``start_iter`` steps the hook runs the plain
  All-Reduce (the profiler counts one All-Reduce of every element); after that the kernel counts
  the bytes each rank writes per step (``/proc/self/io`` wchar), next to the element counts torch's
  own ``PowerSGDState.compression_stats()`` reports. The approximation is lossy, so the parameters
  differ from the default hook's after the steps; error feedback (the dropped residual is added to
  the next step's gradient) keeps them closer.
* ``bucket_view``: a two-layer model in two buckets, trained a few steps with
  ``gradient_as_bucket_view`` False or True and ``zero_grad(set_to_none=...)`` False or True. A
  pass-through comm hook records each bucket's storage; the distinct storages behind the gradients
  and buckets give the bytes held, and the profiler counts the reducer's copies between gradient
  and bucket in the last backward.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, TypedDict

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from ..context import Described, RankContext
from ..params import Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_at_least, check_at_most, check_close, check_equal, not_applicable
from ..tools.comms import CollectiveCounter, settle_collectives, written_bytes
from ..tools.models import (
    fingerprint,
    flat_parameters,
    layer_stack,
    mse_backward,
    rank_batch,
    storage_bytes,
    synthetic_regression,
    wrap_ddp,
)
from ..tools.primitives import max_abs_diff

WIDTH, BATCH = 256, 8  # Linear(256, 256): 가중치 65,536개 + 편향 256개, 랭크당 배치 8
COMPRESSED_STEPS = 100  # PowerSGD가 압축하는 스텝 수: 오차 피드백의 효과는 스텝이 쌓여야 보인다
HOOKS = ("default", "powersgd", "powersgd_no_ef")
# 압축된 스텝의 바이트 비율은 torch가 센 원소 비율보다 크다(메시지마다 gloo 머리글이 붙는다).
# 그 머리글을 더해도 이 배수를 넘지 않는다(N=2~4, r=1~8에서 잰 값은 1.1~1.6배)
BYTES_OVER_ELEMENTS_MAX = 2.5
LOSSY_MIN = 0.01  # 오차 피드백 없는 PowerSGD와 기본 훅의 차이 / 이동량: 근사라서 이보다 크다
EF_RATIO_MAX = 0.8  # 오차 피드백이 있으면 기본 훅과의 차이가 없을 때의 이 배 이하
# gradient_as_bucket_view 실습: 두 층 모델을 0.25 MiB 상한으로 나누면 버킷이 두 개다(층마다 하나)
VIEW_DEPTH, VIEW_CAP_MB, VIEW_STEPS = 2, 0.25, 3  # 스텝 1에서 버킷을 다시 짜므로 스텝 2(마지막)를 잰다
VIEW_CONFIGS = {"copy": (False, True), "view": (True, False), "view_set_to_none": (True, True)}


# ----------------------------------------------------------------------------- PowerSGD

def powersgd_run(ctx: RankContext, hook: str, matrix_rank: int, start_iter: int, lr: float, seed: int) -> dict:
    """``start_iter + COMPRESSED_STEPS`` SGD steps with the default hook or PowerSGD (with/without error
    feedback): bytes written per step, All-Reduce sizes the profiler saw before ``start_iter``."""
    steps = start_iter + COMPRESSED_STEPS
    x, y = synthetic_regression(steps * ctx.world_size * BATCH, WIDTH, WIDTH, seed=seed)
    torch.manual_seed(seed)
    model = layer_stack(WIDTH, 1)
    ddp = wrap_ddp(model, ctx.device)
    state = None
    if hook != "default":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=matrix_rank, start_powerSGD_iter=start_iter,
            use_error_feedback=hook == "powersgd", warm_start=True, random_seed=seed)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    init = flat_parameters(model)
    wrote, plain = [], []
    for step in range(steps):
        xb, yb = rank_batch(x, y, ctx.rank, ctx.world_size, BATCH, step)
        optimizer.zero_grad(set_to_none=True)
        # 압축 전 스텝만 프로파일러로 센다: 리듀서의 스레드에서 부른 All-Reduce라 빠짐없이 보인다(압축 뒤의
        # P·Q All-Reduce는 퓨처의 콜백이 gloo 스레드에서 부를 때가 있어 프로파일러가 놓친다: 바이트는 커널이 센다)
        with CollectiveCounter() if step < start_iter else nullcontext() as counter:
            before = written_bytes()  # 프로파일러가 켜진 뒤에 잰다(켜고 끌 때 쓰는 글자는 빼고)
            mse_backward(ddp, xb.to(ctx.device), yb.to(ctx.device))
            after = written_bytes()
            if counter is not None:
                settle_collectives()  # 프로파일러를 끄기 전에 gloo 스레드가 All-Reduce의 기록을 마치기를 기다린다
        optimizer.step()
        wrote.append(None if before is None or after is None else after - before)
        if counter is not None:
            plain.append([item["numel"] for item in counter.items if item["op"] == "all_reduce"])
    params = flat_parameters(model)
    return {"wrote": wrote, "plain_allreduce": plain, "moved": max_abs_diff(params, init), "params": params.tolist(),
            "fingerprint": fingerprint(model),
            "elements": list(state.compression_stats()[1:]) if state else None}


# ----------------------------------------------------------------------------- gradient_as_bucket_view

def bucket_view_run(ctx: RankContext, as_view: bool, set_to_none: bool, lr: float, seed: int) -> dict:
    """A few steps of a two-bucket model; after the last backward, the storages behind gradients and
    buckets and the reducer's copies in that backward."""
    x, y = synthetic_regression(VIEW_STEPS * ctx.world_size * BATCH, WIDTH, WIDTH, seed=seed)
    torch.manual_seed(seed)
    model = layer_stack(WIDTH, VIEW_DEPTH)
    ddp = wrap_ddp(model, ctx.device, bucket_cap_mb=VIEW_CAP_MB, gradient_as_bucket_view=as_view)
    buckets: dict[int, torch.Tensor] = {}

    def recording_allreduce(state, bucket):
        buckets[bucket.index()] = bucket.buffer()  # 리듀서가 통신하는 평평한 버킷 텐서 그 자체
        return default_hooks.allreduce_hook(state, bucket)  # 기본 훅과 같은 일: N으로 나누고 All-Reduce

    ddp.register_comm_hook(None, recording_allreduce)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in range(VIEW_STEPS):
        xb, yb = rank_batch(x, y, ctx.rank, ctx.world_size, BATCH, step)
        optimizer.zero_grad(set_to_none=set_to_none)
        with CollectiveCounter() as counter:
            mse_backward(ddp, xb.to(ctx.device), yb.to(ctx.device))
            settle_collectives()  # 위와 같다: 역전파가 기다린 퓨처가 끝나도 gloo 스레드는 아직 프로파일러에 쓴다
        optimizer.step()
    grads = [p.grad for p in model.parameters()]
    grad_storages = {g.untyped_storage().data_ptr() for g in grads}
    bucket_storages = {b.untyped_storage().data_ptr() for b in buckets.values()}
    return {"param_bytes": storage_bytes(model.parameters()), "grad_bytes": storage_bytes(grads),
            "held_bytes": storage_bytes([*grads, *buckets.values()]), "buckets": len(buckets),
            "grad_storages": len(grad_storages), "grads_in_buckets": grad_storages <= bucket_storages,
            "copies": dict(counter.copies), "fingerprint": fingerprint(model)}


class CommHooksRecord(Described):
    """What each rank of the 'comm_hooks' lab returns."""

    powersgd: dict[str, dict[str, Any]]
    bucket_view: dict[str, dict[str, Any]]


def rank_fn(ctx: RankContext, lr: float, matrix_rank: int, start_iter: int, seed: int) -> CommHooksRecord:
    runs = {h: powersgd_run(ctx, h, matrix_rank, start_iter, lr, seed) for h in HOOKS}
    default = runs["default"]["params"]
    for h in HOOKS[1:]:
        runs[h]["drift"] = max_abs_diff(runs[h].pop("params"), default)
    runs["default"].pop("params")
    views = {name: bucket_view_run(ctx, as_view, none, lr, seed) for name, (as_view, none) in VIEW_CONFIGS.items()}
    return {**ctx.describe(), "powersgd": runs, "bucket_view": views}


class CommHooksData(TypedDict):
    """The summary data of the 'comm_hooks' lab."""

    numel: int
    element_ratio: float
    byte_ratio: float | None
    bytes_per_step: dict[str, list[list]]
    drift: dict[str, float]
    ef_ratio: float
    views: dict[str, dict[str, Any]]


def summarize(ranks: list[CommHooksRecord], backend: str, params: dict[str, Any]) -> Summary[CommHooksData]:
    n, start = len(ranks), params["start_iter"]
    psgd = [r["powersgd"] for r in ranks]
    numel = WIDTH * WIDTH + WIDTH
    plain = sorted({tuple(map(tuple, p[h]["plain_allreduce"])) for p in psgd for h in HOOKS})
    lossy = min(p["powersgd_no_ef"]["drift"] / p["default"]["moved"] for p in psgd)
    ef_ratio = max(p["powersgd"]["drift"] / p["powersgd_no_ef"]["drift"] for p in psgd)
    before, after = ranks[0]["powersgd"]["powersgd"]["elements"]
    element_ratio = after / before  # torch가 센 원소 수: 압축 뒤 / 압축 전 (압축한 스텝들 합계)
    views = [r["bucket_view"] for r in ranks]
    held = {name: sorted({v[name]["held_bytes"] / v[name]["param_bytes"] for v in views}) for name in VIEW_CONFIGS}
    copies = {name: sorted({(v[name]["copies"].get("grad_to_bucket", 0), v[name]["copies"].get("bucket_to_grad", 0))
                            for v in views}) for name in VIEW_CONFIGS}
    n_params = 2 * VIEW_DEPTH  # 층마다 weight, bias
    checks = [
        check_equal("plain_allreduce_until_start", [list(map(list, p)) for p in plain], [[[numel]] * start],
                    f"처음 start_powerSGD_iter={start}스텝은 세 훅 모두 모든 원소({numel:,}개)를 한 번에 All-Reduce 한다"
                    "(프로파일러가 본 스텝별 All-Reduce 원소 수)"),
        check_at_least("powersgd_is_lossy", lossy, LOSSY_MIN,
                       f"PowerSGD(오차 피드백 없음)로 {start + COMPRESSED_STEPS}스텝 학습한 파라미터는 기본 훅과 다르다: "
                       "근사다(최대 절대 차이 / 기본 훅의 이동량, 랭크 중 가장 작은 값)"),
        check_at_most("error_feedback_closer", ef_ratio, EF_RATIO_MAX,
                      "오차 피드백을 켜면 기본 훅과의 차이가 끈 때보다 작다(켬 / 끔, 랭크 중 가장 큰 값)"),
        check_equal("bucket_view_holds_one_copy", [held["copy"], held["view"]], [[2.0], [1.0]],
                    "그래디언트와 버킷이 차지하는 서로 다른 저장소의 바이트 / 파라미터 바이트: "
                    "gradient_as_bucket_view=False면 2, True면 1"),
        check_equal("grads_are_bucket_views", sorted({v["view"]["grads_in_buckets"] for v in views}), [True],
                    "gradient_as_bucket_view=True면 모든 p.grad의 저장소가 버킷의 저장소다"),
        check_equal("view_skips_copies", copies["view"], [(0, 0)],
                    "gradient_as_bucket_view=True이고 set_to_none=False면 역전파에서 그래디언트 ↔ 버킷 복사가 없다"
                    "(리듀서의 복사 횟수: 그래디언트→버킷, 버킷→그래디언트)"),
        check_equal("copy_mode_copies_both_ways", copies["copy"], [(n_params, n_params)],
                    f"gradient_as_bucket_view=False면 역전파마다 파라미터 {n_params}개를 버킷으로, 다시 그래디언트로 복사한다"),
        check_equal("set_to_none_view_again", sorted({v["view_set_to_none"]["grads_in_buckets"] for v in views}), [True],
                    "set_to_none=True로 지워도 다음 역전파가 끝나면 p.grad는 다시 버킷의 뷰다"),
        check_equal("set_to_none_copies_again", copies["view_set_to_none"], [(n_params, 0)],
                    f"그 대신 그 역전파에서 autograd가 새로 만든 그래디언트 {n_params}개를 버킷으로 복사한다"
                    "(그래디언트→버킷, 버킷→그래디언트)"),
        check_equal("bucket_view_same_result", len({v[name]["fingerprint"] for v in views for name in VIEW_CONFIGS}), 1,
                    "세 설정 모두 학습 결과가 비트 단위로 같다(서로 다른 파라미터 지문 수)"),
    ]
    if n == 1:
        reason = "N=1이면 비교할 다른 랭크가 없고, 랭크가 보내는 바이트도 없다"
        checks += [not_applicable(name, reason) for name in ("powersgd_cuts_bytes", "powersgd_replicas_identical")]
        byte_ratio = None
    else:
        wrote = [(p["powersgd"]["wrote"][start:], p["default"]["wrote"][start:]) for p in psgd]
        # /proc/self/io가 없는 운영 체제에서는 None: 확인이 "측정값 없음"으로 실패한다
        byte_ratio = None if any(None in w for pair in wrote for w in pair) else max(sum(a) / sum(b) for a, b in wrote)
        checks += [
            check_close("powersgd_cuts_bytes", byte_ratio, element_ratio * (1 + BYTES_OVER_ELEMENTS_MAX) / 2,
                        element_ratio * (BYTES_OVER_ELEMENTS_MAX - 1) / 2,
                        f"압축한 스텝에서 랭크가 쓴 바이트 / 기본 훅(/proc/self/io wchar)이 torch가 센 원소 비율 "
                        f"{element_ratio:.4f}의 1~{BYTES_OVER_ELEMENTS_MAX:g}배다(메시지 머리글만큼 크다)"),
            check_equal("powersgd_replicas_identical",
                        max(len({r["powersgd"][h]["fingerprint"] for r in ranks}) for h in HOOKS[1:]), 1,
                        "PowerSGD로 학습해도 복제본은 비트 단위로 같다: 모든 랭크가 같은 P·Qᵀ를 받는다(서로 다른 지문 수)"),
        ]
    v0 = views[0]
    data: CommHooksData = {
        "numel": numel,
        "element_ratio": element_ratio,
        "byte_ratio": byte_ratio,
        "bytes_per_step": {h: [p[h]["wrote"] for p in psgd] for h in HOOKS},
        "drift": {h: max(p[h]["drift"] for p in psgd) / max(p["default"]["moved"] for p in psgd) for h in HOOKS[1:]},
        "ef_ratio": ef_ratio,
        "views": {name: {key: v0[name][key] for key in ("param_bytes", "grad_bytes", "held_bytes", "buckets",
                                                         "grad_storages", "grads_in_buckets", "copies")}
                  for name in VIEW_CONFIGS},
    }
    return Summary(data, checks)


LAB = Lab(
    name="comm_hooks",
    description="PowerSGD 통신 훅이 줄이는 바이트와 오차 피드백, gradient_as_bucket_view가 없애는 그래디언트 사본과 "
                "set_to_none의 복사를 실제 랭크에서 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=7,
    params={"lr": Float(0.1, min=0.01, max=0.5, help="학습률 η (SGD)"),
            "matrix_rank": Int(4, min=2, max=8, help="PowerSGD의 근사 랭크 r (matrix_approximation_rank)"),
            "start_iter": Int(2, min=2, max=5, help="처음 몇 스텝을 압축 없이 All-Reduce 할지 (start_powerSGD_iter, "
                              "오차 피드백과 warm start에는 2 이상)"),
            "seed": seed()},
    record=CommHooksRecord,
    data=CommHooksData,
)
