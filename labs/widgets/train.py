"""Chapter 6 live control: pick N, the global batch and the epochs, train on real ranks, draw the curves."""

from __future__ import annotations

from ..launch import run
from ..viz.train import learning_curves_figure, phase_table
from . import launch_panel


def training_explorer(max_ranks: int = 8):
    """Sliders for N, B and the epochs; a button runs the ``train`` lab and draws DDP vs one process."""
    import ipywidgets as widgets

    n = widgets.IntSlider(value=4, min=1, max=max_ranks, description="N (랭크)")
    batch = widgets.Dropdown(options=[48, 96, 128], value=96, description="B (전역 배치)")
    epochs = widgets.IntSlider(value=6, min=2, max=12, description="에폭")

    def run_and_draw() -> list:
        result = run("train", nproc=n.value, global_batch=batch.value, epochs=epochs.value)
        return [learning_curves_figure(result), phase_table(result), result]

    return launch_panel([n, batch, epochs], run_and_draw, label="실제 랭크로 학습")
