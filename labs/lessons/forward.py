"""Chapter 2 lab: what each rank's process group really sends during the forward pass.

Every rank computes its own loss ``L_i`` on its own mini-batch. Around every forward and every
backward a :class:`~labs.tools.comms.CollectiveCounter` records the collectives the process group ran,
for four models: a plain MLP, the same plus a layer it never uses wrapped with
``find_unused_parameters=True``, an MLP with
BatchNorm whose buffers DDP syncs in forward (the default), and the same with
``forward_sync_buffers=False``. A wide 3 MiB model shows that with the default arguments the
first backward puts every gradient in one bucket (one all_reduce) although the model is split
into several buckets once DDP rebuilds them. On CUDA a SyncBatchNorm model is measured too; on
CPU DDP refuses it, and the lab records that refusal.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, TypedDict

import torch
from torch import nn

from ..context import Described, RankContext
from ..ddp.forward import train_loop
from ..params import Float, Int, seed
from ..registry import Lab
from ..result import Check, RankRecords, Summary, check_at_least, check_close, check_equal, check_true
from ..tools.comms import CollectiveCounter
from ..tools.models import bn_mlp, count_parameters, synthetic_regression, tiny_mlp, wrap_ddp
from ..tools.primitives import make_optimizer


class WithSpareLayer(nn.Module):
    """The plain MLP plus a layer its forward never uses: the case ``find_unused_parameters`` is for."""

    def __init__(self):
        super().__init__()
        self.net = tiny_mlp()
        self.spare = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# 변형 이름 → (모델을 만드는 함수, DDP 인자)
VARIANTS: dict[str, tuple[Callable[[], nn.Module], dict[str, Any]]] = {
    "plain": (tiny_mlp, {}),
    "plain_unused": (WithSpareLayer, {"find_unused_parameters": True}),
    "bn_sync": (bn_mlp, {"forward_sync_buffers": True}),
    "bn_nosync": (bn_mlp, {"forward_sync_buffers": False}),
}
VARIANT_LABELS = {"plain": "일반 MLP", "plain_unused": "안 쓰는 층이 있는 MLP · find_unused_parameters=True",
                  "bn_sync": "BatchNorm · 버퍼 동기화 켬(기본)",
                  "bn_nosync": "BatchNorm · forward_sync_buffers=False", "syncbn": "SyncBatchNorm (GPU 전용)"}


def _batchnorm(model: nn.Module) -> nn.modules.batchnorm._BatchNorm | None:
    return next((m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)), None)


def train_variant(ctx: RankContext, model: nn.Module, data: tuple, per_rank_batch: int, iterations: int,
                  lr: float, **ddp_kwargs) -> dict:
    """Train ``iterations`` steps under DDP; record each forward's and backward's collectives."""
    bn = _batchnorm(model)
    if bn is not None:  # 랭크마다 다른 버퍼로 시작: DDP 생성자의 초기 동기화가 보이도록
        bn.running_mean.fill_(ctx.rank + 1.0)
    ddp = wrap_ddp(model, ctx.device, **ddp_kwargs)
    optimizer = make_optimizer("sgd", ddp.parameters(), lr=lr, momentum=0.0)
    record: dict[str, list] = {"forward": [], "backward": [], "forward_items": [], "backward_items": [],
              "losses": [], "global_losses": [], "rebuilt": [], "bn_entry_mean": []}
    if bn is not None:  # BatchNorm에 들어가는 순간(= DDP의 버퍼 브로드캐스트 직후)의 running_mean
        bn.register_forward_pre_hook(lambda m, _: record["bn_entry_mean"].append(m.running_mean.tolist()))
    return train_loop(ctx, ddp, optimizer, data, per_rank_batch, iterations, record, bn)


def wide_model(width: int = 256, layers: int = 12) -> nn.Module:
    """12 bias-free 256×256 layers: 3 MiB of float32 gradients, more than DDP's 1 MiB first bucket."""
    return nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])


