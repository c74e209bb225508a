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
* for the bfloat16 run, the dtypes of the stored gradients and of the collectives;
* the gradient norm of the first step four ways: one process on the global batch, ``clip_grad_norm_``'s
  norm on FullyShardedDP's parameters (each rank sees only its shards: a local norm, different per rank),
  :meth:`FullyShardedDP.clip_grad_norm_` (the shards' squares summed over the ranks) and torch's norm of
  FSDP2's DTensor gradients.

``layers="own"`` builds the MLP from a reader's own linear class (``OwnLinear``, not an ``nn.Linear``;
the last layer stays ``nn.Linear``): FullyShardedDP's rule shards every weight matrix whatever its layer's
class, and the lab counts the matrices independently of that rule (every parameter with two or more
dimensions).

``mistake`` swaps the reference for a broken variant that readers write, each caught by named checks
(``MISTAKE_FAILS``): ``sum_not_average`` reduce-scatters the gradient sum without dividing by N,
``free_before_backward`` frees the gathered weight after forward and never gathers it again (the
backward finds zero bytes), ``grads_in_compute_dtype`` keeps the shards and so their gradients in
bfloat16 (no float32 master weights).
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, TypedDict, cast

import torch
from torch import nn
from torch.nn import functional as F

from ..context import Described, RankContext
from ..ddp import FullyShardedDP
from ..ddp.fsdp_bugs import BUGS
from ..params import Choice, Int
from ..registry import Lab
from ..result import Check, RankRecords, Summary, check_at_most, check_close, check_equal, largest, not_applicable
from ..tools.comms import CollectiveCounter
from ..tools.models import (
    flat_parameters,
    held,
    layer_stack,
    mse_backward,
    rank_batch,
    shard_with_fsdp,
    storage_bytes,
    synthetic_regression,
    wrap_ddp,
)
from ..tools.optim_state import OPTIMIZERS, train_single, training_params
from ..tools.primitives import ATOL, RTOL, max_abs_diff

EVENTS = ("gather_forward", "free_forward", "gather_backward", "free_backward")


# mistake= 값마다 쓰는 클래스: 참조 구현, 갤러리(labs/ddp/fsdp_bugs.py의 BUGS)에서 이 실습이 재는 실수, 그리고 인자로 만드는 실수
SHARDED: dict[str, Callable[..., FullyShardedDP]] = {
    "none": FullyShardedDP, **{bug.mistake: cls for cls, bug in BUGS.items() if bug.mistake},
    # 예전 규칙: 층의 클래스로 고른다. 직접 만든 선형 층은 나누지 않는다
    "shard_by_class": functools.partial(FullyShardedDP, shard=(nn.Linear, nn.Embedding))}
LAYERS = ("torch", "own")
MISTAKE_PARAMS = {"shard_by_class": {"layers": "own"}}  # 실수가 드러나는 인자(테스트와 13장이 함께 쓴다)
NORM_RTOL = 1e-5  # 그래디언트 노름 비교: float32 합 순서만 다르다
# 실수마다 실패하는 확인(N=2): 테스트가 정확히 이 집합을 확인한다
MISTAKE_FAILS = {
    "sum_not_average": {"matches_single", "adamw_matches_ddp", "matches_torch_fsdp", "bf16_close_to_fp32",
                        "sharded_norm_matches_single"},
    "free_before_backward": {"backward_completes", "timeline_gather_free_order", "peak_one_layer", "matches_single",
                             "adamw_matches_ddp", "matches_torch_fsdp", "gathers_twice_per_step",
                             "reduction_carries_the_gradients", "bf16_grads_stored_fp32", "bf16_communication",
                             "bf16_close_to_fp32", "sharded_norm_matches_single", "plain_clip_norm_is_local"},
    "grads_in_compute_dtype": {"bf16_grads_stored_fp32", "bf16_close_to_fp32"},
    # layers=own(MISTAKE_PARAMS)에서: 마지막 nn.Linear 하나만 나누고, 학습 결과는 그래도 한 프로세스와 같다
    "shard_by_class": {"every_matrix_sharded", "params_shard_bytes", "timeline_gather_free_order",
                       "gathers_twice_per_step", "bf16_communication"},
}


