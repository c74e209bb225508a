"""Chapter 13: the ``zero`` lab on real gloo ranks (ZeRO-1 state per rank, equality with DDP and one
process, the step's broadcasts), the readers' mistakes it catches, each check failing on tampered
records, and the reference ``labs.ddp.ShardedOptimizer`` itself in a real 2-rank group."""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, has_hangul, run_two_rank_script, tamper_tests

import labs
from labs.lessons import zero as zero_lab

pytestmark = pytest.mark.timeout(240)

NEEDS_TWO_RANKS = set(zero_lab.NEEDS_TWO_RANKS)


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("zero", nproc=n) for n in (1, 2, 4)}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_zero_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result, NEEDS_TWO_RANKS if n == 1 else set())
    memory = result.data["memory"]["adamw"]
    single = result.data["single_state_bytes"]
    assert memory["ddp"]["state"] == [single] * n  # DDP: N이 늘어도 랭크마다 그대로
    assert sum(memory["sharded"]["state"]) == sum(memory["zero"]["state"]) == single  # 나눠 가질 뿐, 모으면 한 벌
    # 기본 모델(8층, 텐서 16개)은 N=1, 2, 4에서 똑같이 나뉜다: 상태가 정확히 1/N
    assert result.data["state_fraction"]["sharded"] == pytest.approx(1 / n)


@pytest.fixture(scope="module")
def mistakes():
    return {m: labs.run("zero", nproc=2, mistake=m) for m in zero_lab.MISTAKE_FAILS}


@pytest.mark.parametrize("mistake", sorted(zero_lab.MISTAKE_FAILS))
def test_each_mistake_fails_exactly_its_checks(mistakes, mistake):
    result = mistakes[mistake]
    assert {c.name for c in result.failed()} == zero_lab.MISTAKE_FAILS[mistake], result.report()


def test_step_all_params_holds_the_whole_state(mistakes):
    """The mistake's state is the single process's on every rank: nothing was divided."""
    result = mistakes["step_all_params"]
    assert result.data["memory"]["adamw"]["sharded"]["state"] == [result.data["single_state_bytes"]] * 2


def _set(opt: str, path: tuple, value, ranks_to=None):
    """A tamper that sets ``record[opt][path...] = value(old)`` on the given ranks (all when None)."""
    def tamper(ranks):
        for r in ranks if ranks_to is None else [ranks[i] for i in ranks_to]:
            node = r[opt]
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value(node[path[-1]])
    return tamper


def _all_to_rank_zero(ranks):
    """Every parameter owned by rank 0 (sharded and torch's), the states consistent with it."""
    single = sum(ranks[0]["adamw"]["single"]["state_per_param"])
    for r in ranks:
        for wrapper in ("sharded", "zero"):
            run = r["adamw"][wrapper]
            run["owners"] = [0] * len(run["owners"])
            run["memory"]["state"] = single if r["rank"] == 0 else 0


def _rotate(owners: list) -> list:
    return [(o + 1) % 4 for o in owners]  # 기본 모델의 N=4 분할은 고르므로 돌려도 샤드 크기는 같다


