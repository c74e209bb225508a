"""Chapter 7 lab: mixed precision, ``GradScaler``, gradient clipping and a compression hook under DDP.

Five things a training loop adds around DDP's backward, each measured on real ranks:

* ``scaler``: K micro-steps (``no_sync()`` before the last) under ``torch.autocast`` (bfloat16) with
  a ``GradScaler``. The model output is bfloat16, but the gradients DDP all-reduces have the
  parameters' dtype (float32): the profiler records the dtype of every All-Reduce. In one chosen
  step the last rank's local loss is multiplied by inf; the All-Reduce spreads it, so every rank's
  scaler skips that optimizer step and halves its scale, and the replicas stay identical.
  ``GradScaler`` is meant for float16; bfloat16 training normally runs without one (bfloat16 has
  float32's exponent range). The lab pairs it with bfloat16 only to show the skip-and-back-off mechanics.
* ``clip``: ``clip_grad_norm_`` after the synchronized backward sees the averaged gradient, so its
  total norm is the same on every rank and equals one process's on the global batch; it issues no
  collective (DDP: every rank holds the whole averaged gradient). Clipped once after accumulation it
  matches one process; clipped at every micro-step (the wrong place) it clips each rank's local
  partial sums and the update differs.
* ``unscale``: with a ``GradScaler`` (default scale 65536, float32 model) the step of
  :func:`labs.ddp.amp.clipped_scaled_step` (scale → backward → ``unscale_`` → clip → step → update)
  equals one float32 process's clipped step; clipping before ``unscale_`` clips the scaled gradients,
  and the update shrinks by the scale.
* ``hook``: ``fp16_compress_hook`` halves the bytes a rank writes for the gradient All-Reduce
  (``/proc/self/io`` wchar, counted by the kernel) at a small parameter drift. It casts the bucket to
  float16 before dividing by N, so a gradient above float16's largest value (65504) arrives as inf.

``mistake="scaler_step_in_no_sync"`` calls ``scaler.step``/``update`` after every micro-step inside
``no_sync()``: each rank then steps on its own local gradient and backs off on its own inf.
``mistake="clip_before_unscale"`` clips before ``scaler.unscale_`` in the ``unscale`` part.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any, TypedDict

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn import functional as F

from ..context import Described, RankContext
from ..ddp.amp import clipped_scaled_step
from ..params import Choice, Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_at_least, check_at_most, check_close, check_equal, largest, not_applicable
from ..tools.comms import CollectiveCounter, written_bytes
from ..tools.models import (
    fingerprint,
    flat_gradients,
    flat_parameters,
    layer_stack,
    mse_backward,
    rank_batch,
    synthetic_regression,
    tiny_mlp,
    wrap_ddp,
)
from ..tools.primitives import max_abs_diff

MISTAKES = ("none", "scaler_step_in_no_sync", "clip_before_unscale")
INIT_SCALE = 1024.0  # GradScaler의 시작 배율: inf를 만나면 backoff_factor(0.5)배가 된다
# 통신 훅 비교용 모델: Linear(256, 256) 한 층 = 65,792개(float32로 약 257 KiB). 메시지가 이만큼 크면
# gloo가 덧붙이는 머리글이 무시할 만해서 보낸 바이트의 비율은 dtype 크기의 비율과 같다. ReLU가 없는 한 층이라
# 두 훅의 차이는 반올림뿐이다(두 층이면 0에 가까운 ReLU 입력 하나가 뒤집혀 N=3에서 차이가 이동량의 28 %까지 났다).
HOOK_WIDTH, HOOK_DEPTH, HOOK_STEPS = 256, 1, 3
HOOKS = ("default", "fp16")
NORM_RTOL = 1e-5  # 노름 비교: float32 합 순서만 다르다
PARAM_TOL = 1e-6  # 파라미터 비교(최대 절대 차이), accumulation 실습과 같은 기준
WRONG_CLIP_MIN = 0.01  # 잘못된 자리에서 자르면 업데이트가 한 프로세스와 1 % 이상 다르다
FP16_BYTES = (0.45, 0.55)  # fp16 훅 / 기본 훅의 보낸 바이트 비율(float16은 float32의 절반)
FP16_DRIFT_MAX = 0.01  # fp16 훅의 파라미터 차이 / 전체 이동량
SCALER_CHECKS = ("inf_step_skipped_on_every_rank", "scale_backed_off_on_every_rank", "scaler_replicas_identical")
UNSCALE_CHECKS = ("unscaled_clip_norm_matches_single", "unscaled_clip_step_matches_single")
FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504: float16이 나타내는 가장 큰 수
OVERFLOW_GRAD = 4 * FP16_MAX  # 이 크기의 그래디언트는 float16으로 바꾸는 순간 inf (N으로 나누기 전에 바꾼다)


def bf16_hook_outcome(ctx: RankContext, module: torch.nn.Module) -> str:
    """What registering ``bf16_compress_hook`` does in this build, as text.

    torch 2.13의 ``DDP._check_comm_hook``(``torch/nn/parallel/distributed.py``)은 백엔드가 아니라 빌드를 본다:
    CUDA(또는 HIP) 빌드이고 NCCL 2.10+이거나, XPU와 XCCL이 있어야 한다. CPU 전용 빌드(torch 2.13+cpu)에서는
    그룹이 gloo든 무엇이든 ``register_comm_hook``이 바로 TypeError를 낸다(훅을 부르기 전, 통신 없이).
    """
    ddp = wrap_ddp(module, ctx.device)
    try:
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    except TypeError as err:
        return f"TypeError: {err}"
    return "registered"


# ----------------------------------------------------------------------------- scaler (AMP)

def scaler_run(ctx: RankContext, batches: list[list], lr: float, inf_step: int, mistake: str, seed: int) -> dict:
    """Optimizer steps of K micro-steps each under autocast + GradScaler; the last rank's loss is inf once."""
    torch.manual_seed(seed)
    model = tiny_mlp()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(ctx.device.type, init_scale=INIT_SCALE)
    k, poisoned = len(batches[0]), ctx.rank == ctx.world_size - 1
    steps, output_dtype = [], None
    with CollectiveCounter() as counter:
        for step, micro_batches in enumerate(batches):
            before = flat_parameters(model)
            for micro, (x, y) in enumerate(micro_batches):
                synced = micro == k - 1
                with nullcontext() if synced else ddp.no_sync():
                    with torch.autocast(ctx.device.type, dtype=torch.bfloat16):
                        out = ddp(x)
                        loss = F.mse_loss(out, y) / k  # mse_loss는 autocast가 float32로 계산한다
                    output_dtype = output_dtype or str(out.dtype).removeprefix("torch.")
                    if step == inf_step and micro == 0 and poisoned:
                        loss = loss * math.inf  # 마지막 랭크의 로컬 손실만 inf: 다른 랭크의 데이터는 멀쩡하다
                    scaler.scale(loss).backward()
                if mistake == "scaler_step_in_no_sync" and not synced:
                    # 잘못된 순서: 아직 All-Reduce 하지 않은 로컬 그래디언트로 스텝하고 배율을 고친다
                    scaler.step(optimizer)
                    scaler.update()
            finite = bool(torch.isfinite(flat_gradients(model)).all())  # All-Reduce 뒤의 그래디언트
            scaler.step(optimizer)  # 그래디언트에 inf/NaN이 있으면 optimizer.step()을 건너뛴다
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            steps.append({"moved": max_abs_diff(flat_parameters(model), before), "scale": scaler.get_scale(),
                          "grads_finite": finite})
    reduced = sorted({item["dtype"] for item in counter.items if item["op"] == "all_reduce"})
    return {"steps": steps, "output_dtype": output_dtype, "allreduce_dtypes": reduced,
            "param_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "fingerprint": fingerprint(model)}


# ----------------------------------------------------------------------------- clipping

def clipped_single(micro_batches: list, ratio: float, lr: float, seed: int) -> dict:
    """One process, no DDP: one step on the global batch (all ranks' micro-batches), clipped to
    ``ratio`` times its own gradient norm. Every rank computes it (58 parameters) to know max_norm."""
    torch.manual_seed(seed)
    model = tiny_mlp().to(micro_batches[0][0].device)
    init = flat_parameters(model)
    mse_backward(model, torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches]))
    max_norm = ratio * float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]))
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    torch.optim.SGD(model.parameters(), lr=lr).step()
    return {"init": init.tolist(), "params": flat_parameters(model).tolist(), "norm": norm, "max_norm": max_norm}


