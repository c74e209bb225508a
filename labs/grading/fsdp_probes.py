"""The ranks' side of grading a small FSDP, ``FullyShardedDP(module, compute_dtype=None)`` (verdicts:
:mod:`labs.grading.fsdp_judge`). An exception is tagged with its phase, so that a weight freed before backward is
told from any other error.

- ``train``: K steps of SGD (momentum) and AdamW next to one process on the global batch: each iteration's
  floating-point collectives, then ``gather_full_params()`` against the single process.
- ``grads``: one plain SGD step with ``lr`` = 1: the update ``w0 − w1`` of each full parameter is the gradient the
  step used (whatever the shards' layout), fitted against the global-batch mean at ``w0`` and this rank's own.
- ``memory``: the wrapper's parameter bytes against the wrapped weights; after forward, what the wrapper and the
  autograd graph keep beyond the same model unwrapped (activations cancel); after backward, beyond its parameters and grads.
- ``mixed``: one iteration with ``compute_dtype=torch.bfloat16``: the dtypes of the parameters and their gradients.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import cast

import torch
import torch.distributed as dist
from torch import nn

from ..context import RankContext
from ..ddp.fsdp import own_weight, sharded_modules
from ..tools.comms import CollectiveCounter
from ..tools.models import mse_backward, rank_batch, storage_bytes
from ..tools.primitives import max_abs_diff
from .config import OPTIMIZER_ARGS, ProbeConfig
from .probes import Graded, ProbeFn, Record, compare_grad, finish, float_calls, oracle_grads, start
from .reach import held_bytes

IMPLIED_LR = 1.0  # grads: w0 − w1이 곧 그래디언트가 되는 학습률


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Tag an exception raised inside with the phase of the iteration (kept if an inner phase set one)."""
    try:
        yield
    except BaseException as error:
        if not hasattr(error, "labs_phase"):
            with suppress(AttributeError):  # 속성을 받지 않는 예외는 표시 없이
                setattr(error, "labs_phase", name)  # 읽는 사람의 예외에 붙이는 표시
        raise


def iteration(wrapped: nn.Module, x: torch.Tensor, y: torch.Tensor, after_forward: Callable[[torch.Tensor], int] = lambda loss: 0) -> int:
    """One iteration, each phase tagged; returns what ``after_forward`` measured of the loss (its graph alive)."""
    with phase("forward"):
        loss = nn.functional.mse_loss(wrapped(x), y)
    measured = after_forward(loss)
    with phase("backward"):
        loss.backward()
    with phase("finish"):
        finish(wrapped)
    return measured


def gathered(wrapped: nn.Module) -> dict[str, torch.Tensor]:
    with phase("gather"):
        return {name: t.detach().double() for name, t in cast(Graded, wrapped).gather_full_params().items()}


def probe_train(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    init, x, y = start(ctx, cfg, cfg.steps)
    out: Record = {"names": [name for name, _ in init.named_parameters()], "runs": {}}
    for opt_name, (opt_cls, kwargs) in OPTIMIZER_ARGS.items():
        single, wrapped = copy.deepcopy(init), cls(copy.deepcopy(init))
        mine, theirs = opt_cls(wrapped.parameters(), **kwargs), opt_cls(single.parameters(), **kwargs)
        calls = []
        for step in range(cfg.steps):
            mine.zero_grad()
            theirs.zero_grad()
            with CollectiveCounter() as counter:
                iteration(wrapped, *rank_batch(x, y, ctx.rank, n, per_rank, step))
            calls.append(float_calls(counter))
            with phase("step"):
                mine.step()
            mse_backward(single, *rank_batch(x, y, 0, 1, n * per_rank, step))
            theirs.step()
        full, ref = gathered(wrapped), dict(single.named_parameters())
        same = set(full) == set(ref) and all(full[k].shape == ref[k].shape for k in ref)  # 이름과 모양이 같을 때만 견준다
        out["runs"][opt_name] = {"calls": calls, "names": sorted(full),
                                 "diff": max_abs_diff([full[k] for k in ref], list(ref.values())) if same else None}
    return out


def probe_grads(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    init, x, y = start(ctx, cfg, seed=1)
    wrapped = cls(copy.deepcopy(init))
    opt = torch.optim.SGD(wrapped.parameters(), lr=IMPLIED_LR)
    before = gathered(wrapped)
    opt.zero_grad()
    iteration(wrapped, *rank_batch(x, y, ctx.rank, n, per_rank))
    with phase("step"):
        opt.step()
    after = gathered(wrapped)
    oracle = copy.deepcopy(init)
    with torch.no_grad():
        for name, p in oracle.named_parameters():
            p.copy_(before[name])
    target = oracle_grads(oracle, x, y)  # 같은 가중치에서 전역 배치의 평균 그래디언트
    own = [oracle_grads(oracle, *rank_batch(x, y, r, n, per_rank)) for r in range(n)]  # 랭크마다 자기 것
    names = [name for name, _ in oracle.named_parameters()]
    return {"names": names,
            "grads": [compare_grad((before[k] - after[k]) / IMPLIED_LR, target[i], [o[i] for o in own], ctx.rank, None)
                      for i, k in enumerate(names)]}


def _own(model: nn.Module) -> list[torch.Tensor | None]:
    return [t for p in model.parameters() for t in (p, p.grad)]


def probe_memory(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    init, xs, ys = start(ctx, cfg)
    x, y = rank_batch(xs, ys, ctx.rank, ctx.world_size, cfg.per_rank_batch)
    # 나눌 가중치: 인터페이스의 규칙(labs/ddp/fsdp.py) 그대로
    weights = [w for _, m in sharded_modules(init) if (w := own_weight(m)) is not None]
    shards = {id(w) for w in weights}
    single = copy.deepcopy(init)
    single_loss = nn.functional.mse_loss(single(x), y)  # 감싸지 않은 같은 모델, 같은 배치: 활성값만 살아 있다
    baseline = held_bytes([single, single_loss.grad_fn], _own(single))
    wrapped = cls(copy.deepcopy(init))
    after_forward = iteration(wrapped, x, y, lambda loss: held_bytes([wrapped, loss.grad_fn], _own(wrapped)))
    return {"param_bytes": storage_bytes(wrapped.parameters()),
            "weight_bytes": [w.numel() * w.element_size() for w in weights],
            "other_bytes": sum(p.numel() * p.element_size() for p in init.parameters() if id(p) not in shards),
            "after_forward": after_forward - baseline,
            "after_backward": held_bytes([wrapped], _own(wrapped))}


def probe_mixed(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    init, x, y = start(ctx, cfg)
    wrapped = cls(copy.deepcopy(init), compute_dtype=torch.bfloat16)
    iteration(wrapped, *rank_batch(x, y, ctx.rank, ctx.world_size, cfg.per_rank_batch))
    return {"params": [[name, *(None if t is None else str(t.dtype).removeprefix("torch.") for t in (p, p.grad))]
                       for name, p in wrapped.named_parameters()]}


PROBE_FNS: dict[str, ProbeFn] = {"train": probe_train, "grads": probe_grads, "memory": probe_memory, "mixed": probe_mixed}