def wide_backward_counts(ctx: RankContext, iterations: int, seed: int) -> list[int]:
    """all_reduce count of every backward of the wide model under DDP's default arguments."""
    torch.manual_seed(seed)
    ddp = wrap_ddp(wide_model(), ctx.device)
    counts = []
    for _ in range(iterations):
        loss = ddp(torch.randn(4, 256, device=ctx.device)).square().mean()
        with CollectiveCounter() as bwd:
            loss.backward()
        counts.append(bwd.as_dict().get("all_reduce", 0))
    return counts


def syncbn_variant(ctx: RankContext, data: tuple, per_rank_batch: int, iterations: int, lr: float) -> dict:
    """SyncBatchNorm under DDP: measured on CUDA; on CPU, DDP's refusal is recorded instead."""
    model = nn.SyncBatchNorm.convert_sync_batchnorm(bn_mlp())
    if ctx.device.type != "cuda":
        try:
            wrap_ddp(model, ctx.device)
        except ValueError as err:  # DDP: "SyncBatchNorm layers only work with GPU modules"
            return {"measured": False, "reason": str(err)}
    return {"measured": True, **train_variant(ctx, model, data, per_rank_batch, iterations, lr)}


def legacy_init_sync(ctx: RankContext) -> dict:
    """The deprecated ``broadcast_buffers=False``: is the buffer synced when DDP is constructed?"""
    model = bn_mlp()
    bn = _batchnorm(model)
    assert bn is not None, "bn_mlp has a BatchNorm"
    bn.running_mean.fill_(ctx.rank + 1.0)  # 랭크마다 다른 버퍼
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrap_ddp(model, ctx.device, broadcast_buffers=False)
    assert bn.running_mean is not None, "track_running_stats"
    return {"running_mean0": float(bn.running_mean[0]), "warnings": sorted({w.category.__name__ for w in caught})}


class ForwardRecord(Described):
    """What each rank of the 'forward' lab returns."""

    variants: dict[str, dict[str, list]]
    buffers: list[dict[str, Any]]
    n_params: int
    wide_backward: list[int]
    legacy: dict[str, Any]
    syncbn_skipped: str | None


def rank_fn(ctx: RankContext, per_rank_batch: int, iterations: int, lr: float, seed: int,
            data_seed: int) -> ForwardRecord:
    data = synthetic_regression(ctx.world_size * per_rank_batch * iterations, seed=data_seed)
    variants = {}
    for name, (make_model, ddp_kwargs) in VARIANTS.items():
        torch.manual_seed(seed)
        variants[name] = train_variant(ctx, make_model(), data, per_rank_batch, iterations, lr, **ddp_kwargs)
    torch.manual_seed(seed)
    syncbn = syncbn_variant(ctx, data, per_rank_batch, iterations, lr)
    if syncbn["measured"]:
        variants["syncbn"] = syncbn
    buffers = [{"name": n, "dtype": str(b.dtype).replace("torch.", ""), "numel": b.numel()}
               for n, b in bn_mlp().named_buffers()]
    return {**ctx.describe(), "variants": variants, "buffers": buffers, "n_params": count_parameters(tiny_mlp()),
            "wide_backward": wide_backward_counts(ctx, iterations, seed),
            "legacy": legacy_init_sync(ctx), "syncbn_skipped": None if syncbn["measured"] else syncbn["reason"]}


# --- summarize: 랭크들의 기록을 모아 주장을 확인한다 ---------------------------------------------

def _total(counts: dict) -> int:
    return sum(counts.values())


def steady_iterations(variant: dict) -> list[int]:
    """Iterations whose forward did not rebuild DDP's buckets."""
    return [i for i, rebuilt in enumerate(variant["rebuilt"]) if not rebuilt]


def _per_rank(ranks: RankRecords, name: str) -> list[dict]:
    return [r["variants"][name] for r in ranks]


