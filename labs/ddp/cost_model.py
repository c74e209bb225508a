"""Chapter 8: the α–β cost model of a ring All-Reduce, t = 2(N-1)/N · S/BW + 2(N-1)·α.

Each of N ranks sends 2(N-1) chunks of S/N bytes: a bandwidth term (the bytes one rank sends,
divided by BW) and a latency term (one fixed cost α per step). nccl-tests reports the first
term's rate as busbw = algbw · 2(N-1)/N.
"""

from __future__ import annotations

import math

import torch


def bus_factor(world_size: int) -> float:
    """busbw / algbw for All-Reduce: each rank sends and receives 2(N-1)/N · S (nccl-tests)."""
    return 2 * (world_size - 1) / world_size


def fit_cost_model(sizes: list[int], seconds: list[float], world_size: int) -> dict | None:
    """Least squares for t = 2(N-1)/N · S/BW + 2(N-1)·α over messages of ``sizes`` bytes that took ``seconds``.

    Relative errors are minimized (each equation is divided by its t), so 4 KB counts as much
    as 64 MB. Returns α (s), BW (bytes/s), R² of log t and the largest relative error, or
    ``None`` when N = 1 (nothing is sent) or there are fewer than two sizes.
    """
    if world_size < 2 or len(sizes) < 2:
        return None
    volume = torch.tensor([bus_factor(world_size) * size for size in sizes], dtype=torch.float64)
    steps = torch.full_like(volume, 2.0 * (world_size - 1))
    t = torch.tensor(seconds, dtype=torch.float64)
    design = torch.stack([volume, steps], dim=1) / t[:, None]
    coef = torch.linalg.lstsq(design, torch.ones_like(t)[:, None]).solution.flatten()
    inv_bw, alpha = float(coef[0]), float(coef[1])
    predicted = (volume * inv_bw + steps * alpha).clamp_min(1e-12)
    log_t = t.log()
    r2 = 1 - float(((log_t - predicted.log()) ** 2).sum() / ((log_t - log_t.mean()) ** 2).sum())
    return {"alpha_s": alpha, "bandwidth": 1 / inv_bw if inv_bw > 0 else math.inf, "r2_log": r2,
            "max_rel_error": float(((predicted - t) / t).abs().max())}


def model_time(fit: dict, size: float, world_size: int) -> float:
    """The fitted cost model's time (seconds) for an All-Reduce of ``size`` bytes on N ranks."""
    return bus_factor(world_size) * size / fit["bandwidth"] + 2 * (world_size - 1) * fit["alpha_s"]
