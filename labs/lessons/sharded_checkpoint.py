"""Chapter 13 lab: checkpoints of sharded state — stop, save, resume, and compare with not stopping.

The same MLP trains 2S AdamW steps from the same start without stopping; then again, stopping after S
steps, saving, building everything anew and resuming for S more. Each rank compares its parameters with
the uninterrupted run's (inside the rank; the record keeps the differences and fingerprints):

* ZeRO-1 (:class:`labs.ddp.ShardedOptimizer` under DDP), three ways to save: consolidated on rank 0
  (``consolidate_state_dict(to=0)``, one file), one file per rank, and rank 0 alone saving the model and
  its own shard as chapter 6 saves DDP (the other ranks resume their shards' state from nothing);
* torch's ``ZeroRedundancyOptimizer`` consolidated the same way;
* resuming the consolidated file on half the ranks (N/2, N even): each rank then holds, bit for bit, the saved
  state of the parameters the new assignment gives it; training on with the per-rank batch doubled keeps the
  global batch B (the run differs from the uninterrupted one by float32 summation order only, which AdamW can
  amplify on near-zero gradients: recorded, not checked), with the per-rank batch kept B halves;
* FSDP2 (``fully_shard``) saved and loaded with ``torch.distributed.checkpoint``, and how much of the model
  rank 0's own ``state_dict()`` holds;
* what ``ShardedOptimizer`` says when asked for ``state_dict()`` without consolidating, and when a rank
  loads another rank's shard.

``mistake="save_rank0_only"`` saves the consolidated way's checkpoint as rank 0 alone (the model and its
own shard), the broken variant of the checks on that way.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, TypedDict, cast

import torch
import torch.distributed as dist
from torch import nn

from ..context import Described, RankContext
from ..ddp import ShardedOptimizer
from ..ddp.sharded_checkpoint import (
    load_consolidated,
    load_fsdp2,
    load_per_rank,
    save_consolidated,
    save_fsdp2,
    save_per_rank,
)
from ..params import Choice, Int
from ..registry import Lab
from ..result import Check, Summary, check_at_least, check_close, check_equal, largest, not_applicable
from ..tools.models import (
    fingerprint,
    flat_parameters,
    layer_stack,
    local_shard,
    mse_backward,
    rank_batch,
    shard_with_fsdp,
    synthetic_regression,
    wrap_ddp,
)
from ..tools.optim_state import OPTIMIZERS, training_params
from ..tools.primitives import ATOL, RTOL, max_abs_diff

MISTAKES = ("none", "save_rank0_only")
WAYS = ("consolidated", "per_rank", "rank0_only")  # ShardedOptimizer를 저장하는 세 방법
MISTAKE_FAILS = {"save_rank0_only": {"consolidated_resume_equals_uninterrupted", "resharded_state_restored"}}
LOST_MIN = 1e-4  # 랭크 0만 저장하면 재개한 학습이 끊기지 않은 학습과 이동량의 0.01 % 이상 다르다
NEEDS_TWO_RANKS = ("rank0_only_replicas_identical", "other_shard_refused", "fsdp2_rank0_state_dict_is_a_shard")


# --- rank side -------------------------------------------------------------------------------------

def shared_folder(ctx: RankContext) -> Path:
    """An empty folder rank 0 makes, its path broadcast to every rank (one machine)."""
    path = [tempfile.mkdtemp(prefix="labs-sharded-ckpt-") if ctx.rank == 0 else None]
    dist.broadcast_object_list(path, src=0)
    return Path(str(path[0]))


def zero_optimizer(wrapper: str, model: nn.Module, lr: float, group: dist.ProcessGroup | None) -> torch.optim.Optimizer:
    cls, kwargs = OPTIMIZERS["adamw"]
    if wrapper == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer  # 여기서만: 불러오는 데 0.6초(TorchScript)

        return ZeroRedundancyOptimizer(model.parameters(), cls, process_group=group, lr=lr, **kwargs)
    return ShardedOptimizer(model.parameters(), cls, process_group=group, lr=lr, **kwargs)


class Trainer:
    """DDP + a ZeRO-1 optimizer over a fresh copy of ``init``, in ``group``."""

    def __init__(self, ctx: RankContext, wrapper: str, init: nn.Module, lr: float, group=None):
        self.model = copy.deepcopy(init)
        self.ddp = wrap_ddp(self.model, ctx.device, process_group=group)
        self.optimizer = zero_optimizer(wrapper, self.model, lr, group)

    def train(self, batches: list) -> None:
        for x, y in batches:
            self.optimizer.zero_grad(set_to_none=True)
            mse_backward(self.ddp, x, y)
            self.optimizer.step()


def save_rank0_only(folder: Path, model: nn.Module, optimizer: ShardedOptimizer) -> None:
    """The mistake: chapter 6's DDP checkpoint as is. Rank 0 writes the model and its own shard; nobody else writes."""
    if dist.get_rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.shard_state_dict()}, folder / "checkpoint.pt")
    dist.barrier()


