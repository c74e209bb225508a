"""Checkpoints of sharded training state (chapter 13): what to save so that resuming equals not stopping.

Under DDP the replicas are identical, so rank 0 alone can save the model and the optimizer (chapter 6).
ZeRO and FSDP divide the state over the ranks, and rank 0 holds only its shard:

* ZeRO-1 (:class:`labs.ddp.ShardedOptimizer`, torch's ``ZeroRedundancyOptimizer``): every rank calls
  ``consolidate_state_dict(to=0)``, which gathers the shards on rank 0, and rank 0 saves ``state_dict()``
  (the whole state: it loads at any number of ranks); or every rank saves its own shard to its own file.
* FSDP2 (``fully_shard``): the parameters are shards too (DTensors). ``torch.distributed.checkpoint``
  writes every rank's shards in parallel (``get_state_dict``, ``dcp.save``) and reads them back into the
  model's own shards (``dcp.load``, ``set_state_dict``).

``group`` is the process group the model trains in (None: the default group); the folder must be one
every rank of it can read (one machine, or a shared file system).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from .zero import ShardedOptimizer

CHECKPOINT = "checkpoint.pt"


class Consolidating(Protocol):
    """A ZeRO-1 optimizer whose shards one rank can gather: ShardedOptimizer, ZeroRedundancyOptimizer."""

    def consolidate_state_dict(self, to: int = 0) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def save_consolidated(folder: Path, model: nn.Module, optimizer: Consolidating,
                      group: dist.ProcessGroup | None = None) -> None:
    """ZeRO-1: gather the optimizer's shards on rank 0, which writes one file with everything."""
    optimizer.consolidate_state_dict(to=0)  # 모든 랭크가 부른다: 샤드를 랭크 0에 모은다
    if dist.get_rank(group) == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, folder / CHECKPOINT)
    dist.barrier(group=group)  # 랭크 0이 다 쓰기 전에는 아무도 읽지 않는다


def load_consolidated(folder: Path, model: nn.Module, optimizer: Consolidating) -> None:
    """Every rank reads the one file; the optimizer keeps the shard this rank owns (at any number of ranks)."""
    state = torch.load(folder / CHECKPOINT, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def save_per_rank(folder: Path, model: nn.Module, optimizer: ShardedOptimizer,
                  group: dist.ProcessGroup | None = None) -> None:
    """ZeRO-1: rank 0 writes the model (the replicas are identical), every rank its own optimizer shard."""
    rank = dist.get_rank(group)
    if rank == 0:
        torch.save(model.state_dict(), folder / "model.pt")
    torch.save(optimizer.shard_state_dict(), folder / f"optimizer.rank{rank}.pt")  # 랭크마다 자기 파일
    dist.barrier(group=group)


def load_per_rank(folder: Path, model: nn.Module, optimizer: ShardedOptimizer,
                  group: dist.ProcessGroup | None = None) -> None:
    """The model from rank 0's file, the optimizer shard from this rank's own (same ranks as when saved)."""
    model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
    optimizer.load_state_dict(torch.load(folder / f"optimizer.rank{dist.get_rank(group)}.pt", weights_only=True))


def save_fsdp2(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """FSDP2: every rank writes its own shards of the parameters and the optimizer state (in parallel)."""
    model_state, optim_state = get_state_dict(model, optimizer)  # DTensor 샤드 그대로, 모으지 않는다
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)


def load_fsdp2(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """FSDP2: read every rank's shards back into this model's and optimizer's own shards."""
    model_state, optim_state = get_state_dict(model, optimizer)  # 읽어 들일 자리: 이 랭크의 샤드 모양
    dcp.load({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
