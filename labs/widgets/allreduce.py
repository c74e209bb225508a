"""Chapter 4 live control: pick N, run the ring All-Reduce on N real ranks and replay its steps."""

from __future__ import annotations

from ..launch import run
from ..viz.allreduce import ring_steps_figure
from . import launch_panel


def ring_explorer(max_ranks: int = 8):
    """A slider for N and a button that runs the ``allreduce`` lab (small tensor) and draws its ring."""
    import ipywidgets as widgets

    n = widgets.IntSlider(value=3, min=1, max=max_ranks, description="N (랭크)")
    per_chunk = widgets.IntSlider(value=1, min=1, max=3, description="청크당 원소")

    def run_and_draw() -> list:
        result = run("allreduce", nproc=n.value, numel=10_007, repeats=1, demo_per_chunk=per_chunk.value)
        return [ring_steps_figure(result.ranks, per_chunk.value), result]

    return launch_panel([n, per_chunk], run_and_draw)