def _max_spread(rows: list[list[float]]) -> float:
    """Largest absolute difference between any rank's row and rank 0's."""
    return max((abs(a - b) for row in rows for a, b in zip(row, rows[0])), default=0.0)


def _distinct(rows: list[list[float]]) -> int:
    return len({tuple(round(v, 9) for v in row) for row in rows})


def _loss_checks(ranks: RankRecords, n: int) -> list[Check]:
    losses = [r["variants"]["plain"]["losses"] for r in ranks]
    distinct = min(_distinct([[r[i]] for r in losses]) for i in range(len(losses[0])))
    gap = max(abs(sum(col) / n - g) for col, g in zip(zip(*losses), ranks[0]["variants"]["plain"]["global_losses"]))
    return [
        check_equal("losses_differ", distinct, n,
                    f"반복마다 랭크 {n}개의 손실 L_i가 서로 다른 값이다(서로 다른 값의 개수, 반복 중 최소; N=1이면 1개로 자명)"),
        check_close("mean_loss_is_global_loss", gap, 0.0, 1e-6,
                    "L_i의 평균 (1/N) Σ L_i = 같은 파라미터로 전역 배치 B개 전체에 대해 계산한 손실(반복 중 최대 차이)"),
    ]


def _plain_checks(ranks: RankRecords, iterations: int) -> list[Check]:
    plain = _per_rank(ranks, "plain")
    rebuild = sorted({i for v in plain for i, flag in enumerate(v["rebuilt"]) if flag})
    with_comm = sorted({i for v in plain for i, c in enumerate(v["forward"]) if _total(c)})
    steady = sum(_total(v["forward"][i]) for v in plain for i in steady_iterations(v))
    return [
        check_equal("rebuild_at_second_forward", rebuild, [1] if iterations >= 2 else [],
                    "DDP가 버킷을 재구성한 반복은 두 번째 순전파(반복 1) 하나뿐이다"),
        check_equal("plain_forward_comm_only_at_rebuild", with_comm, rebuild,
                    "일반 모델의 순전파에서 집합 통신이 있었던 반복 = 버킷을 재구성한 반복"),
        check_equal("plain_forward_steady_zero", steady, 0,
                    "일반 모델: 재구성 반복을 뺀 모든 순전파의 집합 통신 수(모든 랭크 합계)는 0이다"),
    ]


def _backward_check(ranks: RankRecords) -> Check:
    fewest = min(c.get("all_reduce", 0) for r in ranks for v in r["variants"].values() for c in v["backward"])
    return check_at_least("every_backward_all_reduces", fewest, 1,
                 "모든 모델, 모든 랭크, 모든 반복의 역전파에 all_reduce가 1번 이상 있다(최솟값)")


def _bucket_checks(ranks: RankRecords) -> list[Check]:
    """Iteration 0 has one bucket (defaults), even for a model DDP later splits; find_unused adds one."""
    defaults = [name for name, (_, kwargs) in VARIANTS.items() if not kwargs.get("find_unused_parameters")]
    first = sorted({r["variants"][name]["backward"][0].get("all_reduce", 0) for r in ranks for name in defaults}
                   | {r["wide_backward"][0] for r in ranks})
    wide_later = min(c for r in ranks for c in r["wide_backward"][1:])
    extra = sorted({u.get("all_reduce", 0) - p.get("all_reduce", 0) for r in ranks
                    for p, u in zip(r["variants"]["plain"]["backward"], r["variants"]["plain_unused"]["backward"])})
    return [
        check_equal("first_backward_one_bucket", first, [1],
                    "기본 인자에서 반복 0의 역전파는 모든 그래디언트를 버킷 하나로 All-Reduce한다"
                    "(모든 모델·랭크의 반복 0 all_reduce 수, 3 MiB 모델 포함)"),
        check_at_least("wide_split_after_rebuild", wide_later, 2,
                       "같은 3 MiB 모델도 버킷을 재구성한 뒤(반복 1부터)에는 버킷 여러 개로 나뉜다(all_reduce 수 최솟값)"),
        check_equal("find_unused_adds_all_reduce", extra, [1],
                    "find_unused_parameters=True이면 역전파마다 all_reduce가 하나 더 있다(쓰이지 않은 파라미터 표시, 반복마다의 차이)"),
    ]


