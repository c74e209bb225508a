"""Small models the labs train (big enough to have several layers, small enough for 2 CPU cores), their
wrappers (DDP, FSDP2) and what a rank stores for them."""

from __future__ import annotations

import torch
from torch import nn


def tiny_mlp(in_features: int = 4, hidden: int = 8, out_features: int = 2) -> nn.Module:
    """A two-layer perceptron: 4·8+8 + 8·2+2 = 58 parameters with the defaults."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_features))


def bn_mlp(in_features: int = 4, hidden: int = 8, out_features: int = 2) -> nn.Module:
    """The same perceptron with a BatchNorm layer: it has buffers (running mean/var) besides parameters."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, out_features))


def layer_stack(width: int, depth: int) -> nn.Sequential:
    """``depth`` Linear(width, width) layers with ReLU between them (a few MiB of float32)."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(width, width)] + ([nn.ReLU()] if i < depth - 1 else [])
    return nn.Sequential(*layers)


def synthetic_regression(n_samples: int, in_features: int = 4, out_features: int = 2,
                         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed, deterministic regression data set ``(X, Y)``: the same on every rank and every run."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, in_features, generator=gen)
    true_w = torch.randn(in_features, out_features, generator=gen)
    y = torch.tanh(x @ true_w) + 0.1 * torch.randn(n_samples, out_features, generator=gen)
    return x, y


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters as one float64 CPU vector (a copy), in ``model.parameters()`` order."""
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def fingerprint(model: nn.Module) -> str:
    """A short hash of the exact parameter bytes: equal fingerprints mean bit-identical replicas."""
    return fingerprint_tensors(model.parameters())


def mse_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scale: float = 1.0) -> float:
    """Forward ``x``, the mean squared error against ``y`` (times ``scale``), and backward.

    The loss is the *mean* over the samples given, like every ``nn`` loss by default; under DDP
    this backward is where the gradient All-Reduce happens. Returns the loss value.
    """
    loss = nn.functional.mse_loss(model(x), y) * scale
    loss.backward()
    return float(loss.detach())


def flat_gradients(model: nn.Module) -> torch.Tensor:
    """All ``.grad`` tensors as one float64 CPU vector (zeros where a gradient is missing)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                      .to("cpu", torch.float64) for p in model.parameters()])


def rank_batch(x: torch.Tensor, y: torch.Tensor, rank: int, world_size: int, per_rank_batch: int,
               step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s mini-batch of step ``step``: the global batch ``step`` has N·(B/N) rows, cut in rank order."""
    start = (step * world_size + rank) * per_rank_batch
    return x[start:start + per_rank_batch], y[start:start + per_rank_batch]


def wrap_ddp(model: nn.Module, device: torch.device, **ddp_kwargs) -> nn.Module:
    """Move ``model`` to ``device`` and wrap it in DDP (one GPU per rank with CUDA, as torchrun does)."""
    from torch.nn.parallel import DistributedDataParallel

    from .primitives import device_ids

    return DistributedDataParallel(model.to(device), device_ids=device_ids(device), **ddp_kwargs)


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors``: what the allocator really holds for them
    (a view or a tensor sharing a flat buffer counts once, with the whole buffer)."""
    storages = {}
    for t in tensors:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def fingerprint_tensors(tensors) -> str:
    """The same kind of short hash as :func:`fingerprint`, for any tensors (results, optimizer state)."""
    import hashlib

    digest = hashlib.sha256()
    for t in tensors:
        digest.update(t.detach().to("cpu").contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (FSDP), or the tensor itself (DDP)."""
    return t.to_local() if hasattr(t, "to_local") else t


def held(tensors) -> dict:
    """Elements and bytes this rank really stores for ``tensors`` (its own shard for DTensors)."""
    local = [local_shard(t) for t in tensors]
    return {"numel": sum(t.numel() for t in local), "bytes": sum(t.numel() * t.element_size() for t in local)}


def shard_with_fsdp(model: nn.Module, device: torch.device, world_size: int) -> nn.Module:
    """FSDP2: shard every Linear layer, then the root (bottom-up, as the PyTorch docs ask)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)
