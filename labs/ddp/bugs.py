"""A gallery of named bugs (chapter 9): each a small override of the reference in :mod:`labs.ddp.miniddp`.

Every class here is a mistake a reader can really make. ``python -m labs grade labs/ddp/bugs.py
--class NAME`` runs it on real ranks; ``BUGS`` maps each name to the grader check that must catch
it (the first failing check in the grader's order is its diagnosis).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from labs.ddp.miniddp import BucketedDDP, PerParameterDDP


class NoDivision(BucketedDDP):
    """Sums the gradients but never divides by N: SGD takes N times larger steps."""

    def finish_gradient_synchronization(self) -> None:
        world_size, self.world_size = self.world_size, 1   # 나누기를 빠뜨린 것과 같다
        try:
            super().finish_gradient_synchronization()
        finally:
            self.world_size = world_size


class NoBroadcast(BucketedDDP):
    """Skips the broadcast at construction: each rank keeps its own random initial weights."""

    def _broadcast_from_rank0(self) -> None:
        pass


class NoBufferBroadcast(BucketedDDP):
    """Broadcasts the parameters but not the buffers: BatchNorm's running statistics stay per rank."""

    def _broadcast_from_rank0(self) -> None:
        with torch.no_grad():
            for p in self.module.parameters():
                dist.broadcast(p, src=0)


class HookBeforeAccumulation(PerParameterDDP):
    """``register_hook`` fires before the gradient is accumulated into ``p.grad``: it reduces the
    incoming gradient, while autograd stores a copy of it in ``p.grad`` that is never reduced."""

    def _watch(self, p: nn.Parameter, fn) -> None:
        p.register_hook(lambda grad: self._launch(p, grad))


class NoWait(PerParameterDDP):
    """Divides without waiting on the async handles: the sum may not have arrived yet."""

    def finish_gradient_synchronization(self) -> None:
        for p, _work in self._pending:
            p.grad.div_(self.world_size)
        self._pending.clear()


class HooksEveryIteration(PerParameterDDP):
    """Registers the hooks again after every iteration: each backward launches one more All-Reduce per
    parameter than the one before (a leak of hooks, and of communication)."""

    def finish_gradient_synchronization(self) -> None:
        super().finish_gradient_synchronization()
        for p in self.trainable:
            self._watch(p, self._on_grad_ready)


class FrozenCommunicated(BucketedDDP):
    """Puts every parameter in the buckets, frozen ones too."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0):
        self._all = list(module.parameters())
        super().__init__(module, bucket_cap_mb)

    def _fill_order(self) -> list[nn.Parameter]:
        return list(reversed(self._all))


class TiedReducedTwice(BucketedDDP):
    """Lists parameters per layer, so a weight two layers share gets two slots and is reduced twice."""

    def _fill_order(self) -> list[nn.Parameter]:
        per_layer = [p for m in self.module.modules() for p in m.parameters(recurse=False) if p.requires_grad]
        return list(reversed(per_layer))


class ForwardOrderBuckets(BucketedDDP):
    """Fills buckets in forward order: bucket 0 holds the first layers, whose gradients come last,
    so no bucket can start before backward ends. Results stay right; the overlap is lost."""

    def _fill_order(self) -> list[nn.Parameter]:
        return list(self.trainable)


class RankDependentLayout(BucketedDDP):
    """Each rank computes its own cap (here from its rank): the ranks disagree on the bucket layout."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0):
        super().__init__(module, bucket_cap_mb * (1 + dist.get_rank()))


# 버그 이름 -> 그것을 잡아야 하는 채점 확인 항목(진단)
BUGS = {
    "NoDivision": "grads_averaged",
    "NoBroadcast": "broadcast_at_construction",
    "NoBufferBroadcast": "buffers_broadcast",
    "HookBeforeAccumulation": "grads_averaged",
    "NoWait": "handles_waited",
    "HooksEveryIteration": "collectives_per_iteration",
    "FrozenCommunicated": "runs_without_error",
    "TiedReducedTwice": "tied_reduced_once",
    "ForwardOrderBuckets": "launch_order",
    "RankDependentLayout": "same_collectives_on_ranks",
}