def clipped_ddp(ctx: RankContext, micro_batches: list, max_norm: float, lr: float, seed: int,
                every_micro: bool) -> dict:
    """K micro-steps (``no_sync()`` before the last) and one clipped SGD step under DDP. With
    ``every_micro`` the gradient is also clipped after each unsynchronized backward (the wrong place)."""
    torch.manual_seed(seed)
    model = tiny_mlp()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    k, local_norms = len(micro_batches), []
    for micro, (x, y) in enumerate(micro_batches):
        synced = micro == k - 1
        with nullcontext() if synced else ddp.no_sync():
            mse_backward(ddp, x, y, scale=1.0 / k)
        if every_micro and not synced:
            # 잘못된 자리: 아직 이 랭크의 로컬 부분합이다. 랭크마다 다른 노름으로 자른다
            local_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
    with CollectiveCounter() as counter:  # 자르기만 센다: 노름은 각 랭크가 이미 가진 평균 그래디언트로 계산한다
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    optimizer.step()
    return {"norm": norm, "local_norms": local_norms, "clip_collectives": counter.total,
            "params": flat_parameters(model).tolist()}


# ----------------------------------------------------------------------------- GradScaler and clipping

def scaled_clip_ddp(ctx: RankContext, micro_batches: list, max_norm: float, lr: float, seed: int,
                    before_unscale: bool) -> dict:
    """One DDP step of the float32 MLP with the default ``GradScaler`` and clipping. ``before_unscale`` clips the
    still-scaled gradients (the wrong order) instead of :func:`clipped_scaled_step`."""
    torch.manual_seed(seed)
    model = tiny_mlp()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(ctx.device.type)  # 기본 배율 2**16 = 65536
    scale = scaler.get_scale()
    x, y = micro_batches[0]
    loss = F.mse_loss(ddp(x), y)
    if before_unscale:
        scaler.scale(loss).backward()
        # 잘못된 순서: .grad는 아직 배율 × 그래디언트다. 노름도 배율배라 거의 모든 스텝이 잘린다
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        scaler.step(optimizer)  # 여기서야 배율로 나눈다: 이미 max_norm으로 자른 것을 다시 65536으로 나눈다
        scaler.update()
    else:
        norm = clipped_scaled_step(ddp, optimizer, scaler, loss, max_norm)
    return {"norm": norm, "scale": scale, "params": flat_parameters(model).tolist()}


