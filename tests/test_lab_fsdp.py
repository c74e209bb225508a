"""Chapter 13: the ``fsdp`` lab on real gloo ranks (parameters per rank, the gathers and frees, equality
with one process, DDP and torch's fully_shard, the step's collectives, bfloat16), the readers' mistakes it
catches, each check failing on tampered records, and ``labs.ddp.FullyShardedDP`` on a model with an
Embedding and a LayerNorm."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, run_two_rank_script, tamper_tests

import labs
from labs.lessons import fsdp as fsdp_lab

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("fsdp", nproc=n) for n in (1, 3)}


@pytest.mark.parametrize("n", [1, 3])
def test_fsdp_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result)
    held = result.data["params_bytes"]
    assert held["ddp"] == 4 * result.data["n_params"]
    if n == 1:
        assert held["ours"] == held["ddp"]  # 나눌 랭크가 없으면 샤드가 곧 전체
    else:
        assert held["ours"] < held["ddp"] / 2  # N=3: 가중치는 1/3, 편향만 통째로
        assert result.data["peak_bytes"] < held["ddp"]  # 한 층을 모아도 DDP보다 적다


@pytest.fixture(scope="module")
def mistakes():
    return {m: labs.run("fsdp", nproc=2, mistake=m, **fsdp_lab.MISTAKE_PARAMS.get(m, {})) for m in fsdp_lab.MISTAKE_FAILS}


@pytest.mark.parametrize("mistake", sorted(fsdp_lab.MISTAKE_FAILS))
def test_each_mistake_fails_exactly_its_checks(mistakes, mistake):
    result = mistakes[mistake]
    assert {c.name for c in result.failed()} == fsdp_lab.MISTAKE_FAILS[mistake], result.report()


def test_own_linear_layers_are_sharded_and_match():
    """A model of the reader's own linear class: every weight matrix is sharded, every claim holds."""
    result = labs.run("fsdp", nproc=2, layers="own")
    assert result.ok, result.report()
    held = result.data["params_bytes"]
    assert held["ours"] < held["ddp"] / 1.5


def test_sharding_by_class_leaves_own_layers_whole_but_trains_the_same(mistakes):
    """The old rule (nn.Linear/Embedding only) on the reader's layers: silent, only the memory checks see it."""
    result = mistakes["shard_by_class"]
    assert result.checks["matches_single"].ok and result.checks["adamw_matches_ddp"].ok
    assert result.data["params_bytes"]["ours"] > 0.8 * result.data["params_bytes"]["ddp"]


def test_free_before_backward_finds_zero_bytes(mistakes):
    """The backward reads the freed weight: torch refuses (storage of size 0), recorded as the error."""
    assert any("storage of size 0" in e for e in mistakes["free_before_backward"].data["errors"])


def _set(path: tuple, value, ranks_to=(0,)):
    """A tamper that sets ``record[path...] = value(old)`` on the given ranks."""
    def tamper(ranks):
        for i in ranks_to:
            node = ranks[i]
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value(node[path[-1]])
    return tamper


def _swap_first_two(events):
    return [events[1], events[0], *events[2:]]


def _bump_first(kind: str):
    def change(events):
        first = next(i for i, e in enumerate(events) if e[0] == kind)
        return [e if i != first else [e[0], e[1], e[2] + 4096] for i, e in enumerate(events)]
    return change


def _drop_first_gather(items):
    first = next(i for i, item in enumerate(items) if item["op"] == "all_gather")
    return items[:first] + items[first + 1:]


def _grow_last(items):
    return items[:-1] + [{**items[-1], "numel": items[-1]["numel"] + 1}]


def _first_to_float32(items):
    return [{**items[0], "dtype": "float32"}] + items[1:]


