"""The ranks' side of grading a small FSDP, ``FullyShardedDP(module, compute_dtype=None)``.

Like :mod:`labs.grading.probes`, nothing here judges; the verdicts are in :mod:`labs.grading.fsdp_judge`.
An exception is tagged with the phase it came from (``forward``, ``backward``, ``finish``, ``step``,
``gather``), so the judge can tell a weight freed before backward from any other error.

- ``train``: K steps with SGD (momentum) and with AdamW of the optimizer over the wrapper's parameters,
  next to one process on the global batch; the collectives of each iteration (the process group's work
  items that carried floating-point values), then ``gather_full_params()`` against the single process.
- ``grads``: one step of plain SGD with ``lr`` = 1 from the gathered weights: the update ``w0 − w1`` of
  each full parameter is the gradient the step used, fitted against the global-batch mean gradient at
  ``w0`` and against this rank's own gradient (any layout of the shards gives the same full update).
- ``memory``: the bytes of the wrapper's parameters (distinct storages) against the wrapped layers'
  weights; after forward, the storages the wrapper and the autograd graph keep alive beyond those of the
  same model without the wrapper (activations cancel); after backward, what the wrapper keeps beyond its
  parameters and their gradients.
- ``mixed``: one iteration with ``compute_dtype=torch.bfloat16``: the dtype of each parameter the
  optimizer sees and of its gradient.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from torch import nn

from ..tools.comms import CollectiveCounter
from ..context import RankContext
from ..tools.models import layer_stack, mse_backward, rank_batch, storage_bytes
from ..tools.primitives import max_abs_diff
from .probes import OPTIMIZER_ARGS, ProbeConfig, _data, _oracle_grads, compare_grad, float_calls
from .reach import reachable

PROBES = ("train", "grads", "memory", "mixed")
SHARDED = (nn.Linear, nn.Embedding)  # 가중치를 나누는 층 (인터페이스가 정한 것)
IMPLIED_LR = 1.0  # grads: w0 − w1이 곧 그래디언트가 되는 학습률


@contextmanager
def phase(name: str):
    """Tag an exception raised inside with the phase of the iteration (kept if an inner phase set one)."""
    try:
        yield
    except BaseException as error:
        if not hasattr(error, "labs_phase"):
            try:
                error.labs_phase = name
            except AttributeError:  # 속성을 받지 않는 예외
                pass
        raise


def iteration(wrapped: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    with phase("forward"):
        loss = nn.functional.mse_loss(wrapped(x), y)
    with phase("backward"):
        loss.backward()
    with phase("finish"):
        wrapped.finish_gradient_synchronization()


def gathered(wrapped: nn.Module) -> dict[str, torch.Tensor]:
    with phase("gather"):
        return {name: t.detach().double() for name, t in wrapped.gather_full_params().items()}


def full_diff(full: dict, model: nn.Module) -> float | None:
    """Max |difference| from ``model``'s parameters by name; None if the names or shapes differ."""
    ref = dict(model.named_parameters())
    if set(full) != set(ref) or any(full[k].shape != ref[k].shape for k in ref):
        return None
    return max_abs_diff([full[k] for k in ref], list(ref.values()))


def probe_train(ctx: RankContext, cls: type, cfg: ProbeConfig, original) -> dict:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    torch.manual_seed(cfg.seed)
    init = layer_stack(cfg.width, cfg.depth).to(ctx.device)
    x, y = _data(cfg.width, cfg.steps * n * per_rank, cfg.seed, ctx.device)
    out = {"names": [name for name, _ in init.named_parameters()], "runs": {}}
    for opt_name, (opt_cls, kwargs) in OPTIMIZER_ARGS.items():
        single = copy.deepcopy(init)
        wrapped = cls(copy.deepcopy(init))
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
        full = gathered(wrapped)
        out["runs"][opt_name] = {"calls": calls, "diff": full_diff(full, single), "names": sorted(full)}
    return out


def probe_grads(ctx: RankContext, cls: type, cfg: ProbeConfig, original) -> dict:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    torch.manual_seed(cfg.seed)
    init = layer_stack(cfg.width, cfg.depth).to(ctx.device)
    x, y = _data(cfg.width, n * per_rank, cfg.seed + 1, ctx.device)
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
    target = _oracle_grads(oracle, x, y)  # 같은 가중치에서 전역 배치의 평균 그래디언트
    own = [_oracle_grads(oracle, *rank_batch(x, y, r, n, per_rank)) for r in range(n)]  # 랭크마다 자기 것
    names = [name for name, _ in oracle.named_parameters()]
    return {"names": names,
            "grads": [compare_grad((before[k] - after[k]) / IMPLIED_LR, target[i], [o[i] for o in own], ctx.rank, None)
                      for i, k in enumerate(names)]}


def alive_bytes(roots: list, exclude: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages of every tensor reachable from ``roots``, those of ``exclude``
    (parameters and their gradients) left out."""
    skip = {t.untyped_storage().data_ptr() for t in exclude if t is not None}
    return storage_bytes(t for t in reachable(*roots) if torch.is_tensor(t)
                         and t.untyped_storage().data_ptr() not in skip)


def _own(model: nn.Module) -> list[torch.Tensor]:
    return [t for p in model.parameters() for t in (p, p.grad)]


def probe_memory(ctx: RankContext, cls: type, cfg: ProbeConfig, original) -> dict:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    torch.manual_seed(cfg.seed)
    init = layer_stack(cfg.width, cfg.depth).to(ctx.device)
    x, y = rank_batch(*_data(cfg.width, n * per_rank, cfg.seed, ctx.device), ctx.rank, n, per_rank)
    weights = [m.weight for m in init.modules() if isinstance(m, SHARDED)]
    shards = {id(w) for w in weights}
    single = copy.deepcopy(init)
    single_loss = nn.functional.mse_loss(single(x), y)  # 감싸지 않은 같은 모델, 같은 배치: 활성값만 살아 있다
    baseline = alive_bytes([single, single_loss.grad_fn], _own(single))
    wrapped = cls(copy.deepcopy(init))
    with phase("forward"):
        loss = nn.functional.mse_loss(wrapped(x), y)
    after_forward = alive_bytes([wrapped, loss.grad_fn], _own(wrapped))
    with phase("backward"):
        loss.backward()
    with phase("finish"):
        wrapped.finish_gradient_synchronization()
    del loss
    return {"param_bytes": storage_bytes(wrapped.parameters()),
            "weight_bytes": [w.numel() * w.element_size() for w in weights],
            "other_bytes": sum(p.numel() * p.element_size() for p in init.parameters() if id(p) not in shards),
            "after_forward": after_forward - baseline,
            "after_backward": alive_bytes([wrapped], _own(wrapped))}


def probe_mixed(ctx: RankContext, cls: type, cfg: ProbeConfig, original) -> dict:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    torch.manual_seed(cfg.seed)
    init = layer_stack(cfg.width, cfg.depth).to(ctx.device)
    x, y = _data(cfg.width, n * per_rank, cfg.seed, ctx.device)
    wrapped = cls(copy.deepcopy(init), compute_dtype=torch.bfloat16)
    iteration(wrapped, *rank_batch(x, y, ctx.rank, n, per_rank))
    return {"params": [[name, _dtype(p), None if p.grad is None else _dtype(p.grad)]
                       for name, p in wrapped.named_parameters()]}


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


PROBE_FNS = {"train": probe_train, "grads": probe_grads, "memory": probe_memory, "mixed": probe_mixed}