def fp16_overflow_run(ctx: RankContext, hook: str, seed: int) -> bool:
    """One backward of a Linear(1, 1) whose weight gradient is OVERFLOW_GRAD on every rank; are the averaged
    gradients finite? (``fp16_compress_hook`` casts to float16 before it divides by N.)"""
    torch.manual_seed(seed)
    layer = torch.nn.Linear(1, 1)
    ddp = wrap_ddp(layer, ctx.device)
    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    x = torch.ones(1, 1, device=ctx.device)
    (ddp(x) * OVERFLOW_GRAD).sum().backward()  # 가중치와 편향의 그래디언트 = OVERFLOW_GRAD (float32에서는 멀쩡하다)
    return bool(torch.isfinite(flat_gradients(layer)).all())


# ----------------------------------------------------------------------------- communication hook

def hook_run(ctx: RankContext, hook: str, per_rank_batch: int, lr: float, seed: int) -> dict:
    """HOOK_STEPS SGD steps of a Linear(256, 256) layer with the default All-Reduce or fp16_compress_hook;
    the bytes this process wrote meanwhile, as the kernel counted them."""
    x, y = synthetic_regression(HOOK_STEPS * ctx.world_size * per_rank_batch, HOOK_WIDTH, HOOK_WIDTH, seed=seed)
    torch.manual_seed(seed)
    model = layer_stack(HOOK_WIDTH, HOOK_DEPTH)
    ddp = wrap_ddp(model, ctx.device)
    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)  # float16으로 바꿔 All-Reduce, 다시 float32로
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    init = flat_parameters(model)
    before = written_bytes()
    for step in range(HOOK_STEPS):
        xb, yb = rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, step)
        optimizer.zero_grad(set_to_none=True)
        mse_backward(ddp, xb.to(ctx.device), yb.to(ctx.device))
        optimizer.step()
    after = written_bytes()
    wrote = None if before is None or after is None else after - before
    return {"wrote": wrote, "moved": max_abs_diff(flat_parameters(model), init), "params": flat_parameters(model)}