def _bn_checks(ranks: RankRecords, n: int, iterations: int) -> list[Check]:
    sync, nosync = _per_rank(ranks, "bn_sync"), _per_rank(ranks, "bn_nosync")
    buffer_numel = sum(b["numel"] for b in ranks[0]["buffers"])
    fewest = min(v["forward"][i].get("broadcast", 0) for v in sync for i in steady_iterations(v))
    carried = sorted({sum(it["numel"] for it in v["forward_items"][i] if it["op"] == "broadcast")
                      for v in sync for i in steady_iterations(v)})
    sync_spread = max(_max_spread([v["bn_entry_mean"][i] for v in sync]) for i in range(iterations))
    nosync_steady = sum(_total(v["forward"][i]) for v in nosync for i in steady_iterations(v))
    init_dev = max(abs(x - 1.0) for v in nosync for x in v["bn_entry_mean"][0])
    last = _distinct([v["bn_entry_mean"][-1] for v in nosync])
    loss_gap = max(abs(a - b) for s, o in zip(sync, nosync) for a, b in zip(s["losses"], o["losses"]))
    return [
        check_at_least("bn_sync_forward_broadcasts", fewest, 1,
              "BatchNorm·버퍼 동기화 켬: 재구성 반복을 뺀 모든 순전파에 broadcast가 1번 이상 있다(최솟값)"),
        check_equal("bn_broadcast_is_buffers", carried, [buffer_numel],
                    f"그 broadcast가 나르는 원소 수 = BatchNorm 버퍼 원소 수 {buffer_numel}개"
                    "(running_mean·running_var·num_batches_tracked)"),
        check_close("bn_sync_buffers_identical", sync_spread, 0.0, 0.0,
                    "버퍼 동기화 켬: BatchNorm에 들어가는 순간의 running_mean이 모든 반복에서 랭크 간에 같다(최대 차이)"),
        check_close("bn_sync_keeps_training_losses", loss_gap, 0.0, 1e-6,
                    "학습 모드의 BatchNorm은 미니배치 통계로 정규화하므로, 버퍼 동기화를 켜든 끄든 손실 L_i가 같다(최대 차이)"),
        check_equal("bn_nosync_forward_zero", nosync_steady, 0,
                    "forward_sync_buffers=False: 재구성 반복을 뺀 순전파의 집합 통신 수(모든 랭크 합계)는 0이다"),
        check_equal("bn_nosync_buffers_diverge", last, n if iterations >= 2 else 1,
                    "forward_sync_buffers=False: 마지막 순전파에서 running_mean이 랭크마다 다르다(서로 다른 값의 개수; N=1이면 1)"),
        check_close("init_sync_despite_forward_sync_off", init_dev, 0.0, 0.0,
                    "forward_sync_buffers=False여도 DDP 생성자는 버퍼를 동기화한다: "
                    "첫 순전파의 running_mean = 랭크 0의 초기값 1.0(최대 차이)"),
        check_equal("legacy_broadcast_buffers_skips_init", [r["legacy"]["running_mean0"] for r in ranks],
                    [r + 1.0 for r in range(n)],
                    "예전 인자 broadcast_buffers=False로 감싸면 생성자도 버퍼를 맞추지 않는다: 랭크 i의 running_mean은 그대로 i+1"),
        check_equal("legacy_warns", sorted({w for r in ranks for w in r["legacy"]["warnings"]}), ["FutureWarning"],
                    "broadcast_buffers 인자를 쓰면 deprecated 경고(FutureWarning)가 난다"),
    ]