def load_rank0_only(folder: Path, model: nn.Module, optimizer: ShardedOptimizer) -> None:
    """Every rank loads the model; only rank 0 finds optimizer state for its shard (the others start from none)."""
    state = torch.load(folder / "checkpoint.pt", weights_only=True)
    model.load_state_dict(state["model"])
    if dist.get_rank() == 0:
        optimizer.load_state_dict(state["optimizer"])


SAVES: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
    "consolidated": (save_consolidated, load_consolidated), "per_rank": (save_per_rank, load_per_rank),
    "rank0_only": (save_rank0_only, load_rank0_only)}


def resumed(ctx: RankContext, wrapper: str, way: str, init: nn.Module, first: list, rest: list, lr: float,
            folder: Path) -> Trainer:
    """Train ``first``, save ``way``, start over from ``init`` with new objects, load, train ``rest``."""
    save, load = SAVES[way]
    before = Trainer(ctx, wrapper, init, lr)
    before.train(first)
    save(folder, before.model, before.optimizer)
    after = Trainer(ctx, wrapper, init, lr)  # 새 프로세스처럼: 모델·DDP·옵티마이저를 모두 새로 만든다
    load(folder, after.model, after.optimizer)
    after.train(rest)
    return after


def refusals(ctx: RankContext, init: nn.Module, first: list, lr: float, folder: Path) -> dict:
    """ShardedOptimizer's answer to ``state_dict()`` without consolidating, and to loading rank 0's shard."""
    run = Trainer(ctx, "sharded", init, lr)
    run.train(first)
    optimizer = cast(ShardedOptimizer, run.optimizer)
    answers: dict[str, str | None] = {"state_dict": None, "other_shard": None}
    try:
        optimizer.state_dict()
    except RuntimeError as error:
        answers["state_dict"] = str(error)
    save_per_rank(folder, run.model, optimizer)
    if ctx.rank != 0:
        try:
            optimizer.load_state_dict(torch.load(folder / "optimizer.rank0.pt", weights_only=True))
        except RuntimeError as error:
            answers["other_shard"] = str(error)
    return answers


def resharded(ctx: RankContext, init: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, per_rank_batch: int,
              lr: float, folder: Path) -> dict[str, Any]:
    """Load the consolidated checkpoint (saved by N ranks) on the first N/2 ranks: which saved states this rank now
    owns and whether they are bit for bit the saved ones; then train the rest of the steps with the per-rank batch
    doubled (B kept) and kept (B halved). The parameters, or the error on loading."""
    half = ctx.world_size // 2
    group = dist.new_group(list(range(half)))  # 모든 랭크가 부른다
    if ctx.rank >= half:
        return {}
    out: dict[str, Any] = {"error": None}
    saved = torch.load(folder / "checkpoint.pt", weights_only=True)["optimizer"]["state"]
    for name, b in (("same_global_batch", 2 * per_rank_batch), ("same_per_rank_batch", per_rank_batch)):
        run = Trainer(ctx, "sharded", init, lr, group)
        try:
            load_consolidated(folder, run.model, cast(ShardedOptimizer, run.optimizer))
        except RuntimeError as error:
            out["error"] = str(error).splitlines()[0]
            return out
        params = [q for g in run.optimizer.param_groups for q in g["params"]]
        owned = [i for i, q in enumerate(params) if q in run.optimizer.state]
        out["owned"] = owned  # 불러온 뒤 이 랭크가 가진 상태: 새 배정(N/2)에서 이 랭크가 맡은 파라미터
        out["restored"] = all(torch.equal(run.optimizer.state[params[i]][k], saved[i][k]) for i in owned for k in saved[i])
        run.train([rank_batch(x, y, ctx.rank, half, b, s) for s in range(steps, 2 * steps)])
        out[name] = flat_parameters(run.model).tolist()
    return out


