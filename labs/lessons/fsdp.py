"""Chapter 13 lab: a small FSDP — the parameters themselves divided over the ranks, measured.

The same MLP is trained S steps from the same start four ways: one process on the global batch,
plain DDP, :class:`labs.ddp.FullyShardedDP` (the reference the reader builds) and torch's
``fully_shard`` (FSDP2), each with SGD (momentum) and AdamW; then FullyShardedDP once more with
``compute_dtype=bfloat16`` (SGD). Each rank records:

* the parameter bytes it stores (storage accounting: the distinct storages' ``nbytes``) under DDP,
  FullyShardedDP and FSDP2;
* a timeline of FullyShardedDP's gathers and frees, recorded by hooks the lab adds after the
  reference's own (so each entry sees what the reference has just done): after each layer's gather
  for forward, after its free, after its gather for backward and after its gradient lands in the
  shard; with each entry the bytes of parameters then alive (shards, replicated parameters and the
  gathered buffers' storages);
* the parameters after S steps (compared on the rank, recorded as differences);
* the collectives of each training step (forward, backward and the replicated parameters' All-Reduce)
  with the element counts and dtypes they carried;
* for the bfloat16 run, the dtypes of the stored gradients and of the collectives.

``mistake`` swaps the reference for a broken variant that readers write, each caught by named checks
(``MISTAKE_FAILS``): ``sum_not_average`` reduce-scatters the gradient sum without dividing by N,
``free_before_backward`` frees the gathered weight after forward and never gathers it again (the
backward finds zero bytes), ``grads_in_compute_dtype`` keeps the shards and so their gradients in
bfloat16 (no float32 master weights).
"""

from __future__ import annotations

import copy
from typing import Any, TypedDict

import torch
from torch import nn

from ..tools.comms import CollectiveCounter
from ..context import Described, RankContext
from ..ddp import FullyShardedDP
from ..ddp.fsdp_bugs import FreeBeforeBackward, GradsInComputeDtype, SumNotAverage
from ..tools.models import (flat_parameters, held, layer_stack, mse_backward, rank_batch, shard_with_fsdp, storage_bytes,
                      synthetic_regression, wrap_ddp)
from ..params import Choice, Int
from ..tools.optim_state import OPTIMIZERS, train_single, training_params
from ..tools.primitives import ATOL, RTOL, max_abs_diff
from ..registry import Lab
from ..result import Summary, check_at_most, check_close, check_equal

EVENTS = ("gather_forward", "free_forward", "gather_backward", "free_backward")


SHARDED = {"none": FullyShardedDP, "sum_not_average": SumNotAverage, "free_before_backward": FreeBeforeBackward,
           "grads_in_compute_dtype": GradsInComputeDtype}
# 실수마다 실패하는 확인(N=2): 테스트가 정확히 이 집합을 확인한다
MISTAKE_FAILS = {
    "sum_not_average": {"matches_single", "adamw_matches_ddp", "matches_torch_fsdp", "bf16_close_to_fp32"},
    "free_before_backward": {"backward_completes", "timeline_gather_free_order", "peak_one_layer", "matches_single",
                             "adamw_matches_ddp", "matches_torch_fsdp", "gathers_twice_per_step",
                             "reduction_carries_the_gradients", "bf16_grads_stored_fp32", "bf16_communication",
                             "bf16_close_to_fp32"},
    "grads_in_compute_dtype": {"bf16_grads_stored_fp32", "bf16_close_to_fp32"},
}


# --- rank side -------------------------------------------------------------------------------------

def optimizer_for(params, opt: str, lr: float) -> torch.optim.Optimizer:
    cls, kwargs = OPTIMIZERS[opt]
    return cls(params, lr=lr, **kwargs)


def train(model: nn.Module, batches: list, opt: str, lr: float, after_backward=None) -> list[list[dict]]:
    """S steps of ``model`` (its own parameters); the collectives of each step's forward and backward."""
    optimizer = optimizer_for(model.parameters(), opt, lr)
    steps = []
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        with CollectiveCounter() as counter:
            mse_backward(model, x, y)
            if after_backward is not None:
                after_backward()
        optimizer.step()
        steps.append(counter.items)
    return steps