# --- rank side -------------------------------------------------------------------------------------

class OwnLinear(nn.Module):
    """A reader's own linear layer: not an ``nn.Linear``, but its weight is a matrix all the same."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = nn.Parameter(bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def build_model(width: int, depth: int, layers: str) -> nn.Sequential:
    """The course's MLP; with ``layers="own"`` every Linear but the last becomes an OwnLinear with the same values."""
    model = layer_stack(width, depth)
    if layers == "own":
        linears = [i for i, m in enumerate(model) if isinstance(m, nn.Linear)]
        for i in linears[:-1]:
            linear = cast(nn.Linear, model[i])
            model[i] = OwnLinear(linear.weight, linear.bias)
    return model


def has_own_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False))


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
    record: dict[str, Any] = {"params_bytes": storage_bytes(fsdp.parameters()), "events": events, "error": None,
                              "n_sharded": len(fsdp.weights)}
    try:
        record["steps"] = train(fsdp, batches, opt, lr, fsdp.finish_gradient_synchronization)
    except RuntimeError as error:  # 역전파가 버린 가중치를 읽으면 여기로 온다
        record["error"] = str(error).splitlines()[0]
        return None, record
    record["grad_dtypes"] = sorted({str(p.grad.dtype).removeprefix("torch.") for p in fsdp.parameters()})
    return fsdp.gather_full_params(), record


def train_torch(ctx: RankContext, init: nn.Module, batches: list, opt: str, lr: float) -> tuple[dict, dict]:
    """torch's fully_shard (FSDP2) on every Linear and the root; its full parameters and its record."""
    model = shard_with_fsdp(copy.deepcopy(init), ctx.device, ctx.world_size, wrap=has_own_parameters)
    record: dict[str, Any] = {"params": held(model.parameters())}
    record["steps"] = train(model, batches, opt, lr)
    full = {name: p.full_tensor() for name, p in model.named_parameters()}  # type: ignore[attr-defined]  # DTensor → 모든 랭크에 전체 값
    return full, record


def train_ddp(ctx: RankContext, init: nn.Module, batches: list, opt: str, lr: float) -> tuple[nn.Module, dict]:
    model = copy.deepcopy(init)
    ddp = wrap_ddp(model, ctx.device)
    return model, {"params_bytes": storage_bytes(model.parameters()), "steps": train(ddp, batches, opt, lr)}


def grads_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def grad_norms(ctx: RankContext, init: nn.Module, mine: tuple, everyone: tuple, mistake: str) -> dict:
    """The first step's gradient norm: one process (global batch), clip_grad_norm_ on FullyShardedDP's shards
    (this rank's local norm), FullyShardedDP.clip_grad_norm_ and torch's norm of FSDP2's DTensor gradients."""
    single = copy.deepcopy(init)
    mse_backward(single, *everyone)
    norms: dict[str, float | None] = {"single": float(torch.nn.utils.get_total_norm(grads_of(single)))}
    model = shard_with_fsdp(copy.deepcopy(init), ctx.device, ctx.world_size, wrap=has_own_parameters)
    mse_backward(model, *mine)
    total = torch.nn.utils.get_total_norm(grads_of(model))  # DTensor: 랭크끼리 합친다
    norms["fsdp2"] = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
    fsdp = SHARDED[mistake](copy.deepcopy(init))
    try:
        mse_backward(fsdp, *mine)
        fsdp.finish_gradient_synchronization()
    except RuntimeError:  # 역전파가 버린 가중치를 읽는 실수
        return {**norms, "local": None, "sharded": None}
    norms["local"] = float(torch.nn.utils.get_total_norm(grads_of(fsdp)))  # 내 샤드만의 노름
    norms["sharded"] = float(fsdp.clip_grad_norm_(float("inf")))  # inf: 자르지 않고 노름만
    return norms