def fsdp2_run(ctx: RankContext, init: nn.Module, batches: list, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = shard_with_fsdp(copy.deepcopy(init), ctx.device, ctx.world_size)
    cls, kwargs = OPTIMIZERS["adamw"]
    optimizer = cls(model.parameters(), lr=lr, **kwargs)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        mse_backward(model, x, y)
        optimizer.step()
    return model, optimizer


def full_parameters(model: nn.Module) -> torch.Tensor:
    """An FSDP2 model's parameters whole (all-gathered DTensors), flat, in ``named_parameters`` order."""
    return torch.cat([p.full_tensor().detach().reshape(-1).to("cpu", torch.float64)  # type: ignore[attr-defined]
                      for p in model.parameters()])


def fsdp2_checkpoint(ctx: RankContext, init: nn.Module, first: list, rest: list, lr: float, folder: Path) -> dict:
    """Uninterrupted FSDP2 against save (DCP) → new model and optimizer → load (DCP) → the rest; and rank 0's
    own ``state_dict()``: the elements it holds locally."""
    whole, _ = fsdp2_run(ctx, init, first + rest, lr)
    before, optimizer = fsdp2_run(ctx, init, first, lr)
    state = before.state_dict()
    held = sum(local_shard(t).numel() for t in state.values())
    save_fsdp2(folder / "dcp", before, optimizer)
    after, optimizer = fsdp2_run(ctx, init, [], lr)
    load_fsdp2(folder / "dcp", after, optimizer)
    for x, y in rest:
        optimizer.zero_grad(set_to_none=True)
        mse_backward(after, x, y)
        optimizer.step()
    return {"diff": max_abs_diff(full_parameters(after), full_parameters(whole)), "state_dict_numel": held,
            "dim0": [p.shape[0] for p in init.parameters()], "numels": [p.numel() for p in init.parameters()]}


class ShardedCheckpointRecord(Described):
    """What each rank of the 'sharded_checkpoint' lab returns."""

    moved: float
    max_abs_w: float
    diffs: dict[str, float]
    fingerprints: dict[str, str]
    refusals: dict[str, str | None]
    resharded: dict[str, Any]
    fsdp2: dict[str, Any]


def rank_fn(ctx: RankContext, width: int, depth: int, per_rank_batch: int, steps: int, lr: float, mistake: str,
            seed: int) -> ShardedCheckpointRecord:
    n = ctx.world_size
    x, y = synthetic_regression(2 * steps * n * per_rank_batch, width, width, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    mine = [rank_batch(x, y, ctx.rank, n, per_rank_batch, s) for s in range(2 * steps)]
    first, rest = mine[:steps], mine[steps:]
    torch.manual_seed(seed)
    init = layer_stack(width, depth).to(ctx.device)
    folder = shared_folder(ctx)
    try:
        flat, prints = {}, {}
        for wrapper in ("sharded", "zero"):
            whole = Trainer(ctx, wrapper, init, lr)
            whole.train(mine)  # 끊기지 않은 2S 스텝
            flat[f"{wrapper}_uninterrupted"] = flat_parameters(whole.model)
        for way in WAYS:
            save_way = "rank0_only" if way == "consolidated" and mistake == "save_rank0_only" else way
            (folder / way).mkdir(exist_ok=True)
            run = resumed(ctx, "sharded", save_way, init, first, rest, lr, folder / way)
            flat[way], prints[way] = flat_parameters(run.model), fingerprint(run.model)
        (folder / "zero").mkdir(exist_ok=True)
        run = resumed(ctx, "zero", "consolidated", init, first, rest, lr, folder / "zero")
        flat["zero"] = flat_parameters(run.model)
        diffs = {way: max_abs_diff(flat[way], flat["sharded_uninterrupted"]) for way in WAYS}
        diffs["zero"] = max_abs_diff(flat["zero"], flat["zero_uninterrupted"])
        (folder / "refuse").mkdir(exist_ok=True)
        answers = refusals(ctx, init, first, lr, folder / "refuse")
        reshard: dict[str, Any] = {}
        if n >= 2 and n % 2 == 0:
            out = resharded(ctx, init, x, y, steps, per_rank_batch, lr, folder / "consolidated")
            reshard = {k: max_abs_diff(v, flat["sharded_uninterrupted"]) if k.startswith("same_") else v
                       for k, v in out.items()}
        dist.barrier()
        fsdp2 = fsdp2_checkpoint(ctx, init, first, rest, lr, folder)
        dist.barrier()
    finally:
        if ctx.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
    start = flat_parameters(init)
    return {**ctx.describe(), "moved": max_abs_diff(flat["sharded_uninterrupted"], start),
            "max_abs_w": float(flat["sharded_uninterrupted"].abs().max()), "diffs": diffs, "fingerprints": prints,
            "refusals": answers, "resharded": reshard, "fsdp2": fsdp2}


# --- summary -------------------------------------------------------------------------------------

def rank0_elements(dim0: list[int], numels: list[int], n: int) -> int:
    """Elements rank 0 holds when every tensor is cut along dim 0 like ``torch.chunk`` (FSDP2): ⌈rows/N⌉ rows."""
    return sum(min(-(-rows // n), rows) * (numel // rows) for rows, numel in zip(dim0, numels))


class ShardedCheckpointData(TypedDict):
    """The summary data of the 'sharded_checkpoint' lab."""

    diffs: dict[str, float]
    moved: float
    tolerance: float
    bitwise: bool
    lost_fraction: float | None
    resharded: dict[str, Any]
    fsdp2_rank0_fraction: float
    refusal: str | None


def worst(ranks: list[dict], key: str) -> float | None:
    values = [r["diffs"][key] for r in ranks]
    return None if None in values else largest(values)


def lost_state_check(lost: float | None, moved: float, tol: float) -> Check:
    """Resuming from rank 0's files alone differs from the uninterrupted run by at least ``LOST_MIN`` of the
    distance training moved the weights; n/a when that distance is within the tolerance ``tol`` (a learning
    rate so small that the lost moments change nothing measurable)."""
    if moved <= tol:
        return not_applicable("rank0_only_resume_differs",
                              f"학습률이 작아 학습이 가중치를 움직인 거리({moved:.3g})가 허용 오차({tol:.3g}) 안이다: "
                              "잃은 AdamW 상태가 만드는 차이를 잴 수 없다")
    return check_at_least("rank0_only_resume_differs", None if lost is None else lost / moved, LOST_MIN,
                          "랭크 0만 모델과 자기 샤드를 저장하면(6장의 DDP 방식) 다른 랭크 몫의 AdamW 상태를 잃어, 재개한 "
                          "학습이 끊기지 않은 학습과 다르다(최대 절대 차이 / 학습의 이동량)")


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    n = len(ranks)
    moved = largest(r["moved"] for r in ranks)
    tol = ATOL + RTOL * largest(r["max_abs_w"] for r in ranks)
    # N ≤ 2이면 비트 단위로 같다. N ≥ 3이면 재개한 DDP의 첫 스텝이 처음 버킷(파라미터 순서)으로 All-Reduce하므로
    # 더하는 순서가 끊기지 않은 학습(다시 짠 버킷)과 달라 float32 반올림만큼 다를 수 있다(7.7절, 6장과 같다)
    bitwise = n <= 2
    same = 0.0 if bitwise else tol
    order = "비트 단위로" if bitwise else f"atol {ATOL:g} + rtol {RTOL:g}·max|w| 안에서(N ≥ 3: 재개한 DDP의 첫 버킷 순서)"
    lost = worst(ranks, "rank0_only")
    messages = [r["refusals"]["state_dict"] for r in ranks]
    fsdp = ranks[0]["fsdp2"]
    total = sum(fsdp["numels"])
    checks = [
        check_equal("state_dict_refuses_a_shard", sum(m is not None and "consolidate_state_dict" in m for m in messages),
                    n, "모으지 않은 ShardedOptimizer.state_dict()는 샤드를 전체인 척 돌려주지 않고 consolidate_state_dict를 "
                    "알려 주는 오류를 낸다(그 오류를 낸 랭크 수)"),
        check_close("consolidated_resume_equals_uninterrupted", worst(ranks, "consolidated"), 0.0, same,
                    f"consolidate_state_dict(to=0)로 모아 랭크 0이 저장하고 재개한 학습이 끊기지 않은 학습과 {order} "
                    "같다(최대 절대 차이)"),
        check_close("per_rank_resume_equals_uninterrupted", worst(ranks, "per_rank"), 0.0, same,
                    f"랭크마다 자기 샤드를 자기 파일에 저장하고 재개한 학습이 끊기지 않은 학습과 {order} 같다(최대 절대 차이)"),
        check_close("zero_redundancy_resume_equals_uninterrupted", worst(ranks, "zero"), 0.0, same,
                    f"ZeroRedundancyOptimizer도 consolidate_state_dict(to=0) 뒤 랭크 0이 저장하고 재개하면 {order} 같다"
                    "(최대 절대 차이)"),
        check_close("fsdp2_dcp_resume_equals_uninterrupted", largest(r["fsdp2"]["diff"] for r in ranks), 0.0, 0.0,
                    "fully_shard(FSDP2)를 torch.distributed.checkpoint(get_state_dict, dcp.save → dcp.load, "
                    "set_state_dict)로 저장하고 재개한 학습이 끊기지 않은 학습과 비트 단위로 같다(최대 절대 차이)"),
    ]
    if n == 1:
        reason = "N=1이면 샤드가 곧 전체이고, 비교할 다른 랭크가 없다"
        checks += [not_applicable(name, reason) for name in ("rank0_only_resume_differs", *NEEDS_TWO_RANKS)]
    else:
        checks += [
            lost_state_check(lost, moved, tol),
            check_equal("rank0_only_replicas_identical", len({r["fingerprints"]["rank0_only"] for r in ranks}), 1,
                        "그래도 오류는 없고 복제본은 비트 단위로 같다: 주인이 브로드캐스트하므로 잃은 것이 보이지 않는다"
                        "(서로 다른 파라미터 지문 수)"),
            check_equal("other_shard_refused", sum(r["refusals"]["other_shard"] is not None for r in ranks[1:]), n - 1,
                        "랭크 0의 샤드 파일을 다른 랭크가 불러오면 ShardedOptimizer.load_state_dict가 조용히 받지 않고 "
                        "오류를 낸다(오류를 낸 랭크 수, 랭크 1..N−1)"),
            check_equal("fsdp2_rank0_state_dict_is_a_shard", fsdp["state_dict_numel"],
                        rank0_elements(fsdp["dim0"], fsdp["numels"], n),
                        f"fully_shard 모델의 랭크 0 state_dict()에는 랭크 0의 샤드만 있다(원소 수, 전체 {total:,}개 중 "
                        "torch.chunk처럼 0번 차원을 ⌈행/N⌉씩 자른 첫 조각)"),
        ]
    reshard = ranks[0]["resharded"]
    if n >= 2 and n % 2 == 0:
        loaded = [r["resharded"] for r in ranks[:n // 2]]
        owned = None if any(q.get("error") for q in loaded) else sorted(i for q in loaded for i in q["owned"])
        restored = owned is not None and all(q["restored"] for q in loaded)
        checks.append(check_equal("resharded_state_restored", owned if restored else None, list(range(len(fsdp["numels"]))),
                                  f"N={n}에서 모아 저장한 체크포인트를 N={n // 2}에서 불러오면, 새 배정에서 각 랭크가 맡은 "
                                  "파라미터의 AdamW 상태가 저장한 값과 비트 단위로 같고, 랭크들이 맡은 파라미터를 모으면 빠짐이 "
                                  "없다(불러온 상태가 있는 파라미터 번호)"))
    else:
        checks.append(not_applicable("resharded_state_restored", "랭크 수를 반으로 줄여 재개하려면 N이 2 이상의 짝수여야 한다"))
    data = {"diffs": {k: worst(ranks, k) for k in ranks[0]["diffs"]}, "moved": moved, "tolerance": tol,
            "bitwise": bitwise, "lost_fraction": None if lost is None or n == 1 or moved <= tol else lost / moved,
            "resharded": reshard, "fsdp2_rank0_fraction": fsdp["state_dict_numel"] / total,
            "refusal": messages[0]}
    return Summary(data, checks)


LAB = Lab(
    name="sharded_checkpoint",
    description=("샤딩한 상태의 체크포인트: ShardedOptimizer·ZeroRedundancyOptimizer를 모아서·랭크마다·랭크 0만 저장하고, "
                 "fully_shard를 torch.distributed.checkpoint로 저장해 재개한 학습을 끊기지 않은 학습과 비교"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=13,
    params=training_params(Int(4, min=1, max=16, help="Linear 층 수"),
                           Choice("none", MISTAKES, help="save_rank0_only: 모아서 저장할 자리에서 랭크 0만 모델과 자기 "
                                  "샤드를 저장하는 실수")),
    record=ShardedCheckpointRecord,
    data=ShardedCheckpointData,
)