TAMPERS = {
    "backward_completes": _set(("sgd", "ours", "error"), lambda _: "RuntimeError", [1]),
    "ddp_params_whole": _set(("adamw", "ddp", "params_bytes"), lambda v: v // 2, [2]),
    "params_shard_bytes": _set(("adamw", "ours", "params_bytes"), lambda v: v + 4, [1]),
    "torch_shards_cover_model": _set(("sgd", "torch", "params", "numel"), lambda v: v - 1),
    "timeline_gather_free_order": _set(("sgd", "ours", "events"), _swap_first_two, [1]),
    "freed_after_use": _set(("sgd", "ours", "events"), _bump_first("free_backward"), [2]),
    "peak_one_layer": _set(("sgd", "ours", "events"), _bump_first("gather_backward"), [0]),
    "matches_single": _set(("sgd", "diff", "ours_vs_single"), lambda _: 1e-3),
    "adamw_matches_ddp": _set(("adamw", "diff", "ours_vs_ddp"), lambda _: 1e-3, [2]),
    "matches_torch_fsdp": _set(("sgd", "diff", "ours_vs_torch"), lambda _: 1e-3, [1]),
    "gathers_twice_per_step": _set(("adamw", "ours", "steps", 1), _drop_first_gather, [0]),
    "reduction_carries_the_gradients": _set(("sgd", "ours", "steps", 0), _grow_last, [2]),
    "bf16_grads_stored_fp32": _set(("bf16", "grad_dtypes"), lambda _: ["bfloat16"], [1]),
    "bf16_communication": _set(("bf16", "steps", 2), _first_to_float32, [0]),
    "bf16_close_to_fp32": _set(("bf16", "diff_vs_single"), lambda _: 1.0, [2]),
    "every_matrix_sharded": _set(("adamw", "ours", "n_sharded"), lambda v: v - 1, [1]),
    "sharded_norm_matches_single": _set(("norms", "sharded"), lambda v: v * 1.001, [2]),
    "fsdp2_norm_matches_single": _set(("norms", "fsdp2"), lambda v: v * 1.001, [0]),
    "plain_clip_norm_is_local": lambda ranks: [r["norms"].update(local=ranks[0]["norms"]["local"]) for r in ranks],
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(fsdp_lab, TAMPERS, n=3)


# ----------------------------------------------------------------------------- FullyShardedDP itself

UNIT = '''
import json, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn
from labs.ddp import FullyShardedDP
from labs.ddp.fsdp import sharded_modules

def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(11, 6), nn.LayerNorm(6), nn.Linear(6, 5))

def rank_fn(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tokens = torch.arange(16) % 11
    target = torch.linspace(-1, 1, 16 * 5).reshape(16, 5)
    record = {"rank": rank}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        single, fsdp = model(), FullyShardedDP(model(), compute_dtype=dtype)
        opt_single = torch.optim.SGD(single.parameters(), lr=0.1)
        opt = torch.optim.SGD(fsdp.parameters(), lr=0.1)
        for step in range(2):
            opt_single.zero_grad()
            nn.functional.mse_loss(single(tokens), target).backward()
            opt_single.step()
            mine = slice(rank * 8, rank * 8 + 8)  # 전역 배치 16개를 랭크마다 8개씩
            opt.zero_grad()
            nn.functional.mse_loss(fsdp(tokens[mine]), target[mine]).backward()
            fsdp.finish_gradient_synchronization()
            opt.step()
        full = fsdp.gather_full_params()
        record[name] = {
            "names": sorted(full), "single_names": sorted(n for n, _ in single.named_parameters()),
            "shapes_equal": all(full[n].shape == p.shape for n, p in single.named_parameters()),
            "diff": max(float((full[n] - p.detach()).abs().max()) for n, p in single.named_parameters()),
            "shard_numels": [p.numel() for p in fsdp.parameters()],
            "grad_dtypes": sorted({str(p.grad.dtype) for p in fsdp.parameters()}),
        }
    class MyLinear(nn.Module):  # 독자가 직접 만든 선형 층: nn.Linear가 아니다
        def __init__(self, i, o):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(o, i))
            self.bias = nn.Parameter(torch.zeros(o))
        def forward(self, x):
            return x @ self.weight.T + self.bias
    own = FullyShardedDP(nn.Sequential(MyLinear(6, 4), nn.LayerNorm(4), MyLinear(4, 3)))
    record["own_sharded"] = sorted(w.name for w in own.weights.values())
    record["own_by_class"] = sorted(name for name, _ in sharded_modules(own.module, (nn.Linear,)))
    picked = FullyShardedDP(nn.Sequential(MyLinear(6, 4), MyLinear(4, 3)), shard=lambda m: m is not None and
                            isinstance(m, MyLinear) and m.weight.shape[0] == 3)
    record["predicate_sharded"] = sorted(w.name for w in picked.weights.values())
    try:
        FullyShardedDP(nn.Sequential(MyLinear(6, 4)), shard=(nn.Linear, nn.Embedding))  # 예전 규칙: 나눌 것이 없다
        record["refused"] = None
    except ValueError as error:
        record["refused"] = str(error)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(record, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(rank_fn, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
'''


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    """FullyShardedDP in a real 2-rank gloo group on Embedding → LayerNorm → Linear, fp32 and bfloat16."""
    return run_two_rank_script(tmp_path_factory.mktemp("fsdp_unit"), UNIT)


def test_embedding_and_linear_sharded_norm_replicated(unit):
    _, records = unit
    for r in records:
        # Embedding 11×6=66 → 33, LayerNorm 6 + 6 통째로, Linear 5×6=30 → 15, 편향 5 통째로
        assert r["fp32"]["shard_numels"] == [33, 6, 6, 15, 5]
        assert r["fp32"]["names"] == r["fp32"]["single_names"] and r["fp32"]["shapes_equal"]


def test_matches_one_process_on_the_global_batch(unit):
    _, records = unit
    for r in records:
        assert r["fp32"]["diff"] < 1e-6
        assert r["bf16"]["diff"] < 1e-2 and r["bf16"]["grad_dtypes"] == ["torch.float32"]


def test_the_rule_shards_the_readers_own_layers_or_refuses_in_korean(unit):
    _, records = unit
    for r in records:
        assert r["own_sharded"] == ["0.weight", "2.weight"]  # 기본 규칙: 2차원 weight (LayerNorm의 1차원 weight는 아니다)
        assert r["own_by_class"] == []  # 클래스로 고르면 직접 만든 층은 하나도 나누지 않는다
        assert r["predicate_sharded"] == ["1.weight"]
        assert "나눌 가중치가 없어" in r["refused"] and "shard=" in r["refused"]


def test_no_warnings_on_stderr(unit):
    """The hooks FullyShardedDP uses print nothing (a chapter cell would show it as stray stderr)."""
    stderr, _ = unit
    assert "Warning" not in stderr, stderr
