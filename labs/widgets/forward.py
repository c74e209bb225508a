"""Chapter 2 live control: pick N and the number of iterations, run the ``forward`` lab, draw it."""

from __future__ import annotations

from ..launch import run
from ..viz.forward import collective_timeline_figure, loss_figure
from . import launch_panel


def collective_explorer(max_ranks: int = 4, max_iterations: int = 6):
    """Sliders for N and iterations; the button runs ``forward`` on N real ranks and draws the counts."""
    import ipywidgets as widgets

    n = widgets.IntSlider(value=2, min=1, max=max_ranks, description="N (랭크)")
    iterations = widgets.IntSlider(value=4, min=2, max=max_iterations, description="반복 수")

    def run_and_draw() -> list:
        result = run("forward", nproc=n.value, iterations=iterations.value)
        return [collective_timeline_figure(result.data["counts"], result.data["items"]),
                loss_figure(result.data["losses"], result.data["mean_losses"]), result]

    return launch_panel([n, iterations], run_and_draw)