def _syncbn_checks(ranks: RankRecords, n: int) -> list[Check]:
    if ranks[0]["syncbn_skipped"]:
        return []  # CPU에서는 측정하지 않는다: 이유는 data["syncbn_skipped"]에 있다
    fewest = min(sum(k for op, k in v["forward"][i].items() if "gather" in op)
                 for v in _per_rank(ranks, "syncbn") for i in steady_iterations(v))
    ok = fewest >= 1 if n >= 2 else fewest == 0
    return [check_true("syncbn_forward_all_gather", ok, fewest,
                  "SyncBatchNorm: N≥2이면 모든 순전파에 통계 all_gather가 있다(최솟값). N=1이면 일반 BatchNorm으로 돌아가 0")]


def count_table(ranks: RankRecords) -> dict:
    """Rank 0's collective counts, per variant, phase and iteration (all ranks ran the same ones)."""
    return {name: {phase: v[phase] for phase in ("forward", "backward")} | {"rebuilt": v["rebuilt"]}
            for name, v in ranks[0]["variants"].items()}


class ForwardData(TypedDict):
    """The summary data of the 'forward' lab."""

    losses: list[list[float]]
    mean_losses: list[float]
    global_losses: list[float]
    counts: dict[str, dict[str, list]]
    items: dict[str, dict[str, list]]
    buffers: list[dict[str, Any]]
    n_params: int
    wide_backward: list[int]
    legacy_running_mean0: list[float]
    syncbn_skipped: str | None


def summarize(ranks: list[ForwardRecord], backend: str, params: dict[str, Any]) -> Summary[ForwardData]:
    n, iterations = len(ranks), params["iterations"]
    tables = [[(v["forward"], v["backward"]) for v in r["variants"].values()] for r in ranks]
    checks = [
        *_loss_checks(ranks, n),
        check_equal("counts_same_on_all_ranks", sum(t != tables[0] for t in tables), 0,
                    "집합 통신은 모든 랭크가 함께 하므로 랭크마다 센 횟수가 같다(다른 랭크 수)"),
        *_plain_checks(ranks, iterations),
        _backward_check(ranks),
        *_bucket_checks(ranks),
        *_bn_checks(ranks, n, iterations),
        *_syncbn_checks(ranks, n),
    ]
    losses = [r["variants"]["plain"]["losses"] for r in ranks]
    data: ForwardData = {
        "losses": losses,
        "mean_losses": [sum(col) / n for col in zip(*losses)],
        "global_losses": ranks[0]["variants"]["plain"]["global_losses"],
        "counts": count_table(ranks),
        "items": {name: {p: v[f"{p}_items"] for p in ("forward", "backward")}
                  for name, v in ranks[0]["variants"].items()},
        "buffers": ranks[0]["buffers"],
        "n_params": ranks[0]["n_params"],
        "wide_backward": ranks[0]["wide_backward"],
        "legacy_running_mean0": [r["legacy"]["running_mean0"] for r in ranks],
        "syncbn_skipped": ranks[0]["syncbn_skipped"],
    }
    return Summary(data, checks)


LAB = Lab(
    name="forward",
    description="순전파 동안 각 랭크의 프로세스 그룹이 실제로 실행한 집합 통신을 반복마다 세어, "
                "그래디언트 통신은 역전파에만 있고 순전파에는 버퍼·버킷 정보 브로드캐스트만 있음을 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=3,
    chapter=2,
    params={"per_rank_batch": Int(8, min=2, max=1024, help="랭크당 배치 B/N (BatchNorm이 학습 중 채널마다 값 2개 이상을 요구)"),
            "iterations": Int(4, min=2, max=50, help="반복 수 (버킷 재구성을 보려면 2 이상)"),
            "lr": Float(0.1, min=0.0, max=1.0, min_open=True, help="학습률 η (1보다 크면 발산할 수 있다)"),
            "seed": seed(), "data_seed": seed()},
    record=ForwardRecord,
    data=ForwardData,
)