class AmpClipRecord(Described):
    """What each rank of the 'amp_clip' lab returns."""

    scaler: dict[str, Any]
    clip: dict[str, dict[str, Any]]
    accumulated: dict[str, dict[str, Any]]
    unscale: dict[str, dict[str, Any]]
    hooks: dict[str, Any]


def rank_fn(ctx: RankContext, lr: float, micro_steps: int, micro_batch: int, clip_ratio: float, inf_step: int,
            mistake: str, seed: int) -> AmpClipRecord:
    n, k, b = ctx.world_size, micro_steps, micro_batch
    steps = inf_step + 2  # inf 스텝 다음 스텝이 다시 업데이트하는지까지 본다
    x, y = synthetic_regression(steps * n * k * b, seed=seed)

    def micro_batches(step: int, rank: int) -> list:
        return [tuple(t.to(ctx.device) for t in rank_batch(x, y, rank, n, b, step * k + micro)) for micro in range(k)]

    scaler = scaler_run(ctx, [micro_batches(s, ctx.rank) for s in range(steps)], lr, inf_step, mistake, seed)

    # 한 프로세스 기준: 첫 스텝의 전역 배치(모든 랭크의 마이크로배치)
    everyone = [mb for r in range(n) for mb in micro_batches(0, r)]
    single_one = clipped_single(everyone[::k], clip_ratio, lr, seed)  # 마이크로 스텝 0만: 누적 없음
    single_acc = clipped_single(everyone, clip_ratio, lr, seed)
    own = micro_batches(0, ctx.rank)
    clip = {"single": single_one, "ddp": clipped_ddp(ctx, own[:1], single_one["max_norm"], lr, seed, every_micro=False)}
    accumulated = {"single": single_acc,
                   "right": clipped_ddp(ctx, own, single_acc["max_norm"], lr, seed, every_micro=False),
                   "wrong": clipped_ddp(ctx, own, single_acc["max_norm"], lr, seed, every_micro=True)}

    max_norm = single_one["max_norm"]
    unscale = {"right": scaled_clip_ddp(ctx, own[:1], max_norm, lr, seed, before_unscale=mistake == "clip_before_unscale"),
               "wrong": scaled_clip_ddp(ctx, own[:1], max_norm, lr, seed, before_unscale=True)}

    hooks = {h: hook_run(ctx, h, b, lr, seed) for h in HOOKS}
    drift = max_abs_diff(hooks["fp16"].pop("params"), hooks["default"].pop("params"))
    bf16 = bf16_hook_outcome(ctx, tiny_mlp())
    finite = {h: fp16_overflow_run(ctx, h, seed) for h in HOOKS}
    return {**ctx.describe(), "scaler": scaler, "clip": clip, "accumulated": accumulated, "unscale": unscale,
            "hooks": {**hooks, "drift": drift, "bf16": bf16, "overflow_finite": finite}}