def watch(fsdp: FullyShardedDP, events: list) -> None:
    """Hooks after the reference's own: what it has just done, and the parameter bytes then alive."""
    def alive() -> int:
        return storage_bytes([*fsdp.replicated, *(w.shard for w in fsdp.weights.values()),
                              *(w.gathered for w in fsdp.weights.values())])

    def note(kind: str, i: int):
        def hook(*args) -> None:
            events.append([kind, i, alive()])
        return hook

    def on_output_grad(i: int):
        def hook(layer, inputs, output) -> None:
            if output.requires_grad:  # 참조 구현이 먼저 건 훅(다시 모으기) 뒤에 돈다
                output.register_hook(note("gather_backward", i))
        return hook

    for i, (layer, weight) in enumerate(fsdp.weights.items()):
        layer.register_forward_pre_hook(note("gather_forward", i))
        layer.register_forward_hook(note("free_forward", i))
        layer.register_forward_hook(on_output_grad(i))
        weight.shard.register_post_accumulate_grad_hook(note("free_backward", i))


def train_ours(init: nn.Module, batches: list, opt: str, lr: float, mistake: str,
               compute_dtype: torch.dtype | None = None) -> tuple[dict | None, dict]:
    """FullyShardedDP (or the mistake) S steps; its full parameters (None if training raised) and its record."""
    fsdp = SHARDED[mistake](copy.deepcopy(init), compute_dtype=compute_dtype)
    events: list = []
    watch(fsdp, events)
    record = {"params_bytes": storage_bytes(fsdp.parameters()), "events": events, "error": None}
    try:
        record["steps"] = train(fsdp, batches, opt, lr, fsdp.finish_gradient_synchronization)
    except RuntimeError as error:  # 역전파가 버린 가중치를 읽으면 여기로 온다
        record["error"] = str(error).splitlines()[0]
        return None, record
    record["grad_dtypes"] = sorted({str(p.grad.dtype).removeprefix("torch.") for p in fsdp.parameters()})
    return fsdp.gather_full_params(), record


def train_torch(ctx: RankContext, init: nn.Module, batches: list, opt: str, lr: float) -> tuple[dict, dict]:
    """torch's fully_shard (FSDP2) on every Linear and the root; its full parameters and its record."""
    model = shard_with_fsdp(copy.deepcopy(init), ctx.device, ctx.world_size)
    record = {"params": held(model.parameters())}
    record["steps"] = train(model, batches, opt, lr)
    full = {name: p.full_tensor() for name, p in model.named_parameters()}  # DTensor → 모든 랭크에 전체 값
    return full, record


def train_ddp(ctx: RankContext, init: nn.Module, batches: list, opt: str, lr: float) -> tuple[nn.Module, dict]:
    model = copy.deepcopy(init)
    ddp = wrap_ddp(model, ctx.device)
    return model, {"params_bytes": storage_bytes(model.parameters()), "steps": train(ddp, batches, opt, lr)}


def flat(full: dict, names: list[str]) -> torch.Tensor:
    return torch.cat([full[name].detach().reshape(-1).to("cpu", torch.float64) for name in names])


class FSDPRecord(Described):
    """What each rank of the 'fsdp' lab returns."""

    numels: list[int]
    weight_numels: list[int]
    sgd: dict[str, Any]
    adamw: dict[str, Any]
    bf16: dict[str, Any]


