"""A DDP built from scratch, one step at a time (chapter 9): the reference readers compare with.

Every class wraps a module, broadcasts its parameters and buffers from rank 0 when it is built,
passes ``forward`` through, and averages the gradients over the ranks in
``finish_gradient_synchronization()``, which the training loop calls after ``loss.backward()``
and before ``optimizer.step()``::

    model = BucketedDDP(net, bucket_cap_mb=0.25)
    loss_fn(model(x), y).backward()
    model.finish_gradient_synchronization()
    optimizer.step()

The steps of the staircase differ only in *when* and *how many* All-Reduce calls they make:

1. :class:`NaiveDDP`: after backward, one blocking All-Reduce per parameter.
2. :class:`FlatDDP`: after backward, one All-Reduce of every gradient packed in one buffer.
3. :class:`PerParameterDDP`: an async All-Reduce per parameter, launched from a hook the moment
   that parameter's gradient is accumulated, while backward still runs.
4. :class:`BucketedDDP`: gradients packed into buckets of ``bucket_cap_mb`` in reverse
   registration order; one async All-Reduce per bucket as soon as it is full (PyTorch's reducer).

Only parameters with ``requires_grad`` take part, each tensor once (``Module.parameters()``
yields a shared tensor once), so frozen parameters are never communicated and a tied weight is
reduced once. Hooks and buffers are created once and reused every iteration.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from labs.ddp.buckets import MIB, group_by_size


class _Replicated(nn.Module):
    """What every step shares: the wrapped module, the broadcast at construction, forward."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        self._broadcast_from_rank0()
        # 학습하는 파라미터만, 한 텐서는 한 번만 (parameters()는 공유된 텐서를 한 번만 낸다).
        self.trainable = [p for p in module.parameters() if p.requires_grad]

    def _broadcast_from_rank0(self) -> None:
        # 모든 랭크가 랭크 0과 같은 값에서 출발해야 같은 평균 그래디언트가 같은 업데이트가 된다.
        with torch.no_grad():
            for tensor in [*self.module.parameters(), *self.module.buffers()]:
                dist.broadcast(tensor, src=0)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        raise NotImplementedError


class NaiveDDP(_Replicated):
    """Step 1: after backward, one blocking All-Reduce per parameter gradient, then divide by N."""

    def finish_gradient_synchronization(self) -> None:
        for p in self.trainable:
            dist.all_reduce(p.grad)          # 합(SUM)
            p.grad.div_(self.world_size)     # 평균은 직접 나눠야 한다 (torch는 fp16 넘침을 막으려 더하기 전에 나눈다)


class FlatDDP(_Replicated):
    """Step 2: after backward, all gradients copied into one flat buffer and all-reduced at once."""

    def __init__(self, module: nn.Module):
        super().__init__(module)
        first = self.trainable[0]          # 버퍼는 그래디언트와 같은 자료형·장치에 (bf16 모델이면 bf16)
        self.flat = torch.zeros(sum(p.numel() for p in self.trainable), dtype=first.dtype, device=first.device)

    def finish_gradient_synchronization(self) -> None:
        views = _slices(self.flat, self.trainable)
        for p, view in zip(self.trainable, views):
            view.copy_(p.grad.reshape(-1))
        dist.all_reduce(self.flat)           # 텐서가 몇 개든 통신은 한 번
        self.flat.div_(self.world_size)
        for p, view in zip(self.trainable, views):
            p.grad.copy_(view.view_as(p))


