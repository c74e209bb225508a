"""What a rank function is told about its place in the process group, and backend choice."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TypedDict

import torch
import torch.distributed as dist

from .errors import LabConfigError

BACKENDS = ("auto", "gloo", "nccl")
MAX_CPU_RANKS = 64


class Described(TypedDict):
    """What :meth:`RankContext.describe` returns; a lab's record type that spreads it inherits this."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str
    pid: int
    host: str


@dataclass(frozen=True)
class RankContext:
    """The small context every rank function receives (it never knows how it was launched)."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def describe(self) -> Described:
        """Facts that show this rank is a real, separate OS process."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "backend": self.backend,
            "device": str(self.device),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }


def resolve_backend(backend: str, nproc: int, *, gpus_per_node: int | None = None) -> str:
    """Turn ``auto``/``gloo``/``nccl`` into the backend to use for ``nproc`` ranks on this node.

    Raises :class:`LabConfigError` with a Korean message before anything is spawned.
    """
    if backend not in BACKENDS:
        raise LabConfigError(
            f"알 수 없는 백엔드입니다: {backend!r}. auto, gloo, nccl 중 하나를 쓰세요 "
            "(CPU만 있으면 gloo, GPU 노드에서는 nccl)."
        )
    gpus = torch.cuda.device_count() if gpus_per_node is None else gpus_per_node
    if backend == "auto":
        return "nccl" if gpus >= nproc and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if gpus == 0 or not dist.is_nccl_available():
            raise LabConfigError(
                "NCCL 백엔드에는 CUDA GPU와 NCCL을 지원하는 PyTorch가 필요한데, 이 기계에서는 찾지 못했습니다. "
                "CPU에서는 --backend gloo(또는 auto)를 쓰세요."
            )
        if nproc > gpus:
            raise LabConfigError(
                f"랭크 수(N={nproc})가 이 노드의 GPU 수({gpus})보다 많습니다. NCCL은 랭크마다 GPU 하나가 필요합니다. "
                f"--nproc {gpus} 이하로 줄이거나, 여러 노드에서 torchrun으로 실행하거나, --backend gloo를 쓰세요."
            )
    return backend


def check_nproc(nproc: int) -> None:
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise LabConfigError(f"랭크 수(nproc)는 1 이상의 정수여야 합니다. 받은 값: {nproc!r}")
    if nproc > MAX_CPU_RANKS:
        raise LabConfigError(
            f"한 기계에서 랭크를 {nproc}개나 띄우면 메모리와 시간이 너무 많이 듭니다. "
            f"{MAX_CPU_RANKS}개 이하로 하거나, 여러 노드에서 torchrun으로 실행하세요."
        )


def device_for(backend: str, local_rank: int) -> torch.device:
    """One GPU per rank with NCCL; the CPU otherwise."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
