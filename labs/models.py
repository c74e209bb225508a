"""Small models the labs train: big enough to have several layers, small enough for 2 CPU cores."""

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
    import hashlib

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().to("cpu").contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]