class AmpClipData(TypedDict):
    """The summary data of the 'amp_clip' lab."""

    scale_trace: list[list[float]]
    grads_finite: list[list[bool]]
    clip_norms: dict[str, Any]
    local_norms: list[list[float]]
    wrong_clip_error: float
    unscale: dict[str, float]
    bytes_written: dict[str, list[int]]
    fp16_drift: float
    bf16_hook: str


def summarize(ranks: list[AmpClipRecord], backend: str, params: dict[str, Any]) -> Summary[AmpClipData]:
    n, inf_step = len(ranks), params["inf_step"]
    last = ranks[-1]
    inf_steps = [r["scaler"]["steps"][inf_step] for r in ranks]
    next_steps = [r["scaler"]["steps"][inf_step + 1] for r in ranks]
    backed_off = INIT_SCALE * 0.5
    clip, acc = ranks[0]["clip"], ranks[0]["accumulated"]
    norm_error = largest(abs(r["clip"]["ddp"]["norm"] - clip["single"]["norm"]) for r in ranks) / clip["single"]["norm"]
    clip_diff = largest(max_abs_diff(r["clip"]["ddp"]["params"], clip["single"]["params"]) for r in ranks)
    right_diff = largest(max_abs_diff(r["accumulated"]["right"]["params"], acc["single"]["params"]) for r in ranks)
    movement = max_abs_diff(acc["single"]["params"], acc["single"]["init"])
    wrong_error = largest(max_abs_diff(r["accumulated"]["wrong"]["params"], acc["single"]["params"])
                          for r in ranks) / movement
    hooks = [r["hooks"] for r in ranks]
    drift = max(h["drift"] / h["default"]["moved"] for h in hooks)
    single_norm, single_moved = clip["single"]["norm"], max_abs_diff(clip["single"]["params"], clip["single"]["init"])
    unscaled = [r["unscale"] for r in ranks]
    unscaled_norm_error = max(abs(u["right"]["norm"] - single_norm) for u in unscaled) / single_norm
    unscaled_diff = max(max_abs_diff(u["right"]["params"], clip["single"]["params"]) for u in unscaled)
    before_error = max(max_abs_diff(u["wrong"]["params"], clip["single"]["params"]) for u in unscaled) / single_moved
    before_moved = max(max_abs_diff(u["wrong"]["params"], clip["single"]["init"]) for u in unscaled)
    checks = [
        check_equal("autocast_output_bf16", sorted({r["scaler"]["output_dtype"] for r in ranks}), ["bfloat16"],
                    "autocast(bfloat16) 안에서 모델 출력은 bfloat16이다(모든 랭크의 출력 dtype)"),
        check_equal("allreduce_in_param_dtype", sorted({d for r in ranks for d in r["scaler"]["allreduce_dtypes"]}),
                    [last["scaler"]["param_dtype"]],
                    "그래도 DDP가 All-Reduce 하는 그래디언트는 파라미터의 dtype이다(프로파일러가 본 All-Reduce의 dtype)"),
        check_close("inf_step_skipped_on_every_rank", max(s["moved"] for s in inf_steps), 0.0, 0.0,
                    f"마지막 랭크의 손실에만 넣은 inf가 All-Reduce로 모든 랭크에 퍼져, 스텝 {inf_step}에서 모든 랭크가 "
                    "optimizer.step()을 건너뛴다(그 스텝의 파라미터 변화, 최대 절대 차이)"),
        check_equal("scale_backed_off_on_every_rank", sorted({s["scale"] for s in inf_steps}), [backed_off],
                    f"모든 랭크의 GradScaler가 배율을 {INIT_SCALE:g}에서 {backed_off:g}로 줄인다(inf 스텝 뒤 배율)"),
        check_at_least("step_after_inf_updates", min(s["moved"] for s in next_steps), 1e-12,
                       "다음 스텝은 줄어든 배율로 다시 업데이트한다(모든 랭크 중 가장 작은 파라미터 변화)"),
        check_close("clip_norm_matches_single", norm_error, 0.0, NORM_RTOL,
                    "동기화된 역전파 뒤 clip_grad_norm_이 돌려준 전체 노름이 전역 배치 한 프로세스의 노름과 같다(상대 차이)"),
        check_equal("clip_issues_no_collectives", sorted({r["clip"]["ddp"]["clip_collectives"] for r in ranks}), [0],
                    "clip_grad_norm_은 집합 통신을 하지 않는다: 이미 평균된 그래디언트로 계산한다(자르는 동안 센 집합 통신 수)"),
        check_close("clipped_step_matches_single", clip_diff, 0.0, PARAM_TOL,
                    "자른 스텝 뒤 파라미터가 한 프로세스와 같다(최대 절대 차이)"),
        check_close("clip_after_accumulation_matches_single", right_diff, 0.0, PARAM_TOL,
                    f"K={params['micro_steps']}개를 누적하고 마지막(동기화된) 역전파 뒤에 한 번 자르면 한 프로세스와 같다"
                    "(최대 절대 차이)"),
        check_at_least("clip_every_micro_step_differs", wrong_error, WRONG_CLIP_MIN,
                       "마이크로 스텝마다 자르면(잘못된 자리) 업데이트가 한 프로세스와 다르다"
                       "(최대 절대 차이 / 한 프로세스의 파라미터 이동량)"),
        check_close("unscaled_clip_norm_matches_single", unscaled_norm_error, 0.0, NORM_RTOL,
                    "GradScaler와 함께: scaler.unscale_(optimizer) 뒤에 자르면 clip_grad_norm_이 본 노름이 float32 한 "
                    "프로세스의 노름과 같다(상대 차이)"),
        check_close("unscaled_clip_step_matches_single", unscaled_diff, 0.0, PARAM_TOL,
                    "scale → backward → unscale_ → clip → step → update 순서의 스텝 뒤 파라미터가 float32 한 프로세스의 "
                    "자른 스텝과 같다(최대 절대 차이)"),
        check_at_least("clip_before_unscale_differs", before_error, WRONG_CLIP_MIN,
                       "unscale_ 전에 자르면(배율을 곱한 그래디언트를 자르면) 업데이트가 한 프로세스와 다르다"
                       "(최대 절대 차이 / 한 프로세스의 파라미터 이동량)"),
        check_equal("fp16_hook_overflows", sorted({(h["overflow_finite"]["default"], h["overflow_finite"]["fp16"])
                                                   for h in hooks}), [(True, False)],
                    f"그래디언트가 {OVERFLOW_GRAD:g}(float16의 최댓값 {FP16_MAX:g}보다 크다)이면 기본 훅의 평균은 유한하고 "
                    "fp16_compress_hook의 평균은 inf다: N으로 나누기 전에 float16으로 바꾼다(모든 랭크의 (기본 훅, fp16 훅) 유한 여부)"),
        check_at_most("fp16_hook_drift_small", drift, FP16_DRIFT_MAX,
                      f"fp16_compress_hook으로 {HOOK_STEPS}스텝 학습한 파라미터가 기본 훅과 거의 같다"
                      "(최대 절대 차이 / 기본 훅의 파라미터 이동량)"),
    ]
    if n == 1:
        reason = "N=1이면 비교할 다른 랭크가 없고, 랭크가 보내는 바이트도 없다"
        checks += [not_applicable(name, reason) for name in
                   ("scaler_replicas_identical", "clip_norm_same_on_every_rank", "local_norms_differ_per_rank",
                    "wrong_clip_replicas_identical", "fp16_hook_halves_bytes")]
    else:
        wrong = [r["accumulated"]["wrong"] for r in ranks]
        centre, half = sum(FP16_BYTES) / 2, (FP16_BYTES[1] - FP16_BYTES[0]) / 2
        ratios = [h["fp16"]["wrote"] / h["default"]["wrote"] for h in hooks]
        checks += [
            check_equal("scaler_replicas_identical", len({r["scaler"]["fingerprint"] for r in ranks}), 1,
                        "GradScaler로 학습한 뒤 복제본이 비트 단위로 같다(서로 다른 파라미터 지문 수)"),
            check_equal("clip_norm_same_on_every_rank", len({r["clip"]["ddp"]["norm"] for r in ranks}), 1,
                        "clip_grad_norm_의 전체 노름이 모든 랭크에서 비트 단위로 같다(서로 다른 노름 수)"),
            check_equal("local_norms_differ_per_rank", len({w["local_norms"][0] for w in wrong}), n,
                        "잘못된 자리(no_sync 안)에서 잰 노름은 랭크마다 다르다: 로컬 부분합이다(서로 다른 노름 수)"),
            check_close("wrong_clip_replicas_identical", max(max_abs_diff(w["params"], wrong[0]["params"]) for w in wrong),
                        0.0, 0.0, "그래도 복제본은 같다: 마지막 All-Reduce가 잘린 부분합을 평균한다(최대 절대 차이)"),
            check_close("fp16_hook_halves_bytes", max(ratios, key=lambda q: abs(q - centre)),
                        centre, half, "fp16_compress_hook이면 랭크가 쓴 바이트가 기본 훅의 절반이다"
                        "(/proc/self/io wchar 비율, 모든 랭크 중 가장 먼 값)"),
        ]
    data: AmpClipData = {
        "scale_trace": [[s["scale"] for s in r["scaler"]["steps"]] for r in ranks],
        "grads_finite": [[s["grads_finite"] for s in r["scaler"]["steps"]] for r in ranks],
        "clip_norms": {"single": clip["single"]["norm"], "max_norm": clip["single"]["max_norm"],
                       "ranks": [r["clip"]["ddp"]["norm"] for r in ranks]},
        "local_norms": [r["accumulated"]["wrong"]["local_norms"] for r in ranks],
        "wrong_clip_error": wrong_error,
        "unscale": {"scale": unscaled[0]["wrong"]["scale"], "norm": single_norm, "scaled_norm": unscaled[0]["wrong"]["norm"],
                    "error": before_error, "update_ratio": before_moved / single_moved},
        "bytes_written": {h: [r["hooks"][h]["wrote"] for r in ranks] for h in HOOKS},
        "fp16_drift": drift,
        "bf16_hook": last["hooks"]["bf16"],
    }
    return Summary(data, checks)


