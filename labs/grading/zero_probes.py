"""The ranks' side of grading a ZeRO-1 optimizer, ``ShardedOptimizer(params, optimizer_cls, **kwargs)`` (verdicts:
:mod:`labs.grading.zero_judge`). The model is wrapped in torch DDP on the grader's own process group, so every rank
holds the same mean gradient before ``step()``; the reader's optimizer works on the checked default group.

- ``train``: K steps of SGD (momentum) and AdamW through the reader's class, next to torch DDP with the plain
  optimizer and one process on the global batch: each ``step()``'s collectives and the fingerprint after it, the
  first step against DDP's and the value before, the state bytes held, what ``zero_grad()`` left, the oracles' diffs.
- ``groups``: built over half the layers, the other half added by ``add_param_group`` with another learning rate.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn

from ..context import RankContext
from ..tools.comms import CollectiveCounter
from ..tools.models import fingerprint, mse_backward, rank_batch, wrap_ddp
from ..tools.primitives import max_abs_diff
from .config import OPTIMIZER_ARGS, ProbeConfig
from .probes import ProbeFn, Record, float_calls, start
from .reach import held_bytes, reachable

LATER_LR = 0.15     # add_param_group으로 나중에 더하는 그룹의 학습률: 생성자의 lr과 달라야 무시했는지 보인다


def state_bytes(optimizer: torch.optim.Optimizer, model: nn.Module) -> int:
    """Bytes of the distinct storages in the ``state`` of the object and of every torch optimizer it keeps (found
    wherever the reader keeps its shard's optimizer), the model's parameters and gradients left out."""
    return held_bytes([obj.state for obj in reachable(optimizer) if isinstance(obj, torch.optim.Optimizer)],
                      [t for p in model.parameters() for t in (p, p.grad)])


def probe_train(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    init, x, y = start(ctx, cfg, cfg.steps)
    out: Record = {"names": [name for name, _ in init.named_parameters()], "numels": [p.numel() for p in init.parameters()],
                   "runs": {}, "diffs": {}}
    for opt_name, (opt_cls, kwargs) in OPTIMIZER_ARGS.items():
        model, ref, single = (copy.deepcopy(init) for _ in range(3))
        ddp, ref_ddp = (wrap_ddp(m, ctx.device, process_group=original) for m in (model, ref))
        mine = cls(model.parameters(), opt_cls, **kwargs)
        theirs = [opt_cls(m.parameters(), **kwargs) for m in (ref, single)]
        steps, first = [], None
        for step in range(cfg.steps):
            for opt in (mine, *theirs):
                opt.zero_grad()
            batch = rank_batch(x, y, ctx.rank, n, per_rank, step)
            mse_backward(ddp, *batch)  # DDP의 역전파: 모든 랭크가 같은 평균 그래디언트를 가진다
            mse_backward(ref_ddp, *batch)
            mse_backward(single, *rank_batch(x, y, 0, 1, n * per_rank, step))
            before = [p.detach().clone() for p in model.parameters()]
            with CollectiveCounter() as counter:
                mine.step()  # 이 안에서 일어난 집합 통신만 센다
            for opt in theirs:
                opt.step()
            steps.append({**float_calls(counter), "fingerprint": fingerprint(model)})
            if first is None:
                first = [{"ref": max_abs_diff(p, q), "before": max_abs_diff(p, b)}
                         for p, q, b in zip(model.parameters(), ref.parameters(), before)]
        mse_backward(ddp, *rank_batch(x, y, ctx.rank, n, per_rank, 0))  # 그래디언트를 하나 더 만들고 지운다
        mine.zero_grad()
        out["runs"][opt_name] = {
            "steps": steps, "first_step": first, "state_bytes": state_bytes(mine, model),
            "single_state": [held_bytes([theirs[1].state[p]]) for p in single.parameters()],
            "grads_left": [name for name, p in model.named_parameters() if p.grad is not None and bool(p.grad.abs().max() > 0)]}
        out["diffs"][opt_name] = {k: max_abs_diff(list(model.parameters()), list(m.parameters()))
                                  for k, m in (("ddp", ref), ("single", single))}
    return out


def probe_groups(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    init, x, y = start(ctx, cfg, cfg.steps)
    model, ref = copy.deepcopy(init), copy.deepcopy(init)
    ddp, ref_ddp = (wrap_ddp(m, ctx.device, process_group=original) for m in (model, ref))
    opt_cls, kwargs = OPTIMIZER_ARGS["sgd"]
    half = len(list(init.parameters())) // 2
    (early, later), (ref_early, ref_later) = ((ps[:half], ps[half:]) for ps in (list(model.parameters()), list(ref.parameters())))
    mine = cls(early, opt_cls, **kwargs)
    mine.add_param_group({"params": later, "lr": LATER_LR})  # 생성한 뒤에 더한 그룹: 다른 학습률
    theirs = opt_cls(ref_early, **kwargs)
    theirs.add_param_group({"params": ref_later, "lr": LATER_LR})
    for step in range(cfg.steps):
        for opt, wrapped in ((mine, ddp), (theirs, ref_ddp)):
            opt.zero_grad()
            mse_backward(wrapped, *rank_batch(x, y, ctx.rank, n, per_rank, step))
            opt.step()
    return {"lrs": [g.get("lr") for g in mine.param_groups], "expected_lrs": [g["lr"] for g in theirs.param_groups],
            "diffs": [max_abs_diff(early, ref_early), max_abs_diff(later, ref_later)]}


PROBE_FNS: dict[str, ProbeFn] = {"train": probe_train, "groups": probe_groups}
