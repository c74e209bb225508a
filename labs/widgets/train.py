"""Chapter 6 live control: pick N, the global batch and the epochs, train on real ranks, draw the curves."""

from __future__ import annotations

from ..launch import run
from ..viz.train import learning_curves_figure


def training_explorer(max_ranks: int = 8):
    """Sliders for N, B and the epochs; a button runs the ``train`` lab and draws DDP vs one process."""
    import ipywidgets as widgets
    from IPython.display import display

    n = widgets.IntSlider(value=4, min=1, max=max_ranks, description="N (랭크)")
    batch = widgets.Dropdown(options=[48, 96, 192], value=96, description="B (전역 배치)")
    epochs = widgets.IntSlider(value=6, min=2, max=12, description="에폭")
    button = widgets.Button(description="실제 랭크로 학습", icon="play", button_style="primary")
    out = widgets.Output()

    def launch(_):
        with out:
            out.clear_output(wait=True)
            print(f"랭크 {n.value}개를 실제 프로세스로 띄워 학습하는 중…")
            result = run("train", nproc=n.value, global_batch=batch.value, epochs=epochs.value)
            out.clear_output(wait=True)
            learning_curves_figure(result).show()
            display(result)

    button.on_click(launch)
    return widgets.VBox([widgets.HBox([n, batch, epochs]), button, out])