LAB = Lab(
    name="amp_clip",
    description="autocast·GradScaler·그래디언트 자르기·fp16 통신 훅을 DDP와 함께 쓸 때 통신되는 dtype, 모든 랭크가 함께 "
                "건너뛰는 inf 스텝, 자르는 자리와 unscale_ 순서, 보낸 바이트를 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=7,
    params={"lr": Float(0.1, min=0.01, max=1.0, help="학습률 η (SGD)"),
            "micro_steps": Int(2, min=2, max=8, help="누적할 마이크로 스텝 수 K (자르는 자리를 비교하려면 2 이상)"),
            "micro_batch": Int(4, min=1, max=64, help="마이크로 스텝 하나의 랭크당 배치"),
            "clip_ratio": Float(0.2, min=0.05, max=0.3, help="max_norm = 이 비율 × 한 프로세스의 그래디언트 노름"),
            "inf_step": Int(1, min=0, max=3, help="마지막 랭크의 손실에 inf를 넣을 옵티마이저 스텝 번호"),
            "mistake": Choice("none", MISTAKES, help="scaler_step_in_no_sync: no_sync 안의 마이크로 스텝마다 "
                              "scaler.step/update를 부르는 잘못된 순서; clip_before_unscale: scaler.unscale_ 전에 자르는 "
                              "잘못된 순서"),
            "seed": seed()},
    record=AmpClipRecord,
    data=AmpClipData,
)
