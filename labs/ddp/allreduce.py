"""Chapter 4: two All-Reduce implementations next to the ring (:mod:`labs.ddp.ring`).

Every implementation leaves the SUM over all ranks in the rank's tensor; the caller divides by N for the mean.
Our own implementations send through a :class:`~labs.ddp.ring.P2P`, which counts the bytes they write.
``average_gradients`` is chapter 4's step by hand: the loop DDP replaces.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist

from labs.ddp.ring import P2P


def library_all_reduce_(buf: torch.Tensor) -> torch.Tensor:
    """PyTorch's collective (gloo: a ring in C++; NCCL: ring or tree)."""
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    return buf


def naive_all_reduce_(buf: torch.Tensor, p2p: P2P) -> torch.Tensor:
    """Everyone sends its whole tensor to rank 0, which adds them up and sends the sum back."""
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        incoming = torch.empty_like(buf)
        for src in range(1, n):  # 랭크 0이 (N-1)·S 바이트를 받고
            p2p.recv(incoming, src)
            buf.add_(incoming)
        for dst in range(1, n):  # (N-1)·S 바이트를 보낸다: 랭크 0이 병목
            p2p.send(buf, dst)
    else:
        p2p.send(buf, 0)
        p2p.recv(buf, 0)
    return buf


def average_gradients(params: Iterable[torch.Tensor], world_size: int) -> None:
    """After backward, one All-Reduce per parameter's gradient, then divide by N: the loop DDP replaces."""
    for p in params:
        dist.all_reduce(p.grad)      # 합(SUM)
        p.grad.div_(world_size)      # 평균은 직접 나눠야 한다