def flat(full: dict, names: list[str]) -> torch.Tensor:
    return torch.cat([full[name].detach().reshape(-1).to("cpu", torch.float64) for name in names])


class FSDPRecord(Described):
    """What each rank of the 'fsdp' lab returns."""

    numels: list[int]
    weight_numels: list[int]
    sgd: dict[str, Any]
    adamw: dict[str, Any]
    bf16: dict[str, Any]
    norms: dict[str, float | None]


def rank_fn(ctx: RankContext, width: int, depth: int, per_rank_batch: int, steps: int, lr: float, mistake: str,
            layers: str, seed: int) -> FSDPRecord:
    n = ctx.world_size
    x, y = synthetic_regression(steps * n * per_rank_batch, width, width, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    mine = [rank_batch(x, y, ctx.rank, n, per_rank_batch, s) for s in range(steps)]
    everyone = [rank_batch(x, y, 0, 1, n * per_rank_batch, s) for s in range(steps)]  # 한 프로세스: 전역 배치
    torch.manual_seed(seed)
    init = build_model(width, depth, layers).to(ctx.device)
    names = [name for name, _ in init.named_parameters()]
    # 나눠야 할 가중치: 2차원 이상인 파라미터 전부(FullyShardedDP의 규칙과 따로, 층의 클래스를 보지 않고 센다)
    record = {**ctx.describe(), "numels": [p.numel() for p in init.parameters()],
              "weight_numels": [p.numel() for p in init.parameters() if p.dim() >= 2]}
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
    record["norms"] = grad_norms(ctx, init, mine[0], everyone[0], mistake)
    return cast(FSDPRecord, record)


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


def step_elements(ranks: RankRecords, n: int, n_replicated: int) -> dict:
    """Per kind, the distinct element counts one step carried (all ranks, optimizers and steps).

    An all-gather's work item carries this rank's shard: the gathered weight has N times as many elements.
    ``reduce`` is every gradient reduction (the weights' and the replicated parameters'); ``ddp`` is
    DDP's All-Reduce (its bucket-rebuild broadcasts of the second step left out: 7.7).
    """
    kinds: dict[str, set] = {"gather": set(), "reduce": set(), "ddp": set(), "reduce_ops": set()}
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


def worst(ranks: RankRecords, opt: str, key: str) -> float | None:
    values = [r[opt]["diff"][key] for r in ranks]
    return None if None in values else largest(values)


class FSDPData(TypedDict):
    """The summary data of the 'fsdp' lab."""

    n_params: int
    n_weights: int
    padded: int
    depth: int
    params_bytes: dict[str, int]
    peak_bytes: int | None
    timeline: list[list]
    elements: dict[str, Any]
    torch_steps: list[dict[str, Any]]
    diffs: dict[str, dict[str, float | None]]
    bf16_diff: float | None
    moved: float
    tolerance: float
    norms: list[dict[str, float | None]]
    errors: list[str]


def bf16_check(bf16_diff: float | None, moved: float, tol: float) -> Check:
    """bfloat16 training ends within 10 % of the distance float32 training moved the weights; n/a when that
    distance is within the float32 tolerance ``tol`` (a learning rate so small that nothing moved to compare)."""
    if moved <= tol:
        return not_applicable("bf16_close_to_fp32",
                              f"학습률이 작아 float32 학습이 가중치를 움직인 거리({moved:.3g})가 허용 오차({tol:.3g}) "
                              "이하다: 비교할 움직임이 없다(lr를 키우면 잰다)")
    return check_at_most("bf16_close_to_fp32", None if bf16_diff is None else bf16_diff / moved, 0.1,
                         "bfloat16으로 계산한 SGD 학습과 float32 한 프로세스의 최대 차이가 학습이 가중치를 움직인 "
                         "거리(최대 |w_S − w_0|)의 10 % 이하: float32 마스터 샤드가 작은 업데이트를 지킨다")


def summarize(ranks: list[FSDPRecord], backend: str, params: dict[str, Any]) -> Summary[FSDPData]:
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
    tol = ATOL + RTOL * largest(r[opt]["max_abs_w"] for r in ranks for opt in OPTIMIZERS)
    bf16 = [r["bf16"] for r in ranks]
    bf16_diff = None if any(b.get("diff_vs_single") is None for b in bf16) else max(b["diff_vs_single"] for b in bf16)
    moved = largest(r["sgd"]["moved"] for r in ranks)
    bf16_dtypes = sorted({i["dtype"] for b in bf16 for items in b.get("steps", [])
                          for part in ("gather", "reduce") for i in split_step(items, n_replicated)[part]})
    torch_numel = sum(r["sgd"]["torch"]["params"]["numel"] for r in ranks)
    norms = [r["norms"] for r in ranks]
    single_norm = norms[0]["single"]

    def norm_error(kind: str) -> float | None:
        values = [v for q in norms if (v := q[kind]) is not None]
        if single_norm is None or len(values) < len(norms):
            return None
        return max(abs(v - single_norm) for v in values) / single_norm

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
        bf16_check(bf16_diff, moved, tol),
        check_equal("every_matrix_sharded", sorted({o["n_sharded"] for o in ours + bf16}), [depth],
                    f"FullyShardedDP가 나눈 가중치의 수가 모델의 2차원 이상 파라미터 수({depth}개)와 같다: 층의 클래스"
                    f"({params['layers']})와 상관없이 모든 가중치 행렬을 나눈다"),
        check_close("sharded_norm_matches_single", norm_error("sharded"), 0.0, NORM_RTOL,
                    "FullyShardedDP.clip_grad_norm_이 샤드의 제곱합을 랭크끼리 더해 구한 첫 스텝의 그래디언트 노름이 "
                    "전역 배치 한 프로세스의 노름과 같다(모든 랭크 중 가장 큰 상대 차이)"),
        check_close("fsdp2_norm_matches_single", norm_error("fsdp2"), 0.0, NORM_RTOL,
                    "fully_shard의 DTensor 그래디언트로 torch.nn.utils.get_total_norm이 구한 노름도 한 프로세스와 같다"
                    "(상대 차이)"),
    ]
    if n == 1:
        checks.append(not_applicable("plain_clip_norm_is_local", "N=1이면 샤드가 곧 전체라 노름이 한 프로세스와 같다"))
    else:
        local = [q["local"] for q in norms]
        checks.append(check_equal("plain_clip_norm_is_local", None if None in local else len(set(local)), n,
                                  "FullyShardedDP의 파라미터에 torch.nn.utils.clip_grad_norm_을 그대로 쓰면 랭크마다 자기 "
                                  "샤드의 노름을 보고 랭크마다 다른 비율로 자른다(서로 다른 노름 수)"))
    data: FSDPData = {"n_params": total, "n_weights": sum(weights), "padded": sum(padded), "depth": depth,
            "params_bytes": {"ddp": 4 * total, "ours": rest, "torch": ranks[0]["sgd"]["torch"]["params"]["bytes"]},
            "peak_bytes": peak, "timeline": events[0][:4 * depth], "elements": elements,
            "torch_steps": ranks[0]["sgd"]["torch"]["steps"][0],
            "diffs": {opt: {k: worst(ranks, opt, k) for k in ranks[0][opt]["diff"]} for opt in OPTIMIZERS},
            "bf16_diff": bf16_diff, "moved": moved, "tolerance": tol, "norms": norms,
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
    params={**training_params(Int(4, min=1, max=16, help="Linear 층 수"),
                              Choice("none", tuple(SHARDED), help="일부러 넣는 실수 (shard_by_class는 layers=own과 함께)")),
            "layers": Choice("torch", LAYERS, help="own: 마지막 층만 nn.Linear이고 나머지는 직접 만든 선형 층 클래스")},
    record=FSDPRecord,
    data=FSDPData,
)
