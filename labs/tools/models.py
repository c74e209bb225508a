"""Small models the labs train (big enough to have several layers, small enough for 2 CPU cores), their
wrappers (DDP, FSDP2) and what a rank stores for them."""

from __future__ import annotations

from typing import Any, Callable, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

from .comms import CollectiveCounter
from .primitives import device_ids


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


def wrap_ddp(model: nn.Module, device: torch.device, **ddp_kwargs: Any) -> DistributedDataParallel:
    """Move ``model`` to ``device`` and wrap it in DDP (one GPU per rank with CUDA, as torchrun does)."""
    return DistributedDataParallel(model.to(device), device_ids=device_ids(device), **ddp_kwargs)


def ddp_bucket_bytes(model: nn.Module, device: torch.device, x: torch.Tensor, y: torch.Tensor) -> dict[str, int]:
    """DDP with its defaults (``gradient_as_bucket_view=False``) over a copy of ``model``, two backwards on ``(x, y)``:
    the bytes of the reducer's flat buckets (recorded by a comm hook that then all-reduces as the default does)
    and of the gradients beside them."""
    import copy

    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = wrap_ddp(copy.deepcopy(model), device)
    buckets: dict[int, torch.Tensor] = {}

    def recording_allreduce(state, bucket):
        buckets[bucket.index()] = bucket.buffer()  # 리듀서가 All-Reduce 하는 평평한 버킷 텐서 그 자체
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, recording_allreduce)
    for _ in range(2):  # 둘째 역전파는 다시 짠 버킷으로(7.7절)
        ddp.zero_grad(set_to_none=True)
        mse_backward(ddp, x, y)
    return {"buckets": storage_bytes(buckets.values()), "grads": storage_bytes(p.grad for p in ddp.parameters())}


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


def adam_step_memory(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> dict:
    """One Adam step; what the rank then holds, and the collectives of forward and backward."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    with CollectiveCounter() as forward:
        loss = nn.functional.mse_loss(model(x), y)
    with CollectiveCounter() as backward:
        loss.backward()
    optimizer.step()
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    params = list(model.parameters())
    return {"params": held(params), "grads": held(p.grad for p in params if p.grad is not None),
            "optimizer_state": held(state), "shapes": [list(local_shard(p).shape) for p in params],
            "forward": forward.items, "backward": backward.items}


def shard_with_fsdp(model: nn.Module, device: torch.device, world_size: int,
                    wrap: Callable[[nn.Module], bool] | None = None) -> nn.Module:
    """FSDP2: shard every Linear layer (or every child ``wrap`` accepts), then the root (bottom-up, as the
    PyTorch docs ask)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    for layer in model.children():
        if wrap(layer) if wrap is not None else isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the module itself, now an FSDPModule too
    return model


def index_dataset(size: int) -> Dataset[int]:
    """The dataset ``range(size)`` (sample i is the index i): DistributedSampler reads only its length."""
    return cast("Dataset[int]", range(size))