def rank_fn(ctx: RankContext, width: int, depth: int, per_rank_batch: int, steps: int, lr: float, mistake: str,
            seed: int) -> FSDPRecord:
    n = ctx.world_size
    x, y = synthetic_regression(steps * n * per_rank_batch, width, width, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    mine = [rank_batch(x, y, ctx.rank, n, per_rank_batch, s) for s in range(steps)]
    everyone = [rank_batch(x, y, 0, 1, n * per_rank_batch, s) for s in range(steps)]  # 한 프로세스: 전역 배치
    torch.manual_seed(seed)
    init = layer_stack(width, depth).to(ctx.device)
    names = [name for name, _ in init.named_parameters()]
    record = {**ctx.describe(), "numels": [p.numel() for p in init.parameters()],
              "weight_numels": [m.weight.numel() for m in init if isinstance(m, nn.Linear)]}
    start = flat_parameters(init)
    singles = {}
    for opt in OPTIMIZERS:
        single, _ = train_single(init, everyone, opt, lr)
        ddp, ddp_record = train_ddp(ctx, init, mine, opt, lr)
        ours, ours_record = train_ours(init, mine, opt, lr, mistake)
        torch_full, torch_record = train_torch(ctx, init, mine, opt, lr)
        singles[opt] = flat_parameters(single)
        reference = {"single": singles[opt], "ddp": flat_parameters(ddp),
                     "torch": flat(torch_full, names)}
        diff = {f"ours_vs_{k}": None if ours is None else max_abs_diff(flat(ours, names), v)
                for k, v in reference.items()}
        diff["ddp_vs_single"] = max_abs_diff(reference["ddp"], reference["single"])
        diff["torch_vs_single"] = max_abs_diff(reference["torch"], reference["single"])
        record[opt] = {"ddp": ddp_record, "ours": ours_record, "torch": torch_record, "diff": diff,
                       "max_abs_w": float(reference["single"].abs().max()),
                       "moved": max_abs_diff(reference["single"], start)}
    low, low_record = train_ours(init, mine, "sgd", lr, mistake, compute_dtype=torch.bfloat16)
    low_record["diff_vs_single"] = None if low is None else max_abs_diff(flat(low, names), singles["sgd"])
    record["bf16"] = low_record
    return record


# --- summary -------------------------------------------------------------------------------------

def expected_events(depth: int, steps: int) -> list[list]:
    """Per step: each layer gathered then freed in forward order, then gathered and freed in reverse."""
    forward = [[kind, i] for i in range(depth) for kind in EVENTS[:2]]
    backward = [[kind, i] for i in reversed(range(depth)) for kind in EVENTS[2:]]
    return (forward + backward) * steps


def split_step(items: list[dict], n_replicated: int) -> dict:
    """One step's collectives: all-gathers, the weights' gradient reductions, the replicated All-Reduces (last)."""
    sharded = items[:len(items) - n_replicated]
    return {"gather": [i for i in sharded if "gather" in i["op"]],  # gloo: all_gather, NCCL: _allgather_base
            "reduce": [i for i in sharded if "gather" not in i["op"]],
            "replicated": items[len(items) - n_replicated:]}


def step_elements(ranks: list[dict], n: int, n_replicated: int) -> dict:
    """Per kind, the distinct element counts one step carried (all ranks, optimizers and steps).

    An all-gather's work item carries this rank's shard: the gathered weight has N times as many elements.
    ``reduce`` is every gradient reduction (the weights' and the replicated parameters'); ``ddp`` is
    DDP's All-Reduce (its bucket-rebuild broadcasts of the second step left out: 7.7).
    """
    kinds = {"gather": set(), "reduce": set(), "ddp": set(), "reduce_ops": set()}
    for r in ranks:
        for opt in OPTIMIZERS:
            for items in r[opt]["ours"].get("steps", []):
                parts = split_step(items, n_replicated)
                kinds["gather"].add(n * sum(i["numel"] for i in parts["gather"]))
                kinds["reduce"].add(sum(i["numel"] for i in parts["reduce"] + parts["replicated"]))
                kinds["reduce_ops"].update(i["op"] for i in parts["reduce"])
            kinds["ddp"].update(sum(i["numel"] for i in items if i["op"] == "all_reduce")
                                for items in r[opt]["ddp"]["steps"])
    return {k: sorted(v) for k, v in kinds.items()}


def worst(ranks: list[dict], opt: str, key: str) -> float | None:
    values = [r[opt]["diff"][key] for r in ranks]
    return None if None in values else max(values)


class FSDPData(TypedDict):
    """The summary data of the 'fsdp' lab."""

    n_params: int
    n_weights: int
    padded: int
    depth: int
    params_bytes: dict[str, int]
    peak_bytes: int
    timeline: list[list]
    elements: dict[str, Any]
    torch_steps: list[dict[str, Any]]
    diffs: dict[str, dict[str, float]]
    bf16_diff: float
    moved: float
    tolerance: float
    errors: list[str]


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    n, numels, weights = len(ranks), ranks[0]["numels"], ranks[0]["weight_numels"]
    total, depth = sum(numels), len(weights)
    padded = [-(-w // n) * n for w in weights]  # 랭크 수의 배수로 올린 가중치 원소 수
    replicated = total - sum(weights)
    n_replicated = len(numels) - depth
    shard_bytes = 4 * (sum(p // n for p in padded) + replicated)  # 기대: 내 샤드들 + 통째로 둔 파라미터
    ours = [r[opt]["ours"] for r in ranks for opt in OPTIMIZERS]
    events = [r["sgd"]["ours"]["events"] for r in ranks]
    rest = ranks[0]["sgd"]["ours"]["params_bytes"]
    gathered_at = sorted({e[2] for ev in events for e in ev if e[0].startswith("gather")})
    freed_at = sorted({e[2] for ev in events for e in ev if e[0].startswith("free")})
    peak = max(e[2] for ev in events for e in ev) if all(events) else None
    elements = step_elements(ranks, n, n_replicated)
    # 5장과 같은 허용 오차. 비트 단위로 같다고 하지 않는 까닭: 한 프로세스는 전역 배치의 평균을 한 번에 내고 FSDP는
    # 랭크별 평균의 합을 N으로 나누므로 float32 합의 순서가 다르다. DDP·fully_shard와는 N=1, 2와 (SGD) N=3에서 0이었지만,
    # AdamW는 N=3, 4에서 1e-8~5e-7 달랐다(덧셈 순서가 다른 gloo All-Reduce; AdamW는 작은 그래디언트의 차이를 키운다)
    tol = ATOL + RTOL * max(r[opt]["max_abs_w"] for r in ranks for opt in OPTIMIZERS)
    bf16 = [r["bf16"] for r in ranks]
    bf16_diff = None if any(b.get("diff_vs_single") is None for b in bf16) else max(b["diff_vs_single"] for b in bf16)
    moved = max(r["sgd"]["moved"] for r in ranks)
    bf16_dtypes = sorted({i["dtype"] for b in bf16 for items in b.get("steps", [])
                          for part in ("gather", "reduce") for i in split_step(items, n_replicated)[part]})
    torch_numel = sum(r["sgd"]["torch"]["params"]["numel"] for r in ranks)
    checks = [
        check_equal("backward_completes", sorted({o["error"] or "" for o in ours + bf16}), [""],
                    "모든 랭크의 역전파가 오류 없이 끝난다(기록한 오류 메시지의 종류; 빈 문자열 = 오류 없음)"),
        check_equal("ddp_params_whole", sorted({r[opt]["ddp"]["params_bytes"] for r in ranks for opt in OPTIMIZERS}),
                    [4 * total], f"DDP: 모든 랭크가 파라미터를 통째로 저장한다(4 × {total}바이트, 스토리지 크기로 셈)"),
        check_equal("params_shard_bytes", sorted({o["params_bytes"] for o in ours}), [shard_bytes],
                    "FullyShardedDP: 랭크마다 저장한 파라미터 바이트가 정확히 가중치 샤드(패딩한 원소 수 / N)와 "
                    "통째로 둔 편향의 합이다"),
        check_equal("torch_shards_cover_model", torch_numel, total,
                    "torch fully_shard: 랭크들이 가진 샤드의 원소를 모두 더하면 모델의 파라미터 수와 같다"),
        check_equal("timeline_gather_free_order", [[e[:2] for e in ev] for ev in events],
                    [expected_events(depth, params["steps"])] * n,
                    "스텝마다 순전파는 층 순서대로 모으고 버리며, 역전파는 거꾸로 다시 모으고 버린다(훅이 기록한 순서)"),
        check_equal("freed_after_use", freed_at, [rest],
                    "버린 뒤에는 살아 있는 파라미터 바이트가 저장한 샤드와 편향만큼으로 돌아온다(버린 직후의 바이트 종류)"),
        check_equal("peak_one_layer", gathered_at, sorted({rest + 4 * p for p in padded}),
                    "모은 직후 살아 있는 바이트 = 샤드와 편향 + 그 층 하나의 전체 가중치: 한 번에 한 층만 모여 있다"),
        check_close("matches_single", worst(ranks, "sgd", "ours_vs_single"), 0.0, tol,
                    f"SGD(모멘텀) {params['steps']}스텝 뒤 FullyShardedDP의 파라미터가 전역 배치 한 프로세스와 "
                    f"atol {ATOL:g} + rtol {RTOL:g}·max|w| 안에서 같다(최대 절대 차이)"),
        check_close("adamw_matches_ddp", worst(ranks, "adamw", "ours_vs_ddp"), 0.0, tol,
                    "AdamW 스텝 뒤 FullyShardedDP의 파라미터가 평범한 DDP와 같은 허용 오차 안에서 같다(최대 절대 차이)"),
        check_close("matches_torch_fsdp", max((worst(ranks, opt, "ours_vs_torch") for opt in OPTIMIZERS),
                                              key=lambda v: float("inf") if v is None else v), 0.0, tol,
                    "SGD와 AdamW 모두 torch fully_shard와 같은 허용 오차 안에서 같다(최대 절대 차이)"),
        check_equal("gathers_twice_per_step", elements["gather"], [2 * sum(padded)],
                    "스텝마다 가중치를 두 번(순전파, 역전파) 모은다: All-Gather가 모은 원소 = 2 × 패딩한 가중치"),
        check_equal("reduction_carries_the_gradients", elements["reduce"],
                    [e + sum(padded) - sum(weights) for e in elements["ddp"]],
                    "그래디언트를 줄이는 집합 통신(Reduce-Scatter와 편향의 All-Reduce)이 나른 원소 = DDP의 "
                    "All-Reduce가 나른 원소 + 패딩"),
        check_equal("bf16_grads_stored_fp32", sorted({d for b in bf16 for d in b.get("grad_dtypes", [None])},
                                                     key=str), ["float32"],
                    "compute_dtype=bfloat16: 옵티마이저가 보는 모든 .grad는 float32다(저장한 그래디언트의 dtype)"),
        check_equal("bf16_communication", bf16_dtypes, ["bfloat16"],
                    "compute_dtype=bfloat16: 가중치를 모으고 그래디언트를 줄이는 통신은 bfloat16으로 한다"),
        check_at_most("bf16_close_to_fp32", None if bf16_diff is None else bf16_diff / moved, 0.1,
                      "bfloat16으로 계산한 SGD 학습과 float32 한 프로세스의 최대 차이가 학습이 가중치를 움직인 "
                      "거리(최대 |w_S − w_0|)의 10 % 이하: float32 마스터 샤드가 작은 업데이트를 지킨다"),
    ]
    data = {"n_params": total, "n_weights": sum(weights), "padded": sum(padded), "depth": depth,
            "params_bytes": {"ddp": 4 * total, "ours": rest, "torch": ranks[0]["sgd"]["torch"]["params"]["bytes"]},
            "peak_bytes": peak, "timeline": events[0][:4 * depth], "elements": elements,
            "torch_steps": ranks[0]["sgd"]["torch"]["steps"][0],
            "diffs": {opt: {k: worst(ranks, opt, k) for k in ranks[0][opt]["diff"]} for opt in OPTIMIZERS},
            "bf16_diff": bf16_diff, "moved": moved, "tolerance": tol,
            "errors": sorted({o["error"] for o in ours + bf16 if o["error"]})}
    return Summary(data, checks)


LAB = Lab(
    name="fsdp",
    description=("FSDP: 가중치를 랭크마다 1/N씩 저장하고 층마다 모았다 버려도(FullyShardedDP, fully_shard) 결과는 한 "
                 "프로세스와 같고, 스텝마다 어떤 집합 통신이 몇 바이트를 나르는지 측정"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=13,
    params=training_params(Int(4, min=1, max=16, help="Linear 층 수"),
                           Choice("none", tuple(SHARDED), help="일부러 넣는 실수")),
    record=FSDPRecord,
    data=FSDPData,
)
