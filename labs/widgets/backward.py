"""Chapter 3 live control: pick N and B/N, run the ``backward`` lab, animate its gradients."""

from __future__ import annotations

from ..launch import run
from ..viz.backward import gradient_allreduce_figure
from . import launch_panel


def gradient_explorer(max_ranks: int = 8, max_batch: int = 32):
    """Sliders for N and the per-rank batch; the button runs ``backward`` on N real ranks."""
    import ipywidgets as widgets

    n = widgets.IntSlider(value=4, min=1, max=max_ranks, description="N (랭크)")
    per_rank = widgets.IntSlider(value=8, min=1, max=max_batch, description="B/N")

    def run_and_draw() -> list:
        result = run("backward", nproc=n.value, per_rank_batch=per_rank.value)
        return [gradient_allreduce_figure(result.ranks, result.data["mean"]), result]

    return launch_panel([n, per_rank], run_and_draw)