TAMPERS = {
    "adamw_state_8_bytes_per_param": _set("adamw", ("single", "state_by_key", "exp_avg"), lambda v: v + 4, [0]),
    "params_grads_whole_every_rank": _set("adamw", ("sharded", "memory", "grads"), lambda v: v // 2, [1]),
    "ddp_state_equals_single": _set("adamw", ("ddp", "memory", "state"), lambda v: v // 4, [2]),
    # gradient_as_bucket_view=True처럼 버킷이 따로 없는 랭크
    "ddp_buckets_copy_the_gradients": lambda ranks: ranks[3]["ddp_buckets"].update(buckets=0),
    "sharded_state_matches_assignment": _set("adamw", ("sharded", "memory", "state"), lambda v: v * 4, [1]),
    "shard_fraction_near_one_over_n": _all_to_rank_zero,
    "assignment_same_as_zero_redundancy": _set("adamw", ("zero", "owners"), _rotate),
    "zero_redundancy_state_matches_partition": _set("adamw", ("zero", "memory", "state"), lambda v: v * 4, [3]),
    "sharded_matches_single": _set("sgd", ("single", "diff", "sharded_vs_single"), lambda _: 1e-3, [0]),
    "sharded_equals_ddp": _set("adamw", ("single", "diff", "sharded_vs_ddp"), lambda _: 1e-9, [1]),
    "zero_redundancy_equals_ddp": _set("sgd", ("single", "diff", "zero_vs_ddp"), lambda _: 1e-9, [2]),
    "ddp_step_no_collectives": _set("sgd", ("ddp", "steps", 0, "ops"), lambda _: {"broadcast": 1}, [2]),
    "sharded_step_broadcasts_each_param": _set("sgd", ("sharded", "steps", -1, "ops"), lambda _: {"broadcast": 15}, [1]),
    "sharded_step_sends_param_bytes": _set("adamw", ("sharded", "steps", 0, "bytes"), lambda v: v - 4, [0]),
    "zero_redundancy_step_sends_param_bytes": _set("adamw", ("zero", "steps", 1, "bytes"), lambda v: v * 2, [3]),
    "sharded_replicas_identical": _set("sgd", ("sharded", "fingerprint"), lambda _: "0" * 12, [3]),
    "assignment_same_on_every_rank": lambda ranks: [_set("adamw", (w, "owners"), _rotate, [2])(ranks)
                                                    for w in ("sharded", "zero")],
}


test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(zero_lab, TAMPERS, n=4)


# ----------------------------------------------------------------------------- ShardedOptimizer itself

UNIT = '''
import json, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn
from labs.ddp import ShardedOptimizer

def same_grads(params, step):
    gen = torch.Generator().manual_seed(step)  # 모든 랭크가 같은 그래디언트: DDP가 평균한 뒤와 같은 상황
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)

def rank_fn(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    a, b = nn.Linear(6, 5), nn.Linear(5, 3)
    ref_a, ref_b = (nn.Linear(6, 5), nn.Linear(5, 3))
    ref_a.load_state_dict(a.state_dict()); ref_b.load_state_dict(b.state_dict())
    opt = ShardedOptimizer(a.parameters(), torch.optim.AdamW, lr=0.1)
    opt.add_param_group({"params": list(b.parameters()), "lr": 0.01})  # 둘째 그룹: 다른 학습률
    ref = torch.optim.AdamW([{"params": list(ref_a.parameters())}, {"params": list(ref_b.parameters()), "lr": 0.01}], lr=0.1)
    params, ref_params = [*a.parameters(), *b.parameters()], [*ref_a.parameters(), *ref_b.parameters()]
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref, step_size=1, gamma=0.5)
    calls = []
    def closure():
        calls.append(1)
        same_grads(params, len(calls))
        return 7.0
    losses = []
    for step in range(3):
        losses.append(opt.step(closure))
        same_grads(ref_params, step + 1)
        ref.step()
        sched.step(); ref_sched.step()
    diff = max(float((p - q).abs().max()) for p, q in zip(params, ref_params))
    owned = [opt.owner[p] for p in params]
    record = {"rank": rank, "groups": [len(g["params"]) for g in opt.param_groups], "owners": owned,
              "state_params": sorted(i for i, p in enumerate(params) if p in opt.state),
              "local_state_dict": len(opt.shard_state_dict()["state"]), "diff": diff, "losses": losses,
              "calls": len(calls), "lrs": [g["lr"] for g in opt.param_groups]}
    try:  # 모으지 않은 state_dict()는 샤드를 전체인 척 돌려주지 않는다
        opt.state_dict()
        record["refused"] = None
    except RuntimeError as error:
        record["refused"] = str(error)
    opt.consolidate_state_dict(to=0)
    full = [opt.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(full, src=0)
    full, ref_state = full[0], ref.state_dict()["state"]
    # 모은 상태 = 같은 그룹의 옵티마이저 하나가 가진 상태(파라미터 번호와 값 모두)
    record["full_equals_one_optimizer"] = sorted(full["state"]) == sorted(ref_state) and all(
        torch.equal(full["state"][i][k], ref_state[i][k]) for i in ref_state for k in ref_state[i])
    again = ShardedOptimizer(a.parameters(), torch.optim.AdamW, lr=0.1)
    again.add_param_group({"params": list(b.parameters()), "lr": 0.01})
    again.load_state_dict(full)  # 다른 객체가 불러도 내 샤드만 가진다
    record["reloaded_own_shard"] = [i for i, p in enumerate(params) if p in again.state] == record["state_params"] and all(
        torch.equal(again.state[p][k], opt.state[p][k]) for p in again.state for k in opt.state[p])
    record["reloaded_lrs"] = [g["lr"] for g in again.param_groups]
    shard0 = [opt.shard_state_dict() if rank == 0 else None]
    dist.broadcast_object_list(shard0, src=0)
    try:  # 다른 랭크의 샤드는 조용히 받지 않는다
        again.load_state_dict(shard0[0])
        record["other_shard"] = None
    except RuntimeError as error:
        record["other_shard"] = str(error)
    opt.zero_grad(set_to_none=False)
    record["zeros"] = all(p.grad is not None and not p.grad.any() for p in params)
    opt.zero_grad()
    record["none"] = all(p.grad is None for p in params)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(record, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(rank_fn, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
'''


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    """ShardedOptimizer in a real 2-rank gloo group: two groups (one added later), a scheduler, a closure."""
    return run_two_rank_script(tmp_path_factory.mktemp("zero_unit"), UNIT)[1]


def test_add_param_group_keeps_every_group_and_assigns_its_params(unit):
    for r in unit:
        assert r["groups"] == [2, 2]  # param_groups는 두 그룹의 모든 파라미터를 보인다
        assert r["lrs"] == [0.1 * 0.5 ** 3, 0.01 * 0.5 ** 3]  # 스케줄러가 바꾼 학습률
    assert unit[0]["owners"] == unit[1]["owners"]  # 모든 랭크가 같은 배정
    assert sorted(set(unit[0]["owners"])) == [0, 1]
    for r in unit:  # 상태는 내 파라미터에만 있다
        assert r["state_params"] == [i for i, o in enumerate(r["owners"]) if o == r["rank"]]
        assert r["local_state_dict"] == len(r["state_params"])


def test_steps_equal_one_optimizer_with_the_same_groups_and_schedule(unit):
    assert [r["diff"] for r in unit] == [0.0, 0.0]


def test_closure_is_called_once_per_step_and_its_loss_returned(unit):
    for r in unit:
        assert r["calls"] == 3 and r["losses"] == [7.0] * 3


def test_state_dict_refuses_until_consolidated_then_is_the_whole_state(unit):
    for r in unit:
        assert "consolidate_state_dict(to=0)" in r["refused"] and has_hangul(r["refused"])
        assert r["full_equals_one_optimizer"] and r["reloaded_own_shard"]
        assert r["reloaded_lrs"] == r["lrs"]  # 하이퍼파라미터(스케줄러가 바꾼 학습률)도 되돌린다
    assert unit[0]["other_shard"] is None  # 랭크 0은 자기 샤드를 다시 불렀을 뿐이다
    assert "consolidate_state_dict" in unit[1]["other_shard"]


def test_zero_grad_clears_every_parameter_not_only_the_shard(unit):
    for r in unit:
        assert r["zeros"] and r["none"]