class PerParameterDDP(_Replicated):
    """Step 3: an async All-Reduce per parameter, started by a hook while backward still runs."""

    def __init__(self, module: nn.Module):
        super().__init__(module)
        self._pending: list[tuple[nn.Parameter, dist.Work]] = []
        for p in self.trainable:             # 훅은 생성할 때 한 번만 건다
            self._watch(p, self._on_grad_ready)

    def _watch(self, p: nn.Parameter, fn) -> None:
        # 누적이 끝난 뒤에 불리는 훅: 이때 p.grad가 이번 역전파의 그래디언트다.
        p.register_post_accumulate_grad_hook(fn)

    def _on_grad_ready(self, p: nn.Parameter) -> None:
        assert p.grad is not None            # 누적이 끝난 뒤의 훅이라 p.grad가 있다
        self._launch(p, p.grad)

    def _launch(self, p: nn.Parameter, grad: torch.Tensor) -> None:
        self._pending.append((p, dist.all_reduce(grad, async_op=True)))  # 기다리지 않고 바로 돌아온다

    def finish_gradient_synchronization(self) -> None:
        for p, work in self._pending:
            work.wait()                      # 통신이 끝나야 p.grad가 합이다
            p.grad.div_(self.world_size)
        self._pending.clear()                # 다음 반복은 빈 목록에서 시작한다


class _Bucket:
    """Parameters reduced together, their flat buffer and how many of their gradients are in it."""

    def __init__(self, params: list[nn.Parameter]):
        self.params = params
        self.buffer = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        self.views = _slices(self.buffer, params)
        self.ready = 0
        self.work: dist.Work | None = None


class BucketedDDP(_Replicated):
    """Step 4: buckets of at most ``bucket_cap_mb`` MiB, filled in reverse parameter order.

    A bucket closes as soon as its size reaches the cap (a parameter larger than the cap gets a
    bucket of its own). Buckets are launched in index order, each as soon as it and every earlier
    bucket are full, so all ranks issue the same All-Reduce calls in the same order.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0):
        super().__init__(module)
        self.bucket_cap_mb = bucket_cap_mb
        self.buckets = [_Bucket(params) for params in
                        group_by_size(self._fill_order(), int(bucket_cap_mb * MIB))]
        self._next = 0                       # 다음에 시작할 버킷 번호
        for index, bucket in enumerate(self.buckets):
            for slot, p in enumerate(bucket.params):
                p.register_post_accumulate_grad_hook(
                    lambda p, b=index, s=slot: self._on_grad_ready(b, s, p))

    def _fill_order(self) -> list[nn.Parameter]:
        # 역전파는 마지막 층부터 그래디언트를 낸다: 그 순서대로 채워야 첫 버킷이 먼저 찬다.
        return list(reversed(self.trainable))

    def _on_grad_ready(self, index: int, slot: int, p: nn.Parameter) -> None:
        bucket = self.buckets[index]
        bucket.views[slot].copy_(p.grad.reshape(-1))
        bucket.ready += 1
        # 버킷은 번호 순서대로만 시작한다: 모든 랭크의 All-Reduce 순서가 같아야 한다.
        while self._next < len(self.buckets) and self._full(self.buckets[self._next]):
            self._launch(self.buckets[self._next])
            self._next += 1

    def _full(self, bucket: _Bucket) -> bool:
        return bucket.ready == len(bucket.params)

    def _launch(self, bucket: _Bucket) -> None:
        bucket.work = dist.all_reduce(bucket.buffer, async_op=True)

    def finish_gradient_synchronization(self) -> None:
        if self._next != len(self.buckets):
            missing = sum(len(b.params) - b.ready for b in self.buckets)
            raise RuntimeError(f"이번 역전파에서 그래디언트가 오지 않은 파라미터가 {missing}개 있습니다. "
                               "BucketedDDP는 학습하는 파라미터가 모두 손실에 쓰여야 합니다.")
        for bucket in self.buckets:
            bucket.work.wait()
            bucket.buffer.div_(self.world_size)
            for p, view in zip(bucket.params, bucket.views):
                p.grad.copy_(view.view_as(p))
            bucket.ready, bucket.work = 0, None
        self._next = 0


def _slices(flat: torch.Tensor, params: list[nn.Parameter]) -> list[torch.Tensor]:
    """Views of ``flat``, one per parameter, in order."""
    return list(torch.split(flat, [p.numel() for p in params]))


STEPS = {"naive": NaiveDDP, "flat": FlatDDP, "overlap": PerParameterDDP, "buckets": BucketedDDP}
